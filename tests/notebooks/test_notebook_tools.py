"""The tests' notebook client looks for a kernel's reply in short polls, so a wake-up that
zmq.asyncio misses costs at most one of them instead of the whole cell timeout; nbval starts a
second kernel when the first dies while starting."""

from queue import Empty

import pytest

from helpers.notebooks import in_slices, start_again_if_it_dies


class MissedWakeUp:
    """A channel whose message is already there but whose polls only see it when they end, as
    zmq.asyncio's do after a missed wake-up; it counts time in polls, without sleeping."""

    def __init__(self, arrives_at: float | None):
        self.arrives_at, self.clock, self.polls = arrives_at, 0.0, []

    async def get_msg(self, timeout=None):
        assert timeout is not None, "a poll without an end never sees the message"
        self.polls.append(timeout)
        self.clock += timeout
        if self.arrives_at is not None and self.clock >= self.arrives_at:
            return {"msg_type": "execute_reply"}
        raise Empty


def run(channel: MissedWakeUp, timeout: float | None, monkeypatch) -> dict:
    """The sliced get_msg, driven by hand: the fake channel never waits, so neither does it
    (and the test needs no event loop of its own beside whatever the suite left running)."""
    monkeypatch.setattr("helpers.notebooks.time.monotonic", lambda: channel.clock)
    waiting = in_slices(channel.get_msg, every_s=1.0)(timeout=timeout)
    try:
        waiting.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("get_msg waited for something")


def test_a_reply_missed_by_the_wake_up_is_found_within_a_second(monkeypatch):
    channel = MissedWakeUp(arrives_at=0.2)
    assert run(channel, 120, monkeypatch) == {"msg_type": "execute_reply"}
    assert channel.polls == [1.0]  # not one poll of 120 s


def test_waiting_without_a_timeout_still_polls_in_slices(monkeypatch):
    channel = MissedWakeUp(arrives_at=3.5)
    assert run(channel, None, monkeypatch)["msg_type"] == "execute_reply"
    assert channel.polls == [1.0] * 4


def test_no_reply_by_the_timeout_is_still_a_timeout(monkeypatch):
    channel = MissedWakeUp(arrives_at=None)
    with pytest.raises(Empty):
        run(channel, 2.5, monkeypatch)
    assert channel.polls == [1.0, 1.0, 0.5]


def kernel_start(deaths: int):
    """A kernel start whose first ``deaths`` kernels die before answering."""
    started = []

    def start():
        started.append(1)
        if len(started) <= deaths:
            raise RuntimeError("Kernel died before replying to kernel_info")
        return "kernel"
    return start, started


def test_nbval_starts_a_second_kernel_when_the_first_dies(capsys):
    start, started = kernel_start(deaths=1)
    assert start_again_if_it_dies(start)() == "kernel" and len(started) == 2
    assert "starting another kernel" in capsys.readouterr().err


def test_a_kernel_that_dies_twice_fails_the_notebook():
    start, started = kernel_start(deaths=2)
    with pytest.raises(RuntimeError, match="died"):
        start_again_if_it_dies(start)()
    assert len(started) == 2
