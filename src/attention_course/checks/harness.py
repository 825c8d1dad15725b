"""The student's side of checks that need more than a call of the student's function.

Each function here takes the student's objects and plain values (tensors, numbers, strings,
dicts of tensors) and returns what a check calls on every case. Under the grader it runs in the
student's process, so it holds no reference and no answer: only scaffolding.
"""

import copy

import torch
from torch import nn

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
