"""Lesson 01's answers as students write them: three correct styles per exercise, shortcuts,
answers with a catalogued mistake, and slips that raise."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from attention_course import embeddings

# ---------------------------------------------------------------- correct

def one_hot_by_indexing(token_ids, weight):
    return weight[token_ids]


def one_hot_by_einsum(token_ids, weight):
    vocabulary = torch.arange(weight.shape[0])
    one_hot = (token_ids[..., None] == vocabulary).to(weight.dtype)  # (..., V)
    return torch.einsum("...v,vc->...c", one_hot, weight)


def one_hot_by_index_select(token_ids, weight):
    rows = torch.index_select(weight, 0, token_ids.flatten())
    return rows.reshape(*token_ids.shape, weight.shape[1])


def positions_by_loops(seq_len, d_model):
    rows = [[math.sin(t / 10000 ** (j / d_model)) if j % 2 == 0
             else math.cos(t / 10000 ** ((j - 1) / d_model)) for j in range(d_model)]
            for t in range(seq_len)]
    return torch.tensor(rows, dtype=torch.float32)


def positions_by_stacking(seq_len, d_model):
    t = torch.arange(seq_len, dtype=torch.float64)[:, None]
    frequencies = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2) / d_model)
    angles = t * frequencies  # (T, ceil(C/2))
    pairs = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (T, C/2, 2)
    return pairs.flatten(-2)[:, :d_model].float()


def positions_by_where(seq_len, d_model):
    j = torch.arange(d_model)
    angles = torch.arange(seq_len)[:, None] / torch.pow(10000.0, (j - j % 2) / d_model)
    return torch.where(j % 2 == 0, torch.sin(angles), torch.cos(angles)).float()


def offset_by_filling_the_blocks(k, d_model):
    i = torch.arange(0, d_model, 2)  # 2i
    angle = k / 10000 ** (i / d_model)
    m = torch.zeros(d_model, d_model)
    m[i, i], m[i + 1, i + 1] = torch.cos(angle), torch.cos(angle)
    m[i + 1, i], m[i, i + 1] = torch.sin(angle), -torch.sin(angle)
    return m


def offset_by_block_diag(k, d_model):
    blocks = []
    for pair in range(d_model // 2):
        a = k / 10000 ** (2 * pair / d_model)
        blocks.append(torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]]))
    return torch.block_diag(*blocks)


def offset_from_two_encodings(k, d_model):
    """Solved from the property itself, exactly: for pair i, [PE[0]; PE[1]] @ block equals
    [PE[k]; PE[k + 1]] restricted to the pair, a 2x2 linear system per pair."""
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)[:, None]
    w = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for pair, omega in enumerate(w):
        before = torch.cat([torch.sin(t * omega), torch.cos(t * omega)], dim=1)  # (2, 2)
        after = torch.cat([torch.sin((t + k) * omega), torch.cos((t + k) * omega)], dim=1)
        m[2 * pair:2 * pair + 2, 2 * pair:2 * pair + 2] = torch.linalg.solve(before, after)
    return m.to(torch.float32)


class StubEmbedding(nn.Module):
    """The class a student starts from: constructor and forward both to be written."""

    def __init__(self, vocab_size, d_model, max_len, learned_positions=False, *,
                 positions=True, scale_tokens=True):
        super().__init__()
        raise NotImplementedError()

    def forward(self, token_ids, offset=0):
        raise NotImplementedError()


class EmbeddingByIndexing(nn.Module):
    """nn.Embedding, and rows of the position table sliced from the offset."""

    def __init__(self, vocab_size, d_model, max_len, learned_positions=False, *,
                 positions=True, scale_tokens=True):
        super().__init__()
        self.token = nn.Embedding(vocab_size, d_model)
        self.max_len, self.scale_tokens = max_len, scale_tokens
        self.learned_positions = learned_positions and positions
        if self.learned_positions:
            self.position = nn.Parameter(torch.randn(max_len, d_model))
        elif positions:
            self.register_buffer("position", positions_by_stacking(max_len, d_model))
        else:
            self.register_buffer("position", torch.zeros(max_len, d_model))

    def forward(self, token_ids, offset=0):
        T, C = token_ids.shape[-1], self.position.shape[-1]
        tokens = self.token(token_ids)
        if self.scale_tokens:
            tokens = tokens * math.sqrt(C)
        return tokens + self.position[offset:offset + T]


class EmbeddingByOneHot(nn.Module):
    """The token table as a bare Parameter read by a one-hot product, the positions gathered
    by index_select, no position table at all when there are no positions."""

    def __init__(self, vocab_size, d_model, max_len, learned_positions=False, *,
                 positions=True, scale_tokens=True):
        super().__init__()
        self.token = nn.Module()
        self.token.weight = nn.Parameter(torch.randn(vocab_size, d_model) / d_model ** 0.5)
        self.factor = d_model ** 0.5 if scale_tokens else 1.0
        self.max_len, self.scale_tokens = max_len, scale_tokens
        self.learned_positions = learned_positions and positions
        if self.learned_positions:
            self.position = nn.Parameter(torch.zeros(max_len, d_model))
        elif positions:
            self.register_buffer("position", positions_by_loops(max_len, d_model))
        else:
            self.position = None

    def forward(self, token_ids, offset=0):
        weight = self.token.weight
        one_hot = F.one_hot(token_ids, weight.shape[0]).to(weight.dtype)
        x = torch.einsum("btv,vc->btc", one_hot, weight) * self.factor
        if self.position is None:
            return x
        where = torch.arange(offset, offset + token_ids.shape[-1])
        return x + torch.index_select(self.position, 0, where)


class EmbeddingInFloat64(EmbeddingByIndexing):
    """Computed in float64 and rounded once; the offset as a narrow of the table."""

    def forward(self, token_ids, offset=0):
        C = self.token.weight.shape[-1]
        tokens = self.token.weight.double()[token_ids]
        if self.scale_tokens:
            tokens = tokens / (1 / math.sqrt(C))
        position = self.position.double().narrow(0, offset, token_ids.shape[-1])
        return (tokens + position).to(self.token.weight.dtype)


CORRECT = {
    "one_hot_embedding": [one_hot_by_indexing, one_hot_by_einsum, one_hot_by_index_select],
    "sinusoidal_positional_encoding": [positions_by_loops, positions_by_stacking,
                                       positions_by_where],
    "offset_matrix": [offset_by_filling_the_blocks, offset_by_block_diag,
                      offset_from_two_encodings],
    "embedding_layer": [EmbeddingByIndexing, EmbeddingByOneHot, EmbeddingInFloat64],
}
# the reference each check compares with, which the student must not call
REFERENCES = {
    "one_hot_embedding": embeddings.one_hot_embedding,
    "sinusoidal_positional_encoding": embeddings.sinusoidal_positional_encoding,
    "offset_matrix": embeddings.offset_matrix,
    "embedding_layer": embeddings.TokenAndPositionEmbedding,
}
PRINTED_NAME = {"embedding_layer": "TokenAndPositionEmbedding"}
# the stub a student starts from, where it is a class
STUBS = {"embedding_layer": StubEmbedding}


# ---------------------------------------------------------------- shortcuts

class EmbeddingCallingReference(EmbeddingByIndexing):
    def forward(self, token_ids, offset=0):
        return embeddings.TokenAndPositionEmbedding.forward(self, token_ids, offset)


CALLING_THE_REFERENCE = {"embedding_layer": EmbeddingCallingReference}

BUILT_INS = {  # exercise: {what the student called: their answer}
    "one_hot_embedding": {
        "F.embedding": lambda token_ids, weight: F.embedding(token_ids, weight),
        "nn.Embedding": lambda token_ids, weight: nn.Embedding.from_pretrained(weight)(token_ids),
    },
}


# ---------------------------------------------------------------- catalogued mistakes

def positions_swapped(seq_len, d_model):
    pe = torch.zeros(seq_len, d_model)
    t = torch.arange(seq_len).unsqueeze(1)
    angles = t / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.cos(angles), torch.sin(angles)
    return pe


def positions_with_i(seq_len, d_model):
    pe = torch.zeros(seq_len, d_model)
    for t in range(seq_len):
        for i in range(d_model // 2):
            pe[t, 2 * i] = math.sin(t / 10000 ** (i / d_model))
            pe[t, 2 * i + 1] = math.cos(t / 10000 ** (i / d_model))
    return pe


def offset_moving_back(k, d_model):
    i = torch.arange(0, d_model, 2)
    angle = k / 10000 ** (i / d_model)
    m = torch.zeros(d_model, d_model)
    m[i, i], m[i + 1, i + 1] = torch.cos(angle), torch.cos(angle)
    m[i, i + 1], m[i + 1, i] = torch.sin(angle), -torch.sin(angle)  # the rotation by -k
    return m


def offset_on_the_halves(k, d_model):
    half = d_model // 2
    angle = k / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    m = torch.zeros(d_model, d_model)
    for i in range(half):
        m[i, i] = m[i + half, i + half] = math.cos(angle[i])
        m[i + half, i], m[i, i + half] = math.sin(angle[i]), -math.sin(angle[i])
    return m


def offset_turning_every_pair_by_k(k, d_model):
    c, s = math.cos(k), math.sin(k)
    return torch.block_diag(*[torch.tensor([[c, -s], [s, c]])] * (d_model // 2))


def offset_with_sin_on_the_diagonal(k, d_model):
    blocks = []
    for pair in range(d_model // 2):
        a = k / 10000 ** (2 * pair / d_model)
        blocks.append(torch.tensor([[math.sin(a), -math.cos(a)], [math.cos(a), math.sin(a)]]))
    return torch.block_diag(*blocks)


class EmbeddingWithoutSqrt(EmbeddingByIndexing):
    def forward(self, token_ids, offset=0):
        return self.token(token_ids) + self.position[offset:offset + token_ids.shape[-1]]


class EmbeddingScaledByC(EmbeddingByIndexing):
    def forward(self, token_ids, offset=0):
        C = self.token.weight.shape[1]
        scale = C if self.scale_tokens else 1
        return self.token(token_ids) * scale + self.position[offset:offset + token_ids.shape[-1]]


class EmbeddingDividedBySqrt(EmbeddingByIndexing):
    def forward(self, token_ids, offset=0):
        x = self.token(token_ids)
        if self.scale_tokens:
            x = x / math.sqrt(x.shape[-1])
        return x + self.position[offset:offset + token_ids.shape[-1]]


class EmbeddingWithoutPositions(EmbeddingByIndexing):
    def forward(self, token_ids, offset=0):
        x = self.token(token_ids)
        return x * math.sqrt(x.shape[-1]) if self.scale_tokens else x


class EmbeddingIgnoringTheOffset(EmbeddingByIndexing):
    def forward(self, token_ids, offset=0):
        return super().forward(token_ids)


class EmbeddingShiftedByOne(EmbeddingByIndexing):
    def forward(self, token_ids, offset=0):
        T = token_ids.shape[-1]
        x = self.token(token_ids) * (math.sqrt(self.position.shape[1]) if self.scale_tokens else 1)
        return x + self.position[offset + 1:offset + T + 1]


class EmbeddingIndexedById(EmbeddingByIndexing):
    def forward(self, token_ids, offset=0):
        x = self.token(token_ids) * (math.sqrt(self.position.shape[1]) if self.scale_tokens else 1)
        return x + self.position[token_ids]


class EmbeddingScalingPositionsToo(EmbeddingByIndexing):
    def forward(self, token_ids, offset=0):
        x = self.token(token_ids) + self.position[offset:offset + token_ids.shape[-1]]
        return x * math.sqrt(x.shape[-1]) if self.scale_tokens else x


class EmbeddingAlwaysScaled(EmbeddingByIndexing):
    def forward(self, token_ids, offset=0):
        x = self.token(token_ids) * math.sqrt(self.position.shape[1])
        return x + self.position[offset:offset + token_ids.shape[-1]]


class EmbeddingWithSwappedTable(EmbeddingByIndexing):
    """Right, but its fixed table comes from a sinusoidal encoding with sin and cos swapped."""

    def __init__(self, vocab_size, d_model, max_len, learned_positions=False, *,
                 positions=True, scale_tokens=True):
        super().__init__(vocab_size, d_model, max_len, learned_positions, positions=positions,
                         scale_tokens=scale_tokens)
        if positions and not learned_positions:
            self.position = positions_swapped(max_len, d_model)


class EmbeddingAlwaysSinusoidal(EmbeddingByIndexing):
    def __init__(self, vocab_size, d_model, max_len, learned_positions=False, *,
                 positions=True, scale_tokens=True):
        super().__init__(vocab_size, d_model, max_len, learned_positions,
                         scale_tokens=scale_tokens)


MISTAKES = {  # student's answer: (exercise, the mistakes the check must name)
    positions_swapped: ("sinusoidal_positional_encoding", ["sin and cos swapped"]),
    positions_with_i: ("sinusoidal_positional_encoding",
                       ["positional exponent uses i instead of 2i"]),
    offset_moving_back: ("offset_matrix",
                         ["rotation transposed: it moves the encoding k places back"]),
    offset_on_the_halves: ("offset_matrix",
                           ["blocks on dimensions i and i + C/2 instead of 2i and 2i + 1"]),
    offset_turning_every_pair_by_k: ("offset_matrix", ["the same angle k in every pair"]),
    offset_with_sin_on_the_diagonal: ("offset_matrix", ["sin and cos swapped in the blocks"]),
    EmbeddingWithoutSqrt: ("embedding_layer", ["embedding not scaled by sqrt(d_model)"]),
    EmbeddingScaledByC: ("embedding_layer",
                         ["embedding scaled by d_model instead of sqrt(d_model)"]),
    EmbeddingDividedBySqrt: ("embedding_layer",
                             ["embedding divided by sqrt(d_model) instead of multiplied"]),
    EmbeddingWithoutPositions: ("embedding_layer", ["positions not added"]),
    EmbeddingIgnoringTheOffset: ("embedding_layer", ["positions 0..T-1 whatever the offset"]),
    EmbeddingShiftedByOne: ("embedding_layer", ["position rows shifted by one"]),
    EmbeddingIndexedById: ("embedding_layer", ["positional encoding indexed by token id"]),
    EmbeddingScalingPositionsToo: ("embedding_layer", ["positional encoding scaled too"]),
    EmbeddingAlwaysScaled: ("embedding_layer", ["scale_tokens=False ignored"]),
    EmbeddingAlwaysSinusoidal: ("embedding_layer", ["positions=False ignored"]),
    EmbeddingWithSwappedTable: ("embedding_layer",
                                ["sinusoidal table with a mistake: sin and cos swapped"]),
}


# ---------------------------------------------------------------- slips that raise

def one_hot_without_num_classes(token_ids, weight):
    return F.one_hot(token_ids).to(weight.dtype) @ weight


def one_hot_in_float32(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).float() @ weight


def positions_with_an_angle_per_dimension(seq_len, d_model):
    angles = torch.arange(seq_len)[:, None] / 10000 ** (torch.arange(d_model) / d_model)
    pe = torch.zeros(seq_len, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe


def offset_with_one_angle_per_dimension(k, d_model):
    angle = k / 10000 ** (torch.arange(d_model) / d_model)  # (C,), not one per pair
    m = torch.zeros(d_model, d_model)
    m[0::2, 0::2] = torch.diag(torch.cos(angle))
    return m


class EmbeddingWithPositionsForTheBatch(EmbeddingByIndexing):
    def forward(self, token_ids, offset=0):
        x = self.token(token_ids) * (math.sqrt(self.position.shape[1]) if self.scale_tokens else 1)
        return x + self.position[offset:offset + token_ids.shape[0]]


class EmbeddingWithLearnedBuffer(EmbeddingByIndexing):
    """The learned table registered as a buffer: it never trains."""

    def __init__(self, vocab_size, d_model, max_len, learned_positions=False, *,
                 positions=True, scale_tokens=True):
        super().__init__(vocab_size, d_model, max_len, False, positions=positions,
                         scale_tokens=scale_tokens)
        self.learned_positions = learned_positions and positions
        if self.learned_positions:
            self.register_buffer("position", torch.randn(max_len, d_model))


class EmbeddingWithSinusoidalParameter(EmbeddingByIndexing):
    """The fixed table saved as a Parameter: the optimizer would move it."""

    def __init__(self, vocab_size, d_model, max_len, learned_positions=False, *,
                 positions=True, scale_tokens=True):
        super().__init__(vocab_size, d_model, max_len, learned_positions, positions=positions,
                         scale_tokens=scale_tokens)
        if not self.learned_positions:
            table = self.position
            del self.position
            self.position = nn.Parameter(table)


class EmbeddingNamedEmbed(EmbeddingByIndexing):
    """The token table under another name than the docstring's."""

    def __init__(self, vocab_size, d_model, max_len, learned_positions=False, *,
                 positions=True, scale_tokens=True):
        super().__init__(vocab_size, d_model, max_len, learned_positions, positions=positions,
                         scale_tokens=scale_tokens)
        self.embed = self.token
        del self.token

    def forward(self, token_ids, offset=0):
        x = self.embed(token_ids) * (math.sqrt(self.position.shape[1]) if self.scale_tokens else 1)
        return x + self.position[offset:offset + token_ids.shape[-1]]


