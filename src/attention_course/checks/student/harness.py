"""The student's side of checks that need more than a call of the student's function.

Each function here takes the student's objects and plain values (tensors, numbers, strings,
dicts of tensors) and returns what a check calls on every case. Under the grader it runs in the
student's process, so it holds no reference and no answer: only scaffolding.
"""

import copy
import zlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["ModuleUnderTest"]


# ---------------------------------------------------------------- lesson 07: tiled attention

class NotTiled(RuntimeError):
    """Raised inside a tiled attention function that builds a tensor as large as every query
    against every key."""


class WithinBlocks:
    """The student's tiled attention function, stopped with ``NotTiled`` the moment it creates
    a tensor larger than twice its largest input and than twice a (T, block) slice of scores
    (with Dv or D in place of the block where wider), or, where S > block and T != S, a
    floating-point one whose last axis spans all S keys (as scores of a block of queries against
    every key do) and that is no copy of an input: tiled attention reads one block of keys at a
    time and never needs either, while attention in one piece, or one block of queries at a
    time, does. A bool mask over every key is allowed; views and in-place results are no new
    tensors."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, query, key, value, *args, **kwargs):
        tensors = [a for a in (query, key, value) if isinstance(a, torch.Tensor)]
        limit, every_key = 2 * max([a.numel() for a in tensors], default=0), None
        if len(tensors) == 3 and query.ndim >= 2 and key.ndim >= 2 and "block_size" in kwargs:
            batch = max(query[..., 0, 0].numel(), key[..., 0, 0].numel())  # B * H, say
            widest = max(kwargs["block_size"], query.shape[-1], value.shape[-1])
            limit = max(limit, 2 * batch * query.shape[-2] * widest)  # rows times a block
            T, S = query.shape[-2], key.shape[-2]
            if S > kwargs["block_size"] and T != S:
                every_key = S
        with _SizeLimit(limit, every_key, {a.numel() for a in tensors}):
            return self.fn(query, key, value, *args, **kwargs)


class _SizeLimit(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # nothing here is compiled: no wrapper, which would import torch._dynamo

    def __init__(self, limit: int, every_key: int | None = None, copies: set[int] = frozenset()):
        super().__init__()
        self.limit, self.every_key, self.copies = limit, every_key, copies

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outputs = out if isinstance(out, tuple | list) else (out,)
        for described, result in zip(func._schema.returns, outputs, strict=False):
            if described.alias_info is not None or not isinstance(result, torch.Tensor):
                continue
            if result.numel() > self.limit:
                raise NotTiled(
                    f"a tensor of shape {tuple(result.shape)} ({result.numel()} numbers) was "
                    f"created, more than tiled attention ever needs here ({self.limit}): it "
                    f"holds one block of scores at a time, never the whole (T, S) matrix")
            if (self.every_key is not None and result.is_floating_point() and result.ndim
                    and result.shape[-1] == self.every_key and result.numel() not in self.copies):
                raise NotTiled(
                    f"a tensor of shape {tuple(result.shape)} was created, a row for every one "
                    f"of the S = {self.every_key} keys: tiled attention reads the keys one "
                    f"block at a time, so no score row it builds spans all of them (a loop "
                    f"over blocks of queries still reads every key at once)")
        return out


__all__ += ["WithinBlocks"]


# ---------------------------------------------------------------- lesson 08: a backward pass

class ForwardAndBackward:
    """The student's function returning (out, lse) from its own ``torch.autograd.Function``,
    run forward and then backward with the given ``dout``, both inside the observed call (so
    that what the backward pass calls is watched for shortcuts like the forward's) and both
    under ``WithinBlocks``' size limit. Returns out, lse and the gradients of the query, the
    key and the value.

    The backward pass runs through the student's own graph by the autograd engine, the call
    ``torch.autograd.grad`` itself ends in: the check forbids the student's code
    ``torch.autograd.grad``, and this scaffolding must not count as calling it."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, query, key, value, dout, *args, **kwargs):
        inputs = tuple(x.detach().requires_grad_() for x in (query, key, value))

        def forward_and_backward(*inputs_and_settings, **settings):
            result = self.fn(*inputs_and_settings, **settings)
            out = result[0] if isinstance(result, tuple | list) and result else result
            if not (isinstance(out, torch.Tensor) and out.requires_grad):
                raise RuntimeError("no gradient reaches query, key or value: the output is cut "
                                   "off from them (is it the output of your Function's apply, "
                                   "not detached?)")
            if not _from_a_function_of(out, inputs):
                raise RuntimeError("the output does not come straight from your Function's "
                                   "apply on the query, the key and the value: autograd would "
                                   "differentiate the operations in between, not run your "
                                   "backward")
            grads = _engine_backward(out, dout, inputs)
            missing = [name for name, g in zip(("query", "key", "value"), grads, strict=True)
                       if g is None]
            if missing:
                raise RuntimeError(f"your backward gives no gradient to `{missing[0]}` (it "
                                   f"returned None in its place)")
            return (*(detach_all(result)), *(g.detach() for g in grads))

        return WithinBlocks(forward_and_backward)(*inputs, *args, **kwargs)


def detach_all(result) -> tuple:
    result = tuple(result) if isinstance(result, tuple | list) else (result,)
    return tuple(r.detach() if isinstance(r, torch.Tensor) else r for r in result)


def _from_a_function_of(out, inputs: tuple) -> bool:
    """Whether ``out`` is an output of a ``torch.autograd.Function`` applied to ``inputs``
    themselves, so that its backward alone gives their gradients."""
    node, leaves = out.grad_fn, {id(x) for x in inputs}
    if not isinstance(node, torch.autograd.function.BackwardCFunction):
        return False
    return all(fn is None or (type(fn).__name__ == "AccumulateGrad" and id(fn.variable) in leaves)
               for fn, _ in node.next_functions)


def _engine_backward(out, dout, inputs: tuple) -> tuple:
    """The gradients of ``out`` (weighted by ``dout``) with respect to ``inputs``: what
    ``torch.autograd.grad(out, inputs, dout, allow_unused=True)`` computes, by the engine
    it calls (without its Python frame, which the shortcut watch would record)."""
    from torch.autograd.variable import Variable

    return Variable._execution_engine.run_backward(
        (out,), (dout,), False, False, inputs, True, False)


__all__ += ["ForwardAndBackward"]


# ---------------------------------------------------------------- lesson 05


def seeded_parameters(module: nn.Module, seed: int) -> nn.Module:
    """Fill every parameter of ``module`` with values drawn from its own name and shape.

    Two modules whose parameters have the same names and shapes get the same weights: the
    student's module and the reference, and also a reference built with another width, which
    is how a wrong width is recognised.
    """
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            generator = torch.Generator().manual_seed(seed * 7919 + zlib.crc32(name.encode()))
            values = 0.5 * torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
            parameter.copy_(values.to(parameter.dtype))
    return module


class _InBothPrecisions:
    """A module in eval mode (in training mode when ``training``), and a float64 copy of it for
    the float64 cases. It is built on first use, inside the observed call: what the student's
    constructor raises (an unfinished one raises NotImplementedError) is then reported like any
    error of the student's code."""

    training = False

    def build(self) -> nn.Module:
        raise NotImplementedError

    def module(self, dtype: torch.dtype) -> nn.Module:
        """The float64 copy for float64 inputs, the float32 module for any other dtype."""
        if not hasattr(self, "_modules"):
            built = self.build()
            self._modules = {torch.float32: built.train(self.training),
                             torch.float64: copy.deepcopy(built).double().train(self.training)}
        return self._modules.get(dtype, self._modules[torch.float32])

    def __call__(self, x, *args, **kwargs):
        return self.module(x.dtype)(x, *args, **kwargs)

    def probe_parameters(self) -> dict[str, nn.Parameter]:
        return dict(self.module(torch.float64).named_parameters())


class ModuleUnderTest(_InBothPrecisions):
    """The student's ``nn.Module`` class, built with ``init`` and loaded with the reference's
    ``state`` (its weights), in eval mode, or in training mode when ``training``; a float64
    copy answers the float64 cases."""

    def __init__(self, cls, init: dict, state: dict, training: bool = False):
        self.cls, self.init, self.state, self.training = cls, init, state, training

    def build(self) -> nn.Module:
        module = self.cls(**self.init)
        try:
            module.load_state_dict(self.state)
        except Exception as err:
            raise AssertionError(
                f"could not load the course's weights ({', '.join(self.state)}) into your "
                f"module built with {self.init} ({type(err).__name__}: {err})") from None
        return module


class SeededModuleUnderTest(_InBothPrecisions):
    """The student's class built with ``init``; its parameters must have the ``names`` the
    contract gives them, and get ``seeded_parameters(module, seed)``."""

    def __init__(self, cls, init: dict, names: tuple, seed: int):
        self.cls, self.init, self.names, self.seed = cls, init, names, seed

    def build(self) -> nn.Module:
        module = self.cls(**self.init)
        found = [name for name, _ in module.named_parameters()]
        if sorted(found) != sorted(self.names):
            raise ValueError(
                f"your module's parameters are {', '.join(found) or 'none'}; the contract "
                f"names them {', '.join(self.names)}. Name the layers as the docstring says.")
        return seeded_parameters(module, self.seed)


class SettingsUnderTest:
    """The student's class under several settings: ``settings`` pairs each value of the
    constructor argument ``option`` with the parameter names the contract gives the module
    built with it; each is a ``SeededModuleUnderTest``, built on first use. Every case picks one
    with ``option=value``; the gradient probe reads the last one called."""

    def __init__(self, cls, init: dict, option: str, settings: tuple, seed: int):
        self.option = option
        self.settings = {value: SeededModuleUnderTest(cls, init | {option: value}, tuple(names),
                                                      seed)
                         for value, names in settings}
        self.last = next(iter(self.settings))

    def __call__(self, x, **setting):
        self.last = setting[self.option]
        return self.settings[self.last](x)

    def probe_parameters(self) -> dict[str, nn.Parameter]:
        return self.settings[self.last].probe_parameters()


class StandInAttention(nn.Module):
    """Stands in for the block's attention layer in the block check: a causal running mean of
    x, linearly mixed, returned with its (B, H, T, T) averaging weights."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.mix = nn.Linear(d_model, d_model)

    def forward(self, x):
        T = x.shape[-2]
        weights = torch.ones(T, T, dtype=x.dtype, device=x.device).tril()
        weights = weights / weights.sum(dim=-1, keepdim=True)  # (T, T), rows sum to 1
        out = self.mix(weights @ x)  # (T, T) @ (B, T, C) -> (B, T, C)
        return out, weights.expand(*x.shape[:-2], self.n_heads, T, T).clone()


class StandInMLP(nn.Module):
    """Stands in for the block's MLP in the block check: one linear layer and a tanh."""

    def __init__(self, d_model: int):
        super().__init__()
        self.layer = nn.Linear(d_model, d_model)

    def forward(self, x):
        return torch.tanh(self.layer(x))


def stand_in_block_parts(d_model: int, n_heads: int) -> dict[str, nn.Module]:
    """The four parts of a block as the block check builds them: two LayerNorms and stand-ins
    for the attention layer and the MLP, so that the check tests the forward alone."""
    return {"attn_norm": nn.LayerNorm(d_model), "attn": StandInAttention(d_model, n_heads),
            "mlp_norm": nn.LayerNorm(d_model), "mlp": StandInMLP(d_model)}


class BlockUnderTest(_InBothPrecisions):
    """The student's block class with its four parts replaced by ``stand_in_block_parts``
    loaded with ``state``: only the student's forward runs. The given constructor is not
    called, so an unfinished attention layer or MLP does not stop this check."""

    def __init__(self, cls, d_model: int, n_heads: int, state: dict):
        self.cls, self.d_model, self.n_heads, self.state = cls, d_model, n_heads, state

    def build(self) -> nn.Module:
        if not (isinstance(self.cls, type) and issubclass(self.cls, nn.Module)):
            raise TypeError("your DecoderBlock is not an nn.Module class: keep the given "
                            "class line and constructor")
        block = self.cls.__new__(self.cls)
        nn.Module.__init__(block)
        for name, part in stand_in_block_parts(self.d_model, self.n_heads).items():
            setattr(block, name, part)
        block.load_state_dict(self.state)
        return block


class StandInBlockMLP(StandInMLP):
    """Stands in for the MLP class given to the student's block: the constructor of an MLP
    (d_model, d_ff, dropout), the forward of ``StandInMLP``."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__(d_model)


class WholeBlockUnderTest(_InBothPrecisions):
    """The student's block class built whole, ``cls(**init, norm=..., mlp=StandInBlockMLP)``
    with the norm class named in ``norm`` ("LayerNorm" or "stand-in"), and loaded with
    ``state``. The MLP is a stand-in, so an unfinished MLP does not stop this check. Every
    call runs under the same seed of torch's generator (restored afterwards), so that dropout
    left on in eval mode draws the same mask as the check's variant does."""

    def __init__(self, cls, init: dict, norm: str, state: dict):
        self.cls, self.init, self.norm, self.state = cls, init, norm, state

    def build(self) -> nn.Module:
        if not (isinstance(self.cls, type) and issubclass(self.cls, nn.Module)):
            raise TypeError("your DecoderBlock is not an nn.Module class")
        norms = {"LayerNorm": nn.LayerNorm, "stand-in": StandInNorm}
        block = self.cls(**self.init, norm=norms[self.norm], mlp=StandInBlockMLP)
        try:
            block.load_state_dict(self.state)
        except Exception as err:
            raise AssertionError(
                f"could not load the course's weights ({', '.join(self.state)}) into your block "
                f"built with {self.init}, norm={self.norm} and a stand-in MLP class: build "
                f"both norms from the class `norm` and the MLP from the class `mlp` "
                f"({type(err).__name__}: {err})") from None
        return block

    def __call__(self, x, *args, **kwargs):
        module = self.module(x.dtype)  # built first: its constructor draws from the generator
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return module(x, *args, **kwargs)


class StandInLanguageModel(nn.Module):
    """Stands in for the transformer in the loss check. It is causal like the lesson's model:
    the logits at position t depend on the tokens 0..t (a running mean of their embeddings)
    and on t; and like it, it refuses inputs longer than ``max_len``."""

    def __init__(self, vocab_size: int, max_len: int, width: int = 8):
        super().__init__()
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, width)
        self.position = nn.Embedding(max_len, width)
        self.head = nn.Linear(width, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[-1]
        if T > self.max_len:
            raise ValueError(f"sequence of length {T} is longer than max_len={self.max_len}: "
                             f"the model reads 2n tokens (the last token is only a target)")
        x = self.embed(tokens)  # (B, T) -> (B, T, W)
        seen = torch.arange(1, T + 1, dtype=x.dtype, device=x.device)[:, None]  # (T, 1)
        context = x.cumsum(dim=-2) / seen  # mean of the embeddings of tokens 0..t
        return self.head(torch.tanh(context + x + self.position.weight[:T]))  # (B, T, V)


class LossUnderTest:
    """The student's loss function applied to a stand-in language model loaded with ``state``
    (in float32, or a float64 copy when the case asks for ``dtype=torch.float64``)."""

    def __init__(self, loss_fn, vocab_size: int, max_len: int, state: dict):
        language_model = StandInLanguageModel(vocab_size, max_len)
        language_model.load_state_dict(state)
        self.loss_fn = loss_fn
        self.models = {torch.float32: language_model,
                       torch.float64: copy.deepcopy(language_model).double()}

    def __call__(self, sequences, n, dtype=torch.float32):
        return self.loss_fn(self.models[dtype], sequences, n)

    def probe_parameters(self) -> dict[str, nn.Parameter]:
        return dict(self.models[torch.float64].named_parameters())


class StandInBlock(nn.Module):
    """Stands in for the block in the model check: the constructor of a block, and a forward
    that returns (B, T, C) and (B, H, T, T) causal weights (a softmax of x x^T), different in
    every block of a stack, so that the check tests the model alone."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.n_heads = n_heads
        self.query = nn.Linear(d_model, d_model)
        self.fc = nn.Linear(d_model, d_ff)
        self.proj = nn.Linear(d_ff, d_model)

    def forward(self, x):
        T = x.shape[-2]
        scores = self.query(x) @ x.transpose(-2, -1) / x.shape[-1] ** 0.5  # (B, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        x = x + weights @ x
        x = x + self.proj(torch.tanh(self.fc(x)))
        return x, weights.unsqueeze(-3).expand(*weights.shape[:-2], self.n_heads, T, T)


class StandInNorm(nn.Module):
    """Stands in for a norm class given to the model: x * weight / (1 + mean |x|)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        return x * self.weight / (1 + x.abs().mean(dim=-1, keepdim=True))


class ModelUnderTest:
    """The student's model class, built for each named configuration as
    ``cls(**init, block=StandInBlock)`` (``norm="stand-in"`` in init gives ``StandInNorm``),
    loaded with that configuration's ``state``, in eval mode; a float64 copy where a case asks
    for ``double``. With ``return_attention`` the list of weights comes back stacked; without,
    an empty tensor stands in for them (every case has two outputs)."""

    def __init__(self, cls, configs: dict, states: dict):
        self.cls, self.configs, self.states, self.built = cls, configs, states, {}
        self.last = None

    def module(self, config: str, double: bool = False) -> nn.Module:
        if (config, double) not in self.built:
            init = dict(self.configs[config])
            if init.get("norm") == "stand-in":
                init["norm"] = StandInNorm
            model = self.cls(**init, block=StandInBlock)
            try:
                model.load_state_dict(self.states[config])
            except Exception as err:
                raise AssertionError(
                    f"could not load the course's weights into your model built with "
                    f"{self.configs[config]} and a stand-in block ({type(err).__name__}: "
                    f"{err})") from None
            self.built[config, double] = (model.double() if double else model).eval()
        self.last = self.built[config, double]
        return self.last

    def __call__(self, tokens, config: str, return_attention: bool = False,
                 double: bool = False):
        model = self.module(config, double)
        if not return_attention:
            result = model(tokens)
            return (result, torch.zeros(0)) if isinstance(result, torch.Tensor) else result
        result = model(tokens, return_attention=True)
        if (isinstance(result, tuple | list) and len(result) == 2
                and isinstance(result[1], tuple | list) and result[1]
                and all(isinstance(w, torch.Tensor) for w in result[1])
                and len({w.shape for w in result[1]}) == 1):
            return result[0], torch.stack(list(result[1]))  # (n_layers, B, H, T, T)
        return result

    def probe_parameters(self) -> dict[str, nn.Parameter]:
        return dict(self.last.named_parameters()) if self.last is not None else {}


class RecordingLanguageModel(StandInLanguageModel):
    """The loss check's stand-in language model, which also records, at every forward,
    whether it was in training mode."""

    def __init__(self, vocab_size: int, max_len: int, width: int = 8):
        super().__init__(vocab_size, max_len, width)
        self.modes = []

    def forward(self, tokens):
        self.modes.append(self.training)
        return super().forward(tokens)


class StandInOptimizer:
    """Plain gradient descent with the interface of a torch optimizer: ``zero_grad()`` forgets
    the gradients, ``step()`` moves every parameter that has one by -lr * grad."""

    def __init__(self, parameters, lr: float = 0.1):
        self.parameters, self.lr = list(parameters), lr

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p in self.parameters:
            if p.grad is not None:
                p.sub_(self.lr * p.grad)


def stand_in_loss(model, sequences, n):
    """The train-step check's loss: next-token cross-entropy over every position."""
    logits = model(sequences[:, :-1])  # (B, L, V)
    return F.cross_entropy(logits.transpose(1, 2), sequences[:, 1:])


class TrainStepUnderTest:
    """The student's training step, called twice (on ``first``, then ``second``) on a stand-in
    language model loaded with ``state`` and left in eval mode with gradients of an earlier
    step still in it, with a plain gradient-descent optimizer. Returns the two returned
    losses (as numbers: NaN for what is none), whether each was a Python float, whether the
    model was in training mode at each forward, and every parameter after the two steps."""

    def __init__(self, step, vocab_size: int, max_len: int, state: dict):
        self.step, self.vocab_size, self.max_len, self.state = step, vocab_size, max_len, state

    def __call__(self, first, second, n: int, max_norm=None):
        model = RecordingLanguageModel(self.vocab_size, self.max_len)
        model.load_state_dict(self.state)
        model.eval()
        for p in model.parameters():
            p.grad = torch.ones_like(p)  # left over from an earlier step
        optimizer = StandInOptimizer(model.parameters())
        kwargs = {} if max_norm is None else {"max_norm": max_norm}
        returned = [self.step(model, optimizer, stand_in_loss, sequences, n, **kwargs)
                    for sequences in (first, second)]
        values = []
        for value in returned:
            try:
                values.append(float(value.detach() if isinstance(value, torch.Tensor) else value))
            except (TypeError, ValueError, RuntimeError):
                values.append(float("nan"))
        with torch.no_grad():
            parameters = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        return (torch.tensor(values, dtype=torch.float64),
                torch.tensor([type(value) is float for value in returned]),
                torch.tensor(model.modes, dtype=torch.bool), parameters)


class HeldOutRun:
    """Run the student's trained model, in eval mode, on fresh sequences of the copy task; return
    its most likely next token at every position, its sizes and its weights (in the order of
    their names, sorted: the student's constructors may build the parts in any order), so that
    the accuracy can be measured, and the model rebuilt, without the student's code."""

    def __init__(self, model, seq_len: int, vocab_size: int, n_sequences: int):
        from ...data import CopyTask  # lesson 05's given code: only there is it importable

        self.model = model
        self.task, self.n_sequences = CopyTask(seq_len, vocab_size), n_sequences

    def __call__(self, data_seed: int) -> tuple:
        from ...data import seeded_generator

        if not (isinstance(self.model, nn.Module)
                and all(hasattr(self.model, part) for part in ("embed", "blocks", "head"))):
            raise TypeError(f"`model` is a {type(self.model).__name__}, expected the lesson's "
                            f"DecoderOnlyTransformer (with embed, blocks, norm and head)")
        test = self.task.batch(self.n_sequences, seeded_generator(data_seed))
        device, was_training = next(self.model.parameters()).device, self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                logits = self.model(test.inputs.to(device))  # (B, 2n) -> (B, 2n, V)
        finally:
            self.model.train(was_training)
        sizes, state = model_config(self.model), self.model.state_dict()
        return (logits.argmax(dim=-1), torch.tensor([sizes[key] for key in CONFIG]),
                *(state[name] for name in sorted(state)))  # whatever order the parts were built


CONFIG = ("vocab_size", "max_len", "d_model", "n_heads", "n_layers", "d_ff", "positions",
          "scale_tokens")
POSITION_CODES = {"none": 0, "sinusoidal": 1, "learned": 2}


def model_config(model) -> dict[str, int]:
    """The sizes of a lesson-05 model, read from its parts (the student's blocks included); its
    kind of positions from the embedding (a learned table, or a fixed one: zeros for none)."""
    block, embed = model.blocks[0], model.embed
    attention = getattr(block.attn, "attn", block.attn)  # lesson 04's layer, or wrapped in one
    positions = "learned" if embed.learned_positions else \
        "none" if not embed.position.any() else "sinusoidal"
    return {"vocab_size": model.head.out_features, "max_len": embed.max_len,
            "d_model": model.head.in_features, "n_heads": attention.n_heads,
            "n_layers": len(model.blocks), "d_ff": block.mlp.fc.out_features,
            "positions": POSITION_CODES[positions], "scale_tokens": int(embed.scale_tokens)}


__all__ += ["SeededModuleUnderTest", "SettingsUnderTest", "BlockUnderTest",
            "WholeBlockUnderTest", "LossUnderTest", "HeldOutRun", "ModelUnderTest",
            "TrainStepUnderTest"]


# ---------------------------------------------------------------- lesson 01: the embedding layer

class EmbeddingUnderTest(_InBothPrecisions):
    """The student's embedding class, built with ``init``, in eval mode. Its parameters must be
    the ones the contract names (the keys of ``state``) and are loaded from ``state``; its
    buffers stay as its constructor made them (a fixed position table is the student's own).
    Token ids are integers: a case asks for the float64 copy with ``dtype=torch.float64``."""

    def __init__(self, cls, init: dict, state: dict):
        self.cls, self.init, self.state = cls, init, state

    def build(self) -> nn.Module:
        module = self.cls(**self.init)
        found = sorted(name for name, _ in module.named_parameters())
        if found != sorted(self.state):
            raise ValueError(
                f"your module's parameters are {', '.join(found) or 'none'}; built with "
                f"{self.init} the contract's are {', '.join(sorted(self.state))}")
        try:
            module.load_state_dict({**module.state_dict(), **self.state})
        except Exception as err:
            raise AssertionError(
                f"could not load the course's weights ({', '.join(self.state)}) into your "
                f"module built with {self.init} ({type(err).__name__}: {err})") from None
        return module

    dtype = torch.float64  # the dtype of the last call, whose parameters the gradients need

    def __call__(self, token_ids, *args, dtype=torch.float32, **kwargs):
        self.dtype = dtype
        return self.module(dtype)(token_ids, *args, **kwargs)

    def probe_parameters(self) -> dict[str, nn.Parameter]:
        return dict(self.module(self.dtype).named_parameters())


__all__ += ["EmbeddingUnderTest"]


# ---------------------------------------------------------------- lesson 10: latent attention

class NotAbsorbed(RuntimeError):
    """Raised inside an absorbed latent attention function that builds a head's keys or
    values."""


class LatentOnly:
    """The student's absorbed latent attention, ``fn(query, latent, w_uk, w_uv, ...)``, stopped
    with ``NotAbsorbed`` the moment it builds keys or values of the heads, in two ways:

    - by their making: a floating-point tensor made from the latent (or any part of it: one
      token, a chunk) and an up-projection, ``w_uk`` or ``w_uv``, before any query met them,
      with an axis of a head's key or value width (``w_uk``'s or ``w_uv``'s last axis) or of
      every head's side by side (H times it). The absorbed form meets the latent with the
      up-projections only through the query (w_uk folded into it, w_uv after the weighted sum
      of the latents, whose weights come from the query). What each tensor is made from is
      followed through every operation, views, copies and in-place writes included;
    - by their shape: a new floating-point tensor with an axis for each of the S tokens and
      another of those widths, in any layout. With as many queries as tokens (T = S) a
      query's or an output's rows have the keys' shape: this one is off then, and the check
      picks sizes where S, the head widths and every other axis differ.
    """

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, query, latent, w_uk, w_uv, *args, **kwargs):
        sizes = [a.shape[-1] * heads for a in (w_uk, w_uv) if isinstance(a, torch.Tensor)
                 and a.ndim for heads in {1, a.shape[0]}]  # one head, or all side by side
        if not (isinstance(latent, torch.Tensor) and latent.ndim >= 2 and sizes
                and isinstance(query, torch.Tensor) and query.ndim >= 2):
            return self.fn(query, latent, w_uk, w_uv, *args, **kwargs)
        tokens = latent.shape[-2] if query.shape[-2] != latent.shape[-2] else None
        sources = {"query": (query,), "latent": (latent,), "up-projection": (w_uk, w_uv)}
        with _NoPerHeadKeys(tokens, set(sizes), sources):
            return self.fn(query, latent, w_uk, w_uv, *args, **kwargs)


