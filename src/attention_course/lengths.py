"""What positions do to length: a small model trained on short sequences and tested on longer
ones, with no positions, sinusoidal, learned or rotary positions.

The task is an echo: the model reads random tokens and, at every position t >= delay, must
output the token it read ``delay`` steps earlier. Its answer depends on positions only through
the fixed offset ``delay``: the kind of rule a model trained at one length can hope to carry
over to longer sequences. The model is one pre-norm causal attention layer (lesson 04's
``MultiHeadAttention``, or a rotary layer passed in) between a token embedding and a linear
read-out, small enough to train on a CPU in well under a second.

Lesson: 06_rotary_positions
"""

import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .embeddings import sinusoidal_positional_encoding
from .multihead import MultiHeadAttention
from .training import AdamW

POSITIONS = ("none", "sinusoidal", "learned", "rotary")
IGNORE = -100  # the target of a position that has nothing to echo yet (cross_entropy skips it)


def echo_batch(batch_size: int, seq_len: int, vocab_size: int, delay: int,
               generator: torch.Generator, device=None) -> tuple[Tensor, Tensor]:
    """Random tokens and their echo targets: targets[:, t] = tokens[:, t - delay].

    Returns:
        tokens: (B, T) ids in 0 .. V-1.
        targets: (B, T) ids; IGNORE at the first ``delay`` positions.
    Lesson: 06_rotary_positions
    """
    tokens = torch.randint(vocab_size, (batch_size, seq_len), generator=generator)
    targets = torch.full_like(tokens, IGNORE)
    targets[:, delay:] = tokens[:, :seq_len - delay]  # (B, T - delay)
    return tokens.to(device), targets.to(device)


class EchoModel(nn.Module):
    """Token embedding (+ positions), one causal attention layer with a residual, a read-out.

    ``positions``: "none" adds nothing, "sinusoidal" adds lesson 01's fixed encoding,
    "learned" adds a trained table of ``max_len`` rows (the rows past the training length
    never receive a gradient), "rotary" adds nothing to the embeddings and uses the attention
    class ``rotary`` (built like ``MultiHeadAttention(d_model, n_heads)``) instead.
    Lesson: 06_rotary_positions
    """

    def __init__(self, vocab_size: int, d_model: int = 32, n_heads: int = 2, max_len: int = 64,
                 positions: str = "none", rotary: type[nn.Module] | None = None):
        super().__init__()
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
        if positions == "rotary" and rotary is None:
            raise ValueError("rotary positions need a rotary attention class")
        self.positions, self.max_len = positions, max_len
        self.token = nn.Embedding(vocab_size, d_model)
        if positions == "learned":
            self.position = nn.Parameter(torch.randn(max_len, d_model))
        elif positions == "sinusoidal":
            self.register_buffer("position", sinusoidal_positional_encoding(max_len, d_model))
        else:
            self.register_buffer("position", torch.zeros(max_len, d_model))
        attention = rotary if positions == "rotary" else MultiHeadAttention
        self.norm = nn.LayerNorm(d_model)
        self.attention = attention(d_model, n_heads)
        self.read_out = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, vocab_size))

    def forward(self, tokens: Tensor) -> Tensor:
        """(B, T) ids -> (B, T, V) logits; position t sees tokens 0 .. t only."""
        T = tokens.shape[-1]
        if T > self.max_len:
            raise ValueError(f"sequence of length {T} is longer than max_len={self.max_len}")
        x = self.token(tokens) + self.position[:T]  # (B, T, C) + (T, C) -> (B, T, C)
        h = self.norm(x)
        x = x + self.attention(h, h, h, is_causal=True)[0]  # (B, T, C)
        return self.read_out(x)  # (B, T, V)


@dataclass(frozen=True)
class EchoConfig:
    """The experiment's settings: the task, the model and its training."""

    vocab_size: int = 16
    delay: int = 3
    train_len: int = 16  # L: every training sequence has this length
    test_len: int = 32  # 2L: the test sequences, which hold every length up to it
    d_model: int = 32
    n_heads: int = 2
    steps: int = 50
    batch_size: int = 64
    lr: float = 2e-2
    test_batch: int = 512
    seed: int = 0


