"""The framing of every grading pipe (grader/sandbox/framing.py): whole messages out of bytes
that come in pieces, and a refusal for anything no honest writer sends."""

import pytest

from grader.sandbox.framing import Frames, FramingError, encode, sizes


def replies(header: dict) -> int:
    return sizes(header, "reply")


def frames(**limits) -> Frames:
    return Frames(replies, **limits)


def test_a_message_read_in_pieces_comes_out_whole_and_once():
    message = encode({"reply": [3, 2]}, b"abcde") + encode({"at": "x"})
    reader = frames()
    got = []
    for byte in message:  # one byte at a time, as a pipe may deliver them
        reader.feed(bytes([byte]))
        while (whole := reader.pop()) is not None:
            got.append(whole)
    assert got == [({"reply": [3, 2]}, b"abcde"), ({"at": "x"}, b"")]
    assert reader.pop() is None


def test_two_messages_in_one_read_both_come_out():
    reader = frames()
    reader.feed(encode({"reply": [1]}, b"a") + encode({"reply": [2]}, b"bc"))
    assert [reader.pop(), reader.pop(), reader.pop()] == [
        ({"reply": [1]}, b"a"), ({"reply": [2]}, b"bc"), None]


def test_a_large_message_is_kept_whole():
    data = bytes(range(256)) * 4096  # 1 MiB
    reader = frames()
    message = encode({"reply": [len(data)]}, data)
    for start in range(0, len(message), 65536):
        reader.feed(message[start:start + 65536])
    assert reader.pop() == ({"reply": [len(data)]}, data)


@pytest.mark.parametrize("line", [
    b"[1, 2]", b'"text"', b"null", b"", b"{not json", b'{"reply": "12"}', b'{"reply": [-1]}',
    b'{"reply": [true]}', b'{"reply": [1.5]}', b'{"reply": {"a": 1}}', b"\xff\xfe",
    b"[" * 100_000 + b"]" * 100_000])
def test_a_line_that_is_not_a_message_is_refused(line):
    reader = frames(max_header=None)
    reader.feed(line + b"\n")
    with pytest.raises(FramingError, match="not a message"):
        reader.pop()


def test_an_endless_line_is_refused_before_its_end_and_after_it():
    reader = frames(max_header=100)
    reader.feed(b"x" * 101)
    with pytest.raises(FramingError, match="endless"):
        reader.pop()
    whole = frames(max_header=100)  # the newline came in the same read
    whole.feed(b'{"at": "' + b"x" * 200 + b'"}\n')
    with pytest.raises(FramingError, match="endless"):
        whole.pop()


def test_a_message_larger_than_allowed_is_refused_before_its_data_comes():
    reader = frames(max_size=10)
    reader.feed(encode({"reply": [6, 5]}))  # 11 bytes announced, none sent
    with pytest.raises(FramingError, match="11 bytes"):
        reader.pop()
    exact = frames(max_size=10)
    exact.feed(encode({"reply": [10]}, b"0123456789"))
    assert exact.pop() == ({"reply": [10]}, b"0123456789")


def test_sizes_reads_a_list_or_the_values_of_a_dict():
    assert sizes({"reply": [1, 2]}, "reply") == 3
    assert sizes({"files": {"a": 4}}, "files", dict) == 4
    assert sizes({}, "reply") == 0
    with pytest.raises(ValueError):
        sizes({"files": [4]}, "files", dict)