class _NoPerHeadKeys(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # nothing here is compiled: no wrapper, which would import torch._dynamo

    def __init__(self, tokens: int | None, widths: set[int], sources: dict[str, tuple]):
        super().__init__()
        self.tokens, self.widths = tokens, widths
        self.made_from: dict[int, frozenset] = {}  # storage address -> what went into it
        self.kept: list[torch.Tensor] = []  # alive until the call ends: no address reused
        for name, tensors in sources.items():
            for tensor in tensors:
                if isinstance(tensor, torch.Tensor):
                    self._add(tensor, frozenset({name}))

    @staticmethod
    def _address(tensor: torch.Tensor) -> int:
        try:
            return tensor.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):  # no storage (meta, sparse, ...)
            return 0

    def _origins(self, tensor: torch.Tensor) -> frozenset:
        address = self._address(tensor)
        return self.made_from.get(address, frozenset()) if address else frozenset()

    def _add(self, tensor: torch.Tensor, origins: frozenset) -> frozenset:
        address = self._address(tensor)
        if address and origins:
            self.made_from[address] = self.made_from.get(address, frozenset()) | origins
            self.kept.append(tensor)
        return self._origins(tensor) | origins

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        origins = frozenset().union(*(self._origins(a) for a in
                                      tree_leaves((args, kwargs or {}))
                                      if isinstance(a, torch.Tensor)))
        out = func(*args, **(kwargs or {}))
        outputs = out if isinstance(out, tuple | list) else (out,)
        for described, result in zip(func._schema.returns, outputs, strict=False):
            if not isinstance(result, torch.Tensor):
                continue
            made_from = self._add(result, origins)
            if not result.is_floating_point():
                continue
            shape = tuple(result.shape)
            if described.alias_info is None and self.tokens in shape and any(
                    width in shape[:i] + shape[i + 1:] for i, size in enumerate(shape)
                    if size == self.tokens for width in self.widths):
                raise NotAbsorbed(
                    f"a tensor of shape {shape} was created, with an axis for each of the "
                    f"S = {self.tokens} tokens and one of the heads' key or value widths "
                    f"({' or '.join(map(str, sorted(self.widths)))}): the heads' keys or "
                    f"values, which the absorbed form never builds")
            if ({"latent", "up-projection"} <= made_from and "query" not in made_from
                    and any(size in self.widths for size in shape)):
                raise NotAbsorbed(
                    f"a tensor of shape {shape} was made from the latent (all of it or some "
                    f"of its tokens) and an up-projection before any query met them, with an "
                    f"axis of the heads' key or value widths "
                    f"({' or '.join(map(str, sorted(self.widths)))}): keys or values of the "
                    f"heads, which the absorbed form never builds, not even a token at a time")
        return out