@dataclass
class EchoRun:
    """One trained model: its kind of positions, training losses, accuracy at every length
    (``{length: accuracy}``) and the seconds it took."""

    positions: str
    model: nn.Module
    losses: list[float] = field(default_factory=list)
    accuracy: dict[int, float] = field(default_factory=dict)
    seconds: float = 0.0

    def mean_accuracy(self, shortest: int, longest: int) -> float:
        """The mean accuracy over the lengths from ``shortest`` to ``longest``."""
        chosen = [a for length, a in self.accuracy.items() if shortest <= length <= longest]
        return sum(chosen) / len(chosen)


def train_echo(model: nn.Module, config: EchoConfig, device=None) -> list[float]:
    """Train ``model`` on echo sequences of length ``config.train_len`` with Adam; the losses.

    Lesson: 06_rotary_positions
    """
    generator = torch.Generator().manual_seed(config.seed)
    # Adam written out (AdamW without weight decay): the first torch.optim optimizer imports
    # torch._dynamo, a second that the first model's time would otherwise count
    optimizer = AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(config.steps):
        tokens, targets = echo_batch(config.batch_size, config.train_len, config.vocab_size,
                                     config.delay, generator, device)
        logits = model(tokens)  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_batch(config: EchoConfig, device=None) -> tuple[Tensor, Tensor]:
    """The held-out sequences of length ``config.test_len`` (a seed training never uses)."""
    generator = torch.Generator().manual_seed(10_000 + config.seed)
    return echo_batch(config.test_batch, config.test_len, config.vocab_size, config.delay,
                      generator, device)


@torch.no_grad()
def accuracy_by_length(model: nn.Module, config: EchoConfig, device=None) -> dict[int, float]:
    """``{length: accuracy}``: how often the newest token of a sequence of that length is
    echoed right, for every length from ``delay + 1`` to ``test_len``.

    A causal model's output at position t depends on the first t + 1 tokens only, so one batch
    of length ``test_len`` tests every shorter length too: length l is position l - 1.
    Lesson: 06_rotary_positions
    """
    tokens, targets = test_batch(config, device)
    model.eval()
    right = (model(tokens).argmax(-1) == targets).float().mean(0)  # (T,) per position
    return {t + 1: right[t].item() for t in range(config.delay, config.test_len)}


@torch.no_grad()
def attention_by_offset(model: EchoModel, config: EchoConfig, device=None) -> Tensor:
    """(H, T) weights of the last query of the test sequences on the key ``offset`` steps
    back (offset 0 is itself), averaged over the sequences.

    Lesson: 06_rotary_positions
    """
    tokens, _ = test_batch(config, device)
    model.eval()
    T = tokens.shape[-1]
    h = model.norm(model.token(tokens) + model.position[:T])  # (B, T, C)
    _, weights = model.attention(h, h, h, is_causal=True)  # (B, H, T, T)
    return weights[:, :, -1].mean(0).flip(-1)  # last query, keys T-1 .. 0 -> offsets 0 .. T-1


def length_experiment(rotary: type[nn.Module], config: EchoConfig = EchoConfig(),
                      positions: tuple[str, ...] = POSITIONS, device=None,
                      progress=None) -> dict[str, EchoRun]:
    """Train one model per kind of positions at ``train_len``; test each up to ``test_len``.

    ``rotary`` is the attention class of the rotary model; ``progress`` wraps the loop over
    ``positions`` (e.g. ``tqdm``). Every model starts from the same seed and sees the same
    batches.
    Lesson: 06_rotary_positions
    """
    runs = {}
    for kind in (progress or iter)(positions):
        start = time.perf_counter()
        torch.manual_seed(config.seed)
        model = EchoModel(config.vocab_size, config.d_model, config.n_heads, config.test_len,
                          kind, rotary).to(device)
        losses = train_echo(model, config, device)
        runs[kind] = EchoRun(kind, model, losses, accuracy_by_length(model, config, device),
                             time.perf_counter() - start)
    return runs
