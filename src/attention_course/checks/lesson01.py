"""Checks for lesson 01_embeddings: one-hot embedding, sinusoidal positional encoding, the
matrix that moves an encoding by an offset, the token + position embedding layer."""

import copy

import torch

from .. import embeddings
from .framework import Case, Exercise, Harnessed, Mistake, randn, run_check, seeded
from .student import harness
from .student.shortcuts import forbid

# ---------------------------------------------------------------- one-hot embedding

ONE_HOT_EMBEDDING = Exercise(
    name="one_hot_embedding",
    reference=embeddings.one_hot_embedding,
    inputs=("token_ids", "weight"),
    outputs=(("embeddings", "(B, T, C): one row of weight per token"),),
    forbidden=forbid([embeddings.one_hot_embedding], ["embedding"]),
)


def check_one_hot_embedding(fn, seed: int = 0) -> None:
    """Check one_hot_embedding(token_ids, weight) -> (B, T, C). Lesson: 01_embeddings"""
    g = seeded(seed)
    ids = torch.randint(7, (2, 5), generator=g)
    cases = [
        Case("B, T = 2, 5 ids from a vocabulary of V = 7, width C = 4",
             (ids, randn(7, 4, generator=g))),
        Case("float64 weight, with gradients", (ids, randn(7, 4, generator=g,
                                                            dtype=torch.float64)), grad=True),
        Case("one sequence of ids (T,)", (torch.tensor([6, 0, 3]), randn(7, 4, generator=g))),
        Case("a vocabulary id that does not occur, V = 9", (ids, randn(9, 3, generator=g))),
        Case("extra batch dims, ids of shape (2, 2, 3)",
             (torch.randint(7, (2, 2, 3), generator=g), randn(7, 4, generator=g))),
    ]
    run_check(ONE_HOT_EMBEDDING, fn, cases)


# ---------------------------------------------------------------- sinusoidal positions