def nested_bytes(cache) -> int:
    """Bytes of every tensor in ``cache``: a tensor, or tuples, lists and dicts of them."""
    if isinstance(cache, torch.Tensor):
        return cache.nbytes
    if isinstance(cache, dict):
        cache = list(cache.values())
    if isinstance(cache, tuple | list):
        return sum(nested_bytes(part) for part in cache)
    return 0


class DecodeUnderTest(ModuleUnderTest):
    """The student's layer class, built with ``init`` and loaded with ``state`` (in eval mode;
    a float64 copy for float64 inputs), run on x (B, S, C) as a decoder runs it: the first
    ``chunks[0]`` tokens in one call ``layer(x, None)``, then each next chunk with the cache
    the call before returned, ``layer(x_chunk, cache) -> (out, cache)``. The first sequence of
    the batch and the others are decoded as two streams, their calls taking turns, each with
    its own cache: a layer that kept tokens on itself between calls would mix them up.
    Returns every token's output, (B, S, C); after each chunk the bytes of the tensors in the
    returned caches per token and sequence, (len(chunks),) float64; and the two parts of the
    last cache returned, the contract's pair (latent, rope_key), each stream's side by side
    on the batch axis: what the cache holds is compared, not only its size."""

    def __call__(self, x, chunks):
        module = self.module(x.dtype)
        streams = [x[:1], x[1:]] if x.ndim >= 3 and x.shape[0] > 1 else [x]
        outputs, caches, sizes, start = [[] for _ in streams], [None] * len(streams), [], 0
        for size in chunks:
            for i, stream in enumerate(streams):
                result = module(stream[..., start:start + size, :], caches[i])
                if not (isinstance(result, tuple | list) and len(result) == 2):
                    raise TypeError(f"your forward returned a {type(result).__name__}, "
                                    f"expected the pair (out, cache)")
                out, cache = result
                if not (isinstance(cache, tuple | list) and len(cache) == 2
                        and all(type(part) is torch.Tensor for part in cache)):
                    raise TypeError(f"your forward returned {_described(cache)} as its "
                                    f"cache, expected the pair of tensors (latent, rope_key) "
                                    f"that the docstring describes")
                # copies: nothing the layer hangs on the objects it returned comes back to it
                caches[i] = (list if isinstance(cache, list) else tuple)(  # a list stays one
                    part.clone() for part in cache)
                outputs[i].append(out)
            start += size
            sizes.append(sum(nested_bytes(c) for c in caches) / (start * x[..., 0, 0].numel()))
        outs = [torch.cat(parts, dim=-2) for parts in outputs]
        contents = [torch.cat(parts, dim=0) if len(parts) > 1 else parts[0]
                    for parts in zip(*caches, strict=True)]
        return (torch.cat(outs, dim=0) if len(outs) > 1 else outs[0],
                torch.tensor(sizes, dtype=torch.float64), *contents)


def _described(cache) -> str:
    """A cache in words: "a dict", "a tuple of 3 items", "a tuple of 2 items, not both
    tensors"."""
    kind = type(cache).__name__
    if not isinstance(cache, tuple | list):
        return f"a {kind}"
    return f"a {kind} of {len(cache)} items" + (", not both tensors" if len(cache) == 2 else "")


class NumberUnderTest:
    """The student's function returning a number, called as it is, its result returned as a
    0-d float64 tensor (what the checks compare)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args, **kwargs):
        result = self.fn(*args, **kwargs)
        if isinstance(result, torch.Tensor):
            result = result.detach().double()
            if result.numel() != 1:
                raise TypeError(f"your function returned a tensor of shape "
                                f"{tuple(result.shape)}, expected one number")
            return result.reshape(())
        if isinstance(result, bool) or not isinstance(result, int | float):
            raise TypeError(f"your function returned a {type(result).__name__}, expected a "
                            f"number (an int)")
        return torch.tensor(float(result), dtype=torch.float64)


__all__ += ["LatentOnly", "DecodeUnderTest", "NumberUnderTest"]
