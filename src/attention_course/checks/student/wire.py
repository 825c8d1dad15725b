"""Plain values on the wire between the grader and the student's process: no code travels.

A message is one JSON line, then the raw bytes of every tensor in it, back to back:

    {"value": <tree>, "blob": <bytes that follow>}\\n<bytes>

where a tree is JSON (null, booleans, numbers, strings, lists, objects with string keys) and a
few tagged objects: ``{"~": "tensor", "dtype": "float32", "shape": [2, 3], "at": 0}``, a tuple,
a dtype, a device, and ``{"~": "other", "type": "Foo"}`` for anything else the student's code
returned (judged by its type name alone). Reading a message never runs code, never unpickles,
and checks every size against the bytes that are actually there before it allocates anything:
the header is at most ``MAX_HEADER`` bytes, and the tensors together claim at most the bytes
that follow it, each byte once (no two tensors may share them), so what a message becomes in
memory is bounded by its length.
"""

import functools
import json
import math

import torch
from torch import Tensor, nn

DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
    torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)}
MAX_DIMS = 16
MAX_META_ELEMENTS = 1 << 40  # a meta tensor holds no data, but torch refuses absurd sizes
MAX_HEADER = 1 << 20  # an honest message's JSON is a few kilobytes: the data is in the blob
PLAIN = (bool, int, float, str, type(None))


class Malformed(ValueError):
    """A message that is not a well-formed plain value."""


# ---------------------------------------------------------------- writing

def dumps(value, lenient: bool = False) -> bytes:
    """``value`` as a message. ``lenient``: what is not a plain value is sent as its type name
    (the student's outputs); otherwise it is an error (the grader's own requests)."""
    blob = bytearray()
    tree = _tree(value, blob, lenient)
    header = json.dumps({"value": tree, "blob": len(blob)}).encode()
    return header + b"\n" + bytes(blob)


def _tree(value, blob: bytearray, lenient: bool):
    if type(value) in (Tensor, nn.Parameter) and value.is_meta:
        return {"~": "meta", "dtype": str(value.dtype).removeprefix("torch."),
                "shape": list(value.shape)}
    if type(value) in (Tensor, nn.Parameter):
        tensor = value.detach().cpu().contiguous()
        at = len(blob)
        blob += tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
        return {"~": "tensor", "dtype": str(tensor.dtype).removeprefix("torch."),
                "shape": list(tensor.shape), "at": at}
    if type(value) in PLAIN:
        return value
    if type(value) is list:
        return [_tree(v, blob, lenient) for v in value]
    if type(value) is tuple:
        return {"~": "tuple", "items": [_tree(v, blob, lenient) for v in value]}
    if isinstance(value, dict) and all(type(k) is str for k in value):  # state dicts too
        return {"~": "dict", "items": {k: _tree(v, blob, lenient) for k, v in value.items()}}
    if isinstance(value, torch.dtype):
        return {"~": "dtype", "name": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"~": "device", "name": str(value)}
    if lenient:
        return {"~": "other", "type": type(value).__name__[:100]}
    raise TypeError(f"not a plain value: {type(value).__name__}")


# ---------------------------------------------------------------- reading

def loads(data: bytes):
    """The value of a message; ``Malformed`` for anything else, never another exception."""
    header, newline, blob = bytes(data).partition(b"\n")
    if len(header) > MAX_HEADER:
        raise Malformed(f"a header of {len(header):,} bytes (at most {MAX_HEADER:,})")
    try:
        message = json.loads(header)
        if not newline or type(message) is not dict or message.get("blob") != len(blob):
            raise Malformed("the message's length does not match what it announces")
        return _value(message["value"], _Blob(memoryview(blob)))
    except Malformed:
        raise
    except (ValueError, KeyError, TypeError, RecursionError, OverflowError) as err:
        raise Malformed(f"{type(err).__name__}: {str(err)[:200]}") from None


class _Blob:
    """The bytes after the header, handed out once each."""

    def __init__(self, data: memoryview):
        self.data, self.claimed = data, 0

    def take(self, at: int, size: int) -> memoryview:
        if not 0 <= at <= len(self.data) or size > len(self.data) - at:
            raise Malformed(f"a tensor claims bytes {at}..{at + size} of {len(self.data)} sent")
        self.claimed += size
        if self.claimed > len(self.data):
            raise Malformed("the tensors claim more bytes than were sent (some share them)")
        return self.data[at:at + size]


def _value(tree, blob: _Blob):
    if type(tree) in PLAIN:
        return tree
    if type(tree) is list:
        return [_value(v, blob) for v in tree]
    if type(tree) is not dict:
        raise Malformed(f"unexpected {type(tree).__name__}")
    kind = tree.get("~")
    if kind == "tensor":
        return _tensor(tree, blob)
    if kind == "meta":
        return _meta(tree)
    if kind == "tuple":
        return tuple(_value(v, blob) for v in _of(tree["items"], list))
    if kind == "dict":
        return {str(k): _value(v, blob) for k, v in _of(tree["items"], dict).items()}
    if kind == "dtype":
        return _dtype(tree["name"])
    if kind == "device":
        return torch.device(_of(tree["name"], str)[:32])
    if kind == "other":  # stands in for the student's non-tensor: judged by its type name
        return _stand_in(_of(tree["type"], str)[:100] or "object")()
    raise Malformed(f"unknown kind {kind!r}")


@functools.cache
def _stand_in(name: str) -> type:
    return type(name, (), {})


def _shape(tree: dict) -> list[int]:
    shape = _of(tree["shape"], list)
    if len(shape) > MAX_DIMS or any(type(n) is not int or n < 0 for n in shape):
        raise Malformed(f"bad shape {shape[:MAX_DIMS + 1]}")
    return shape


def _meta(tree: dict) -> Tensor:
    dtype, shape = _dtype(tree["dtype"]), _shape(tree)
    if math.prod(shape) > MAX_META_ELEMENTS:
        raise Malformed(f"a meta tensor of {math.prod(shape)} elements")
    return torch.empty(shape, dtype=dtype, device="meta")


def _tensor(tree: dict, blob: _Blob) -> Tensor:
    dtype, shape = _dtype(tree["dtype"]), _shape(tree)
    size = math.prod(shape) * dtype.itemsize  # exact: Python integers
    raw = bytearray(blob.take(_of(tree["at"], int), size))  # a copy: the tensor owns its memory
    flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    return flat.view(dtype).reshape(shape)


def _dtype(name) -> torch.dtype:
    if type(name) is not str or name not in DTYPES:
        raise Malformed(f"unknown dtype {str(name)[:40]!r}")
    return DTYPES[name]


def _of(value, kind: type):
    if type(value) is not kind:
        raise Malformed(f"expected {kind.__name__}, got {type(value).__name__}")
    return value
