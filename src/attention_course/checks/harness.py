"""The student's side of checks that need more than a call of the student's function.

Each function here takes the student's objects and plain values (tensors, numbers, strings,
dicts of tensors) and returns what a check calls on every case. Under the grader it runs in the
student's process, so it holds no reference and no answer: only scaffolding.
"""

import copy

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["ModuleUnderTest"]


class ModuleUnderTest:
    """The student's ``nn.Module`` class, built with ``init`` and loaded with the reference's
    ``state`` (its weights), in eval mode; a float64 copy answers the float64 cases."""

    def __init__(self, cls, init: dict, state: dict):
        try:
            module = cls(**init)
            module.load_state_dict(state)
        except Exception as err:
            raise AssertionError(
                f"could not build your module and load the reference weights "
                f"({type(err).__name__}: {err}). Keep the constructor as given.") from None
        self.modules = {torch.float32: module.eval(),
                        torch.float64: copy.deepcopy(module).double().eval()}

    def __call__(self, x, *args, **kwargs):
        return self.modules[x.dtype](x, *args, **kwargs)

    def probe_parameters(self) -> dict[str, nn.Parameter]:
        return dict(self.modules[torch.float64].named_parameters())


# ---------------------------------------------------------------- lesson 07: tiled attention

class NotTiled(RuntimeError):
    """Raised inside a tiled attention function that builds a tensor as large as every query
    against every key."""


class WithinBlocks:
    """The student's tiled attention function, stopped with ``NotTiled`` the moment it creates
    a tensor larger than twice its largest input and than twice a (T, block) slice of scores
    (with Dv or D in place of the block where wider): tiled attention never needs one, while the
    (T, S) scores of attention in one piece are larger here. Views and in-place results are no
    new tensors."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, query, key, value, *args, **kwargs):
        tensors = [a for a in (query, key, value) if isinstance(a, torch.Tensor)]
        limit = 2 * max([a.numel() for a in tensors], default=0)
        if len(tensors) == 3 and query.ndim >= 2 and key.ndim >= 2 and "block_size" in kwargs:
            batch = max(query[..., 0, 0].numel(), key[..., 0, 0].numel())  # B * H, say
            widest = max(kwargs["block_size"], query.shape[-1], value.shape[-1])
            limit = max(limit, 2 * batch * query.shape[-2] * widest)  # rows times a block
        with _SizeLimit(limit):
            return self.fn(query, key, value, *args, **kwargs)


class _SizeLimit(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # nothing here is compiled: no wrapper, which would import torch._dynamo

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outputs = out if isinstance(out, tuple | list) else (out,)
        for described, result in zip(func._schema.returns, outputs, strict=False):
            if (described.alias_info is None and isinstance(result, torch.Tensor)
                    and result.numel() > self.limit):
                raise NotTiled(
                    f"a tensor of shape {tuple(result.shape)} ({result.numel()} numbers) was "
                    f"created, more than tiled attention ever needs here ({self.limit}): it "
                    f"holds one block of scores at a time, never the whole (T, S) matrix")
        return out


__all__ += ["WithinBlocks"]