def positional_variant(seq_len, d_model, *, swap=False, exponent="2i", layout="interleaved",
                       start=0, inverted=False):
    t = torch.arange(start, start + seq_len, dtype=torch.float64)[:, None]  # (T, 1)
    j = torch.arange(d_model)  # (C,)
    power = {"2i": j - j % 2, "i": j // 2, "j": j, "4i": 2 * (j - j % 2)}[exponent] / d_model
    angles = t * 10000.0 ** power if inverted else t / 10000.0 ** power  # (T, C)
    first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
    if layout == "concatenated":
        pair_angles = angles[:, 0::2]  # (T, C/2)
        pe = torch.cat([first(pair_angles), second(pair_angles)], dim=-1)
    else:
        pe = torch.where(j % 2 == 0, first(angles), second(angles))
    return pe.float()


SINUSOIDAL_POSITIONAL_ENCODING = Exercise(
    name="sinusoidal_positional_encoding",
    reference=embeddings.sinusoidal_positional_encoding,
    inputs=("seq_len", "d_model"),
    outputs=(("pe", "(T, C): one row per position"),),
    variant=positional_variant,
    mistakes=(
        Mistake("sin and cos swapped",
                "Even dimensions 2i hold sin, odd dimensions 2i + 1 hold cos: PE[0] is "
                "[0, 1, 0, 1, ...].", {"swap": True}),
        Mistake("positional exponent uses i instead of 2i",
                "Dimensions 2i and 2i + 1 share the frequency 1 / 10000^(2i / C): the exponent "
                "is 2i / C, where i counts the pairs.", {"exponent": "i"}),
        Mistake("positional exponent uses the dimension index, not its pair",
                "The cosine in dimension 2i + 1 uses the same frequency as the sine in 2i: "
                "round the dimension down to even, 2i / C.", {"exponent": "j"}),
        Mistake("sin and cos concatenated instead of interleaved",
                "This lesson interleaves them: sin in the even dimensions, cos in the odd ones "
                "(pe[:, 0::2] and pe[:, 1::2]).", {"layout": "concatenated"}),
        Mistake("the 2 of 2i counted twice (exponent 4i / C)",
                "torch.arange(0, C, 2) already gives 2i = 0, 2, 4, ...: divide it by C without "
                "multiplying by 2 again.", {"exponent": "4i"}),
        Mistake("frequency inverted (t * 10000^(2i/C))",
                "The angle is t / 10000^(2i / C): high dimensions turn slowly, with wavelengths "
                "up to 2*pi*10000.", {"inverted": True}),
        Mistake("positions counted from 1",
                "The first position is t = 0, so PE[0] = [0, 1, 0, 1, ...].", {"start": 1}),
    ),
    forbidden=forbid([embeddings.sinusoidal_positional_encoding]),
)


def check_sinusoidal_positional_encoding(fn, seed: int = 0) -> None:
    """Check sinusoidal_positional_encoding(seq_len, d_model) -> (T, C). Lesson: 01_embeddings"""
    cases = [
        Case("T = 6 positions, C = 8 dimensions", (6, 8)),
        Case("T = 50 positions, C = 16", (50, 16)),
        Case("C = 6, not a power of two", (9, 6)),
        Case("a single position", (1, 4)),
    ]
    run_check(SINUSOIDAL_POSITIONAL_ENCODING, fn, cases)


# ---------------------------------------------------------------- moving by an offset

def offset_variant(k, d_model, *, block="rotation", pairs="adjacent", exponent="2i",
                   inverted=False, frequency=True):
    """The offset matrix with one of the known slips: the rotation transposed (it moves by -k)
    or with sin and cos swapped, the blocks on dimensions i and i + C/2, the frequencies of
    the encoding's known slips, or the angle k in every pair."""
    half = d_model // 2
    i = torch.arange(half, dtype=torch.float64)
    power = {"2i": 2 * i, "i": i}[exponent] / d_model
    angle = k * 10000.0 ** power if inverted else k / 10000.0 ** power  # (C/2,)
    if not frequency:
        angle = torch.full_like(i, float(k))
    cos, sin = torch.cos(angle), torch.sin(angle)
    if block == "transposed":
        sin = -sin
    if block == "swapped":
        cos, sin = sin, cos
    first = 2 * i.long() if pairs == "adjacent" else i.long()  # sin's dimension of pair i
    second = first + 1 if pairs == "adjacent" else first + half  # cos's dimension of pair i
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    m[first, first], m[second, second] = cos, cos
    m[first, second], m[second, first] = -sin, sin
    return m.float()


OFFSET_MATRIX = Exercise(
    name="offset_matrix",
    reference=embeddings.offset_matrix,
    inputs=("k", "d_model"),
    outputs=(("M", "(C, C): PE[t + k] = PE[t] @ M"),),
    variant=offset_variant,
    mistakes=(
        Mistake("rotation transposed: it moves the encoding k places back",
                "PE[t] @ M is a row times M: the new dimension 2i is PE[t, 2i] M[2i, 2i] + "
                "PE[t, 2i + 1] M[2i + 1, 2i]. Expand sin(a + b) and cos(a + b) and read off "
                "which entry of each block holds +sin and which -sin.",
                {"block": "transposed"}),
        Mistake("sin and cos swapped in the blocks",
                "At k = 0 nothing moves, so M must be the identity: cos(k w_i) goes on the "
                "diagonal, sin(k w_i) off it.", {"block": "swapped"}),
        Mistake("blocks on dimensions i and i + C/2 instead of 2i and 2i + 1",
                "This lesson's encoding interleaves its pairs: the sine of pair i sits in "
                "dimension 2i and its cosine in 2i + 1, so each 2x2 block sits on the diagonal, "
                "on rows and columns 2i and 2i + 1.", {"pairs": "halves"}),
        Mistake("angle uses the exponent i instead of 2i",
                "Pair i turns at the encoding's frequency w_i = 1 / 10000^(2i / C): the same "
                "exponent as in sinusoidal_positional_encoding.", {"exponent": "i"}),
        Mistake("frequency inverted (k * 10000^(2i/C))",
                "The angle of pair i is k / 10000^(2i / C): high pairs turn slowly.",
                {"inverted": True}),
        Mistake("the same angle k in every pair",
                "Every pair turns by its own angle, the offset times its frequency: k w_i with "
                "w_i = 1 / 10000^(2i / C).", {"frequency": False}),
    ),
    forbidden=forbid([embeddings.offset_matrix]),
)


def check_offset_matrix(fn, seed: int = 0) -> None:
    """Check offset_matrix(k, d_model) -> (C, C). Lesson: 01_embeddings"""
    g = seeded(seed)
    k = int(torch.randint(2, 9, (1,), generator=g))
    cases = [
        Case(f"offset k = {k}, C = 8", (k, 8)),
        Case("offset k = 1, C = 16", (1, 16)),
        Case("offset k = 0: nothing moves", (0, 6)),
        Case(f"a negative offset, k = -{k + 1}, C = 8", (-(k + 1), 8)),
        Case("a long offset, k = 40, C = 12", (40, 12)),
    ]
    run_check(OFFSET_MATRIX, fn, cases)


# ---------------------------------------------------------------- the embedding layer

def embedding_variant(module, token_ids, offset=0, *, scale="sqrt", positions="offset",
                      scale_sum=False, switches="honoured", table=()):
    """The reference ``module``'s embedding with a mistake: ``scale`` of the tokens ("sqrt",
    "none", "C", "inverse"), ``positions`` read ("offset": offset .. offset+T-1, "zero": 0 .. T-1
    whatever the offset, "shifted": one row on, "token": the rows of the ids, "none"),
    ``scale_sum``: the positions scaled too; ``switches``: "scale ignored" or "positions
    ignored" (positions=False or scale_tokens=False not honoured); ``table``: the knobs of
    ``positional_variant`` (as pairs) that made the student's sinusoidal table."""
    C, T = module.token.weight.shape[-1], token_ids.shape[-1]
    tokens = module.token(token_ids)  # (B, T, C)
    scaled = module.scale_tokens or switches == "scale ignored"
    factor = {"sqrt": C ** 0.5, "none": 1.0, "C": float(C), "inverse": C ** -0.5}[scale]
    factor = factor if scaled else 1.0
    knobs, table = dict(table), module.position
    if switches == "positions ignored" and not module.learned_positions:
        table = embeddings.sinusoidal_positional_encoding(module.max_len, C, dtype=tokens.dtype)
    elif knobs and not module.learned_positions and module.position.any():  # sinusoidal
        table = positional_variant(module.max_len, C, **knobs).to(tokens)
    start = {"offset": offset, "zero": 0, "shifted": offset + 1}.get(positions, 0)
    position = (table[token_ids] if positions == "token" else
                0.0 if positions == "none" else table[start:start + T])
    return (tokens + position) * factor if scale_sum else tokens * factor + position


EMBEDDING_MISTAKES = (
    Mistake("embedding not scaled by sqrt(d_model)",
            "This lesson (like the original transformer) multiplies the token embedding by "
            "sqrt(C) before adding the positions.", {"scale": "none"}),
    Mistake("embedding scaled by d_model instead of sqrt(d_model)",
            "The factor is sqrt(C), not C.", {"scale": "C"}),
    Mistake("embedding divided by sqrt(d_model) instead of multiplied",
            "The token rows start small (standard deviation 1/sqrt(C)); multiplying them by "
            "sqrt(C) brings them to the size of the positions. Dividing makes them smaller "
            "still.", {"scale": "inverse"}),
    Mistake("positions not added",
            "Add the encoding of each token's position to its scaled embedding: without it "
            "the layer cannot tell one position from another.", {"positions": "none"}),
    Mistake("positions 0..T-1 whatever the offset",
            "With an offset the T tokens sit at positions offset .. offset+T-1 (the cache "
            "holds the earlier ones): take those rows of the position table, not the first "
            "T.", {"positions": "zero"}),
    Mistake("position rows shifted by one",
            "Token t (counted from 0) gets row offset + t of the position table: the first "
            "token of a sequence gets row 0, and row 0 of a sinusoidal table is position 0, "
            "[0, 1, 0, 1, ...].", {"positions": "shifted"}),
    Mistake("positional encoding indexed by token id",
            "Positions are 0..T-1 along the sequence (from the offset), whatever the tokens "
            "are: take rows of the position table by position, not by id.",
            {"positions": "token"}),
    Mistake("positional encoding scaled too",
            "Only the token embedding is multiplied by sqrt(C); add the positions afterwards.",
            {"scale_sum": True}),
    Mistake("scale_tokens=False ignored",
            "With scale_tokens=False the token embedding is added as it is, without the "
            "sqrt(C) factor.", {"switches": "scale ignored"}),
    Mistake("positions=False ignored",
            "With positions=False nothing is added for the positions: the position table is "
            "all zeros.", {"switches": "positions ignored"}),
    # the layer's fixed table comes from the student's sinusoidal_positional_encoding
    *(Mistake(f"sinusoidal table with a mistake: {m.name}",
              "Your layer's fixed table comes from your sinusoidal_positional_encoding, which "
              "has this mistake (its check above names it too): fix it there, and run this "
              "layer's cell and check again.", {"table": tuple(sorted(m.knobs.items()))})
      for m in SINUSOIDAL_POSITIONAL_ENCODING.mistakes
      if "start" not in m.knobs),  # a table from position 1: the rows shifted, named above
)


def _forbidden_embedding():
    return forbid([embeddings.TokenAndPositionEmbedding.forward,
                   embeddings.token_and_position_embedding])


def _embedding_exercise(references: dict) -> Exercise:
    return Exercise(
        name="TokenAndPositionEmbedding",
        reference=lambda ids, dtype=torch.float32, **kw: references[dtype](ids, **kw),
        inputs=("token_ids",),
        outputs=(("embeddings", "(B, T, C)"),),
        variant=lambda ids, dtype=torch.float32, **kw: embedding_variant(references[dtype], ids,
                                                                         **kw),
        mistakes=EMBEDDING_MISTAKES,
        forbidden=_forbidden_embedding(),
    )


EMBEDDING_CONFIGS = (  # (what the description says, the constructor's arguments)
    ("sinusoidal positions", {}),
    ("learned positions", {"learned_positions": True}),
    ("positions=False and scale_tokens=False", {"positions": False, "scale_tokens": False}),
)


def check_embedding_layer(cls, seed: int = 0) -> None:
    """Check a TokenAndPositionEmbedding class, its constructor and its forward.

    The student's module is built with each configuration's arguments; its parameters get the
    reference's values (their names and shapes are the contract), its buffers stay its own (the
    sinusoidal table comes from the student's function), and both run on the same token ids,
    without and with an offset, in float32 and in float64 with gradients.
    Lesson: 01_embeddings
    """
    V, C, max_len = 7, 8, 12
    earlier = 0
    for number, (words, options) in enumerate(EMBEDDING_CONFIGS):
        torch.manual_seed(seed + number)
        reference = embeddings.TokenAndPositionEmbedding(V, C, max_len, **options).eval()
        references = {torch.float32: reference,
                      torch.float64: copy.deepcopy(reference).double()}
        init = {"vocab_size": V, "d_model": C, "max_len": max_len, **options}
        state = {name: p.detach().clone() for name, p in reference.named_parameters()}
        student = Harnessed(harness.EmbeddingUnderTest, (cls, init, state))
        cases = _embedding_cases(seed + number, words, V)
        last = number == len(EMBEDDING_CONFIGS) - 1
        run_check(_embedding_exercise(references), student, cases,
                  reference_parameters=lambda r=references, d=cases[-1].kwargs["dtype"]: dict(
                      r[d].named_parameters()),
                  quiet=not last, earlier=earlier)
        earlier += len(cases)


def _embedding_cases(seed: int, words: str, V: int) -> list[Case]:
    """The sinusoidal table is the student's own, computed in float32: its float64 copy holds
    float32's rounding, so that configuration's gradient case stays in float32."""
    dtype = torch.float32 if words.startswith("sinusoidal") else torch.float64
    precision = str(dtype).removeprefix("torch.")
    g = seeded(seed)
    ids, longer = torch.randint(V, (2, 5), generator=g), torch.randint(V, (3, 8), generator=g)
    offset = int(torch.randint(2, 4, (1,), generator=g))
    return [
        Case(f"{words}, V, C, max_len = 7, 8, 12, B, T = 2, 5", (ids,)),
        Case(f"{words}, after a cache: offset = {offset}, T = 5", (ids,), {"offset": offset}),
        Case(f"{words}, {precision} with gradients, offset = 3, B, T = 3, 8", (longer,),
             {"offset": 3, "dtype": dtype}, grad=True),
    ]
