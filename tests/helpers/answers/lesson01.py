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


def embed_by_indexing(token_ids, weight, pe):
    T, C = token_ids.shape[-1], weight.shape[-1]
    return weight[token_ids] * math.sqrt(C) + pe[:T]


def embed_by_einsum(token_ids, weight, pe):
    one_hot = F.one_hot(token_ids, weight.shape[0]).to(weight.dtype)
    tokens = torch.einsum("btv,vc->btc", one_hot, weight)
    return tokens * weight.shape[1] ** 0.5 + pe.narrow(0, 0, token_ids.shape[1]).unsqueeze(0)


def embed_in_float64(token_ids, weight, pe):
    C = weight.shape[-1]
    tokens = weight.double()[token_ids] / (1 / math.sqrt(C))
    return (tokens + pe.double()[: token_ids.shape[-1]]).to(weight.dtype)


CORRECT = {
    "one_hot_embedding": [one_hot_by_indexing, one_hot_by_einsum, one_hot_by_index_select],
    "sinusoidal_positional_encoding": [positions_by_loops, positions_by_stacking,
                                       positions_by_where],
    "token_and_position_embedding": [embed_by_indexing, embed_by_einsum, embed_in_float64],
}
# the reference each check compares with, which the student must not call
REFERENCES = {
    "one_hot_embedding": embeddings.one_hot_embedding,
    "sinusoidal_positional_encoding": embeddings.sinusoidal_positional_encoding,
    "token_and_position_embedding": embeddings.token_and_position_embedding,
}


# ---------------------------------------------------------------- shortcuts

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


def embedding_without_sqrt(token_ids, weight, pe):
    return weight[token_ids] + pe[: token_ids.shape[1]]


MISTAKES = {  # student's answer: (exercise, the mistakes the check must name)
    positions_swapped: ("sinusoidal_positional_encoding", ["sin and cos swapped"]),
    positions_with_i: ("sinusoidal_positional_encoding",
                       ["positional exponent uses i instead of 2i"]),
    embedding_without_sqrt: ("token_and_position_embedding",
                             ["embedding not scaled by sqrt(d_model)"]),
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


def embedding_with_positions_for_the_batch(token_ids, weight, pe):
    return weight[token_ids] * math.sqrt(weight.shape[1]) + pe[: token_ids.shape[0]]


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
    ("token_and_position_embedding", embedding_with_positions_for_the_batch,
     "positional rows that do not line up with the tokens"),
]
