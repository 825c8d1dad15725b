"""The runner's relay between the grader and a submission's process, driven for real (a warm
runner without the sandbox around it): a process that writes out of turn, dies between a reply
and the grader's go-ahead, or floods its progress pipe ends its own submission, never the next
one's, and never the runner."""

import json
import time
from pathlib import Path

import pytest

from grader.sandbox.client import Limits, Runner, RunnerDied

HONEST = [{"kind": "code", "source": "print('an honest student')"}]


def code(source: str) -> list[dict]:
    return [{"kind": "code", "source": source}]


def write(fd: int, header: dict, data: bytes = b"") -> str:
    """Code a student's cell can run to write a framed message on one of its pipes."""
    message = json.dumps(header).encode() + b"\n" + data
    return f"os.write({fd}, {message!r})\n"


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    warm = Runner(Path(tmp_path_factory.mktemp("runner")) / "worker-0",
                  Limits(cell_timeout=20, budget=60), sandboxed=False)
    warm.start()
    yield warm
    warm.close()


def run(runner: Runner, cells: list[dict], on_graded=lambda grade_id, exchange: None) -> dict:
    answer, _ = runner.run(runner.limits.job(cells, {}), on_graded)
    return answer


def test_an_honest_job_finishes(runner):
    assert run(runner, HONEST)["status"] == "finished"


def test_a_reply_before_any_request_is_out_of_turn(runner):
    cells = code("import os\n" + write(4, {"at": "check_x"}) + write(4, {"reply": [1]}, b"x")
                 + "import time\ntime.sleep(30)")
    asked = []
    answer = run(runner, cells, lambda grade_id, exchange: asked.append(grade_id))
    assert answer["status"] == "crashed" and "out of turn" in answer["reason"]
    assert run(runner, HONEST)["status"] == "finished"


def test_a_done_while_a_check_waits_is_out_of_turn(runner):
    cells = code("import os\n" + write(4, {"at": "check_x"}) + "os.read(5, 1 << 20)\n"
                 + write(4, {"done": True}) + "import time\ntime.sleep(30)")
    answer = run(runner, cells, lambda grade_id, exchange: exchange(b"a request"))
    assert answer["status"] == "crashed" and "out of turn" in answer["reason"]


def test_a_go_ahead_for_a_process_that_died_is_not_the_next_job(runner):
    """It replies, then exits before the grader says go on: the grader's late go-ahead must not
    be read as the next student's job (who would then crash)."""
    cells = code("import os\n" + write(4, {"at": "check_x"}) + "os.read(5, 1 << 20)\n"
                 + write(4, {"reply": [1]}, b"x") + "os._exit(0)\n")
    def judged_slowly(grade_id, exchange):
        exchange(b"a request")
        time.sleep(0.2)  # the process exits meanwhile

    for _ in range(3):
        run(runner, cells, judged_slowly)
        assert run(runner, HONEST)["status"] == "finished"


def test_a_flooded_progress_pipe_is_ignored(runner):
    cells = code("import os\n" + "os.write(3, b'9' * 5000 + b'\\n')\n" + "print('still here')")
    assert run(runner, cells)["status"] == "finished"
    assert run(runner, HONEST)["status"] == "finished"


def test_a_closed_runner_is_never_started_again(tmp_path):
    closed = Runner(tmp_path / "worker-0", Limits(), sandboxed=False)
    closed.close()
    with pytest.raises(RunnerDied, match="stopped"):
        closed.start()
    answer, _ = closed.run(closed.limits.job(HONEST, {}), lambda grade_id, exchange: None)
    assert answer["status"] == "crashed" and closed.process is None


def test_a_flood_larger_than_the_pipe_is_read_to_the_end(runner):
    """A pipe write over 4 KiB may be split, so the runner's own "done" can still wait behind a
    flood when the process is gone: it is read before the end is judged (under load it was not,
    and a finished submission looked crashed)."""
    cells = code("import os\n" + "os.write(3, b'9' * 200000 + b'\\n')")
    for _ in range(5):
        answer = run(runner, cells)
        assert answer["status"] == "finished", answer