class EmbeddingOfWidthMaxLen(EmbeddingByIndexing):
    """A token table of (V, max_len): the arguments' order mixed up."""

    def __init__(self, vocab_size, d_model, max_len, learned_positions=False, *,
                 positions=True, scale_tokens=True):
        super().__init__(vocab_size, d_model, max_len, learned_positions, positions=positions,
                         scale_tokens=scale_tokens)
        self.token = nn.Embedding(vocab_size, max_len)


def one_hot_left_as_integers(token_ids, weight):
    """The most common slip of lesson 01: F.one_hot gives int64, multiplied with floats."""
    return F.one_hot(token_ids, weight.shape[0]) @ weight


SLIPS = [  # (exercise, slip, the mistake explain_error names from the error the slip raises)
    ("one_hot_embedding", one_hot_left_as_integers,
     "an integer (int64) tensor multiplied with a float one"),
    ("one_hot_embedding", one_hot_without_num_classes,
     "one-hot width taken from the ids instead of the vocabulary"),
    ("one_hot_embedding", one_hot_in_float32, "float32 tensor mixed with float64 inputs"),
    ("sinusoidal_positional_encoding", positions_with_an_angle_per_dimension,
     "one angle per dimension instead of one per pair"),
    ("offset_matrix", offset_with_one_angle_per_dimension,
     "one angle per dimension instead of one per pair"),
    ("embedding_layer", EmbeddingWithPositionsForTheBatch,
     "positional rows that do not line up with the tokens"),
    ("embedding_layer", EmbeddingWithLearnedBuffer, "learned positions not a Parameter"),
    ("embedding_layer", EmbeddingWithSinusoidalParameter,
     "sinusoidal table saved as a Parameter, not a buffer"),
    ("embedding_layer", EmbeddingOfWidthMaxLen, "a table of the wrong size"),
    ("embedding_layer", EmbeddingNamedEmbed, "tables not named as the docstring says"),
]
