"""Token embeddings and positional encodings: turning token ids into vectors that know where
they are.

Lesson: 01_embeddings
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def one_hot_embedding(token_ids: Tensor, weight: Tensor) -> Tensor:
    """Embed tokens as one_hot(token_ids) @ weight: each id selects one row of ``weight``.

    Args:
        token_ids: (B, T) integer ids in 0..V-1 (any shape).
        weight: (V, C) embedding matrix, one row per vocabulary entry.
    Returns:
        (B, T, C) embeddings, equal to ``weight[token_ids]`` and to ``nn.Embedding``.
    Lesson: 01_embeddings
    """
    one_hot = F.one_hot(token_ids, num_classes=weight.shape[0]).to(weight.dtype)  # (B, T, V)
    return one_hot @ weight  # (B,T,V) @ (V,C) -> (B,T,C)


def sinusoidal_positional_encoding(seq_len: int, d_model: int, *, base: float = 10000.0,
                                   device=None, dtype=torch.float32) -> Tensor:
    """The fixed positional encoding of "Attention Is All You Need".

    PE[t, 2i] = sin(t / base^(2i / C)) and PE[t, 2i + 1] = cos(t / base^(2i / C)).
    Args:
        seq_len: number of positions T.
        d_model: model width C (odd widths drop the last cosine).
        base: wavelength scale; the slowest pair has wavelength 2*pi*base**((C-2)/C).
        device, dtype: where, and in which float dtype, the encoding is returned.
    Returns:
        (T, C) encoding, entries in [-1, 1]. For float16 and bfloat16 it is computed in
        float32 and rounded once: float16 holds whole numbers exactly only up to 2048, and
        bfloat16 up to 256, so positions counted in 16 bits would be off.
    Lesson: 01_embeddings
    """
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype  # see Returns
    position = torch.arange(seq_len, device=device, dtype=wide)[:, None]  # (T, 1)
    two_i = torch.arange(0, d_model, 2, device=device, dtype=wide)  # (ceil(C/2),)
    angles = position / base ** (two_i / d_model)  # (T, ceil(C/2))
    pe = torch.zeros(seq_len, d_model, device=device, dtype=wide)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe.to(dtype)


def offset_matrix(k: int, d_model: int, *, base: float = 10000.0, dtype=torch.float32) -> Tensor:
    """The (C, C) matrix that moves every position's sinusoidal encoding k places on.

    PE[t + k] = PE[t] @ M for every t: pair i of PE[t], (sin(t w_i), cos(t w_i)), turns by the
    angle k w_i, w_i = base^(-2i/C), whatever t is. So M is block diagonal, one 2x2 rotation
    [[cos(k w_i), -sin(k w_i)], [sin(k w_i), cos(k w_i)]] on dimensions 2i and 2i + 1 (acting on
    row vectors from the right). A negative k moves back.
    Args:
        k: the offset, any integer.
        d_model: model width C (even).
        base, dtype: as in ``sinusoidal_positional_encoding``.
    Returns:
        (C, C) tensor, zero outside the 2x2 blocks on the diagonal.
    Lesson: 01_embeddings
    """
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (C/2,)
    angle = k / base ** (two_i / d_model)  # (C/2,) the turn of each pair
    cos, sin = torch.cos(angle), torch.sin(angle)
    blocks = torch.stack([torch.stack([cos, -sin], -1),
                          torch.stack([sin, cos], -1)], -2)  # (C/2, 2, 2)
    return torch.block_diag(*blocks).to(dtype)  # (C, C)


def token_and_position_embedding(token_ids: Tensor, weight: Tensor, pe: Tensor) -> Tensor:
    """Token embedding scaled by sqrt(C) plus the encoding of each position.

    Args:
        token_ids: (B, T) integer ids.
        weight: (V, C) token embedding matrix.
        pe: (T_max, C) positional encoding, T_max >= T; the first T rows are used.
    Returns:
        (B, T, C) = weight[token_ids] * sqrt(C) + pe[:T].
    Lesson: 01_embeddings
    """
    T, C = token_ids.shape[-1], weight.shape[-1]
    if pe.shape[-1] != C or pe.shape[0] < T:
        raise ValueError(f"pe must have shape (T_max >= {T}, C={C}), got {tuple(pe.shape)}")
    return weight[token_ids] * math.sqrt(C) + pe[:T]  # (B,T,C) + (T,C) -> (B,T,C)


class TokenAndPositionEmbedding(nn.Module):
    """``nn.Embedding`` for tokens plus sinusoidal (fixed) or learned position vectors.

    The token table starts with entries of standard deviation 1/sqrt(C), as in the original
    transformer, so that sqrt(C) times a row has entries of size about 1; a learned position
    table starts with entries of size 1 too. Neither part drowns the other (lesson 01, section
    5). Two switches exist for experiments: ``positions=False`` adds no positions at all, and
    ``scale_tokens=False`` leaves out the sqrt(C) factor.
    Lesson: 01_embeddings
    """

    def __init__(self, vocab_size: int, d_model: int, max_len: int,
                 learned_positions: bool = False, *, positions: bool = True,
                 scale_tokens: bool = True):
        super().__init__()
        # entries of standard deviation 1/sqrt(C): sqrt(C) * row has entries ~ 1
        self.token = nn.Embedding.from_pretrained(_normal(vocab_size, d_model, d_model ** -0.5),
                                                  freeze=False)
        self.max_len, self.scale_tokens = max_len, scale_tokens
        self.learned_positions = learned_positions and positions
        if self.learned_positions:
            self.position = nn.Parameter(_normal(max_len, d_model, 1.0))
        elif positions:
            self.register_buffer("position", sinusoidal_positional_encoding(max_len, d_model))
        else:  # no positions: every position adds the zero vector
            self.register_buffer("position", torch.zeros(max_len, d_model))

    def forward(self, token_ids: Tensor, offset: int = 0) -> Tensor:
        """(B, T) ids -> (B, T, C) embeddings of the tokens at positions offset .. offset+T-1
        (offset: where a cache of earlier tokens ends; 0 for a whole sequence)."""
        T = token_ids.shape[-1]
        if offset + T > self.max_len:
            raise ValueError(f"sequence of length {T} from position {offset} is longer than "
                             f"max_len={self.max_len} allows")
        position = self.position[offset:offset + T]  # (T, C)
        if not self.scale_tokens:
            return self.token(token_ids) + position
        return token_and_position_embedding(token_ids, self.token.weight, position)


def _normal(rows: int, cols: int, std: float) -> Tensor:
    """A (rows, cols) tensor of N(0, std^2) entries, cut at 3 standard deviations. Where a model
    is first laid out on the meta device (lesson 05's graded check does), torch.randn and
    normal_ load parts of torch that take a second; trunc_normal_ does not."""
    return nn.init.trunc_normal_(torch.empty(rows, cols), std=std, a=-3 * std, b=3 * std)
