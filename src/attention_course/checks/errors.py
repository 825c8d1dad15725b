"""Errors that common slips raise, put into words for the student.

When the student's code raises, a check reports the error's text ("RuntimeError: The size of
tensor a (5) must match the size of tensor b (3) at non-singleton dimension 1"). Many such
texts come from a handful of slips: a reduction that dropped its axis, a transpose of every
axis, a product of shapes that do not line up. ``explain_error`` recognises them from a table of
(exercises, pattern, mistake, hint): the first row whose exercises include this one (or that
holds for every exercise) and whose pattern is found in the text names the mistake. Hints give
the idea, never the answer's code. A text that no row recognises is left as it is.
"""

import re
from typing import NamedTuple


class KnownError(NamedTuple):
    exercises: frozenset[str]  # the exercises where the pattern means this mistake; empty: all
    pattern: str  # a regular expression, searched in "ErrorType: message"
    mistake: str
    hint: str


EVERY = frozenset()
# exercises whose inputs may have any number of leading (batch) axes, even none
ANY_AXES = frozenset({"one_hot_embedding", "softmax", "scaled_dot_product_attention",
                      "apply_mask", "masked_attention",
                      "cached_attention", "tiled_attention",
                      "merge_attention", "attention_backward", "flash_backward",
                      "flash_attention"})
MHA = frozenset({"MultiHeadAttention"})
EMBEDDING = frozenset({"TokenAndPositionEmbedding"})
GQA_LAYER = frozenset({"GroupedQueryAttention"})
LAYERS = MHA | GQA_LAYER  # modules whose constructor the student writes
ATTENTION = frozenset({"scaled_dot_product_attention", "masked_attention"}) | MHA
MASKS = frozenset({"apply_mask", "masked_attention", "to_mha_mask"}) | MHA
LOADED = r"could not load the course's weights [\s\S]*?"  # harness.ModuleUnderTest's words

BROADCAST = r"The size of tensor a \(\d+\) must match the size of tensor b \(\d+\)"
MATMUL = (r"mat1 and mat2 shapes cannot be multiplied|Expected size for first two dimensions of "
          r"batch2 tensor|size mismatch, got input|shapes cannot be multiplied")
FIXED_AXES = (r"Dimension out of range|number of dimensions in the tensor input does not match "
              r"the length of the desired ordering|number of subscripts in the equation \(\d+\) "
              r"does not match the number of dimensions|values to unpack \(expected \d+")
KEEPDIM = ("reduction without keepdim=True",
           "A reduction along an axis (sum, amax, max, mean) drops that axis unless keepdim=True, "
           "so its result no longer lines up with x for broadcasting.")
TRANSPOSED_EVERY_AXIS = (
    "every axis of key reversed (.T) instead of the last two swapped",
    "On a tensor with batch axes in front, .T reverses all of its axes (PyTorch warns about "
    "it), so the key's batch axes no longer line up with the query's. Only the key's last two "
    "axes, (S, D), should swap.")

KNOWN_ERRORS: tuple[KnownError, ...] = (
    # ------------------------------------------------ lesson 10: latent attention
    KnownError(frozenset({"absorbed_latent_attention"}), r"^NotAbsorbed: ",
               "per-head keys or values built (the naive form)",
               "The absorbed form never up-projects the latent: fold w_uk into the query "
               "(query @ w_uk[h] transposed gives a d_c-wide query per head), score it against "
               "the latent itself, take the weighted sum of the latents, and only then apply "
               "w_uv."),
    KnownError(frozenset({"absorbed_latent_attention"}),
               MATMUL + r"|einsum\(\): subscript \w has size \d+ for operand \d+ which does not "
               r"broadcast",
               "the absorbed matrices multiplied in the wrong order (or w_uk not transposed)",
               "Follow the shapes: the query (B, H, T, D) meets w_uk[h] (d_c, D) by its last "
               "axis, so it is multiplied by w_uk transposed (D, d_c) on the right, giving "
               "(B, H, T, d_c); the weighted latents (B, H, T, d_c) are multiplied by w_uv "
               "(H, d_c, Dv) on the right."),
    KnownError(frozenset({"LatentAttention"}),
               r"^TypeError: your forward returned a \w+, expected the pair \(out, cache\)",
               "forward returns no cache",
               "A decoding layer returns its output and the cache for the next call: the pair "
               "(out, (latent, rope_key)), even for the first call."),
    # ------------------------------------------------ lesson 07: caches, groups and tiles
    KnownError(frozenset({"cached_attention"}), r"Sizes of tensors must match except in dimension",
               "cache appended on the wrong axis",
               "The cache grows along the sequence axis, the second-to-last one: P cached "
               "tokens and T new ones make S = P + T positions, (B, H, P, D) and (B, H, T, D) "
               "give (B, H, S, D). Along any other axis the two would have to be the same "
               "size."),
    KnownError(frozenset({"cached_attention"}),
               r"expected Tensor as element \d+ in argument 0, but got NoneType|'NoneType' "
               r"object has no attribute|unsupported operand type\(s\) for .*'NoneType'",
               "an empty cache (None) not handled",
               "past_key=None means nothing is cached yet (the prompt's first step): the keys "
               "and values are then the new ones alone. Test for None before appending."),
    KnownError(GQA_LAYER,
               BROADCAST + r" at non-singleton dimension \d|the batch dims of query .* and key "
               r".* do not broadcast|" + MATMUL,
               "key/value heads not lined up with the query heads",
               "The queries have H heads, the keys and values G: each key/value head serves a "
               "group of H // G consecutive query heads. Give every query head its key/value head "
               "(repeat each of the G heads H // G times in place, along the head axis), or "
               "give the query a group axis, before the products."),
    KnownError(frozenset({"tiled_attention"}), r"^NotTiled: .* a row for every one of the S",
               "every key at once, a block of queries at a time",
               "Cutting the queries into blocks still builds, for each block, its scores against "
               "every key. Tiled attention cuts the keys: for each block of block_size keys, "
               "compute every query's scores against that block only, and fold them into each "
               "query's running max, sum and output (the online softmax)."),
    KnownError(frozenset({"tiled_attention"}), r"^NotTiled: ",
               "the whole (T, S) score matrix computed at once",
               "Tiled attention never holds every query's scores against every key: take the "
               "keys and values block_size at a time, compute that block's scores only, and "
               "fold them into the running max, sum and output of each query."),
    KnownError(frozenset({"flash_backward", "flash_attention"}), r"^NotTiled: ",
               "the whole (T, S) matrix computed at once",
               "FlashAttention never holds every query's scores, weights or their gradients "
               "against every key: take the keys and values block_size at a time and compute "
               "that tile's scores, P and dS only, adding each tile's share to the gradients."),
    KnownError(frozenset({"flash_attention"}),
               r"returned an incorrect number of gradients \(expected (?P<expected>\d+), "
               r"got (?P<got>\d+)\)",
               "backward returns fewer gradients than forward has inputs",
               "backward returns one gradient per input of forward, in the same order: "
               "{expected} here, not {got}. The inputs that are not tensors to differentiate "
               "(is_causal, scale, block_size) get None."),
    KnownError(frozenset({"merge_attention"}), BROADCAST,
               "shares of shape (..., T) multiplied with outputs of shape (..., T, Dv)",
               "A logsumexp has one number per query, (..., T); an output has a row per query, "
               "(..., T, Dv). Broadcasting lines up the last axes, T against Dv: give each "
               "share a trailing axis of size 1 first."),
    # ------------------------------------------------ lesson 04: the constructor's layers
    KnownError(MHA, LOADED + r"size mismatch for (?P<name>[\w.]+): copying a param with shape "
               r"torch\.Size\(\[(?P<expected>[\d, ]*)\]\) from checkpoint, the shape in current "
               r"model is torch\.Size\(\[(?P<got>[\d, ]*)\]\)",
               "a projection of the wrong size",
               "{name} is ({got}) in your module, ({expected}) in the contract. Each of the "
               "four projections maps all C = d_model features to C: one layer computes every "
               "head at once, H heads of D = C / H side by side."),
    KnownError(LAYERS, LOADED + r"Missing key\(s\) in state_dict: \"[\w.]+\.bias\"(, \"[\w.]+\."
               r"bias\")*\. *(\)|$)", "biases although bias=False",
               "The check built your module with bias=False and it still has biases: pass the "
               "constructor's bias on to every projection."),
    KnownError(LAYERS, LOADED + r"Unexpected key\(s\) in state_dict: \"[\w.]+\.bias\"(, \"[\w.]"
               r"+\.bias\")*\. *(\)|$)", "no biases although bias=True",
               "The check built your module with bias=True and a projection has no bias: pass "
               "the constructor's bias on to every projection (nn.Linear has one by default)."),
    KnownError(MHA, LOADED + r"(Missing|Unexpected) key\(s\) in state_dict",
               "layers not named as the docstring says",
               "The check loads the course's weights by name: q_proj, k_proj, v_proj and out_proj, "
               "four separate nn.Linear layers, and no other parameters."),
    KnownError(MHA, r"^AttributeError: 'MultiHeadAttention' object has no attribute "
                    r"'(?P<name>\w+)'",
               "an attribute the constructor does not set",
               "Your code reads self.{name}, which the constructor has not set: the constructor "
               "sets every attribute the docstring lists, before anything uses it."),
    # ------------------------------------------------ lesson 01: the embedding layer's tables
    KnownError(EMBEDDING, r"^ValueError: your module's parameters are (token\.weight|none); "
               r"built with .*? the contract's are position, token\.weight$",
               "learned positions not a Parameter",
               "With learned_positions=True the position table is learned: make it an "
               "nn.Parameter named position (a buffer, or a plain tensor, never trains)."),
    KnownError(EMBEDDING, r"^ValueError: your module's parameters are [\w., ]*\bposition\b"
               r"[\w., ]*; built with .*? the contract's are token\.weight$",
               "sinusoidal table saved as a Parameter, not a buffer",
               "The sinusoidal table is fixed: register it with self.register_buffer('position', "
               "...) so that it moves with .to() and is saved, but the optimizer never changes "
               "it."),
    KnownError(EMBEDDING, r"^ValueError: your module's parameters are",
               "tables not named as the docstring says",
               "The check gives your module the course's weights by name: token (an "
               "nn.Embedding, its table token.weight) and, for learned positions only, the "
               "parameter position; no other parameters."),
    KnownError(EMBEDDING, LOADED + r"size mismatch for (?P<name>[\w.]+): copying a param with "
               r"shape torch\.Size\(\[(?P<expected>[\d, ]*)\]\) from checkpoint, the shape in "
               r"current model is torch\.Size\(\[(?P<got>[\d, ]*)\]\)",
               "a table of the wrong size",
               "{name} is ({got}) in your module, ({expected}) in the contract: the token table "
               "has one row of C = d_model numbers per vocabulary entry (V, C), the position "
               "table one per position (max_len, C)."),
    # ------------------------------------------------ lesson 07: the grouped-query layer
    KnownError(GQA_LAYER, LOADED + r"size mismatch for (?P<name>[\w.]+): copying a param with "
               r"shape torch\.Size\(\[(?P<expected>[\d, ]*)\]\) from checkpoint, the shape in "
               r"current model is torch\.Size\(\[(?P<got>[\d, ]*)\]\)",
               "a projection of the wrong size",
               "{name} is ({got}) in your module, ({expected}) in the contract. q_proj and "
               "out_proj map C to C (H heads of D = C / H); k_proj and v_proj map C to G * D "
               "only, the G key/value heads of the same width D."),
    KnownError(GQA_LAYER, LOADED + r"(Missing|Unexpected) key\(s\) in state_dict",
               "layers not named as the docstring says",
               "The check loads the course's weights by name: q_proj, k_proj, v_proj and "
               "out_proj, four nn.Linear layers, each with a bias exactly when bias is true, and "
               "no other parameters."),
    # ------------------------------------------------ lesson 03: a mask made on its device
    KnownError(frozenset({"causal_mask"}), r"Cannot copy out of meta tensor",
               "device argument ignored",
               "The check sets torch's default device to 'meta' (a device without data) and "
               "passes device='cpu': the mask was made on the default device and then copied, "
               "which a meta tensor cannot be. Make it where it is asked for: pass device=device "
               "to the functions that create tensors."),
    # ------------------------------------------------ shapes that do not broadcast
    KnownError(frozenset({"softmax"}), BROADCAST, *KEEPDIM),
    KnownError(frozenset({"scaled_dot_product_attention"}),
               BROADCAST + r" at non-singleton dimension 3", *KEEPDIM),
    KnownError(frozenset({"scaled_dot_product_attention"}) | MHA,
               BROADCAST + r" at non-singleton dimension [0-2]\b", *TRANSPOSED_EVERY_AXIS),
    KnownError(frozenset({"masked_attention"}) | MHA, BROADCAST + r" at non-singleton dimension 3",
               "shapes that differ along the keys' axis",
               "Something combined with the (B, H, T, S) scores has another length along the "
               "last axis, the keys'. Here T != S: a causal mask must be (T, S), not (T, T); and "
               "a sum or max over the keys drops that axis unless keepdim=True."),
    KnownError(frozenset({"packed_attention"}),
               r"The shape of the mask \[\d+, \d+\] at index 1 does not match the shape of the "
               r"indexed tensor \[\d+, \d+, \d+, \d+\]",
               "a (B, 1, 1, S) padding mask against scores with no head axis",
               "The padded batch is (B, L, D), so its scores are (B, L, L): a (B, 1, 1, L) mask "
               "broadcasts with them to (B, B, L, L), every sequence against every other's "
               "mask. Give the mask the shape (B, 1, L), or give the batch a head axis."),
    KnownError(frozenset({"padding_mask"}), BROADCAST,
               "lengths compared with the positions without lining up their axes",
               "Comparing the (S,) positions with the (B,) lengths pairs up their only axes. To "
               "compare every length with every position, give the lengths an axis of their "
               "own: a (B, 1) column against the (S,) row broadcasts to (B, S)."),
    KnownError(EMBEDDING, BROADCAST,
               "positional rows that do not line up with the tokens",
               "The positions must contribute one row per position of the sequence: T is the "
               "last axis of token_ids (the first one is the batch), and the T rows from the "
               "offset on then broadcast over the batch."),
    KnownError(frozenset({"sinusoidal_positional_encoding"}),
               r"The expanded size of the tensor \(\d+\) must match the existing size",
               "one angle per dimension instead of one per pair",
               "pe[:, 0::2] and pe[:, 1::2] each hold C / 2 columns: compute one angle per pair "
               "i (C / 2 of them), shared by the sine and the cosine of that pair."),
    KnownError(frozenset({"offset_matrix"}),
               r"The expanded size of the tensor \(\d+\) must match the existing size|shape "
               r"mismatch: value tensor of shape",
               "one angle per dimension instead of one per pair",
               "The matrix has C / 2 blocks of 2x2, one per pair i of the encoding: compute C / 2 "
               "angles, k times each pair's frequency, and use each one in its block's four "
               "entries."),
    KnownError(EVERY, r"The size of tensor a \((?P<a>\d+)\) must match the size of tensor b "
                      r"\((?P<b>\d+)\) at non-singleton dimension (?P<axis>\d+)",
               "two tensors whose axes do not line up",
               "Two tensors were combined element by element and their axis {axis} (counted "
               "from the front, after broadcasting) holds {a} in one and {b} in the other. "
               "Print both shapes just before that line: one of them has its axes in another "
               "order, or lost an axis in a reduction (keepdim=True keeps it)."),
    # ------------------------------------------------ matrix products
    KnownError(frozenset({"one_hot_embedding"}), MATMUL,
               "one-hot width taken from the ids instead of the vocabulary",
               "Without num_classes, F.one_hot makes vectors as wide as the largest id in this "
               "batch plus one, which is less than V when the last ids do not occur. The "
               "vocabulary has V = weight.shape[0] entries."),
    KnownError(MHA, r"mat1 and mat2 shapes cannot be multiplied",
               "a projection applied to a tensor whose last axis is not d_model",
               "q_proj, k_proj, v_proj and out_proj are Linear layers from C = d_model features "
               "to C: they act on (B, T, C) tensors, before the heads are split and after they "
               "are merged again."),
    KnownError(ATTENTION, MATMUL, "matrix product of shapes that do not line up",
               "A @ B pairs the last axis of A with the second-to-last axis of B, so those sizes "
               "must be equal: (..., T, D) @ (..., D, S) -> (..., T, S), then (..., T, S) @ "
               "(..., S, Dv) -> (..., T, Dv). Keys are stored as (..., S, D): only their last "
               "two axes swap for the product."),
    KnownError(EVERY, MATMUL, "matrix product of shapes that do not line up",
               "A @ B pairs the last axis of A with the second-to-last axis of B, so those sizes "
               "must be equal."),
    KnownError(EVERY, r"t\(\) expects a tensor with <= 2 dimensions",
               ".t() on a tensor with batch axes",
               ".t() and .T turn over a single matrix; with batch axes in front, swap only the "
               "last two axes."),
    # ------------------------------------------------ axes counted for one rank
    KnownError(MHA, r"number of subscripts in the equation \(\d+\) does not match the number",
               "einsum letters that do not match the tensor's axes",
               "An einsum equation names one letter per axis of each operand. This operand has "
               "another number of axes than its letters: (B, T, C) before the heads are split, "
               "(B, H, T, D) or (B, T, H, D) after."),
    KnownError(ANY_AXES, FIXED_AXES, "code written for one number of axes",
               "The check also passes inputs with no batch axes or with extra ones: the "
               "docstring promises any leading axes. Count axes from the end (-1 is the last, "
               "-2 the one before) and, in einsum, let '...' stand for the leading axes."),
    KnownError(EVERY, r"values to unpack \(expected \d+",
               "shape unpacked into the wrong number of names",
               "Unpacking x.shape needs exactly one name per axis of x, and x has another number "
               "of axes here: (B, T, C) before the heads are split, (B, H, T, D) after."),
    KnownError(EVERY, r"einsum\(\): (output subscript \w appears more than once|subscript \w has "
                      r"size \d+ for operand \d+ which does not broadcast)",
               "one einsum letter for two different axes",
               "Each letter of an einsum equation stands for one size. Queries (T) and keys (S) "
               "need letters of their own, even when T = S."),
    # ------------------------------------------------ view and reshape
    KnownError(EVERY, r"is invalid for input of size|don't multiply up to the size of dim",
               "view or reshape sizes that do not multiply to the tensor's size",
               "view, reshape and unflatten only regroup the elements, so the new sizes must "
               "multiply to the old ones. With C = H * D, each head is D = C // H wide."),
    KnownError(EVERY, r"view size is not compatible with input tensor's size and stride",
               "view on a transposed tensor",
               "A transpose changes the order in which the elements are read, not where they "
               "are stored, and view can only regroup axes whose elements sit next to each other "
               "in memory. reshape copies when it has to (so does contiguous() before view)."),
    # ------------------------------------------------ Python numbers, None and truth values
    KnownError(EVERY, r"unsupported operand type\(s\) for .*'torch\.return_types\.(max|min)'",
               "max(dim=...) used as a tensor",
               "With dim=, max returns a pair (values, indices): take its values, or use amax, "
               "which returns the values alone."),
    KnownError(EVERY, r"argument 'input' \(position 1\) must be Tensor, not (int|float)",
               "torch function given a Python number",
               "torch functions such as torch.sqrt and torch.tril take tensors. A plain number "
               "such as D works with Python's math module or ** 0.5; a mask starts from a "
               "tensor (torch.ones, torch.arange)."),
    KnownError(ATTENTION - MHA, r"unsupported operand type\(s\) for [*/]: .*'NoneType'",
               "scale=None used as a number",
               "scale=None means the default 1/sqrt(D): replace None by it before scaling, and "
               "use a scale the caller gives as it is."),
    KnownError(MASKS - {"to_mha_mask"},
               r"'NoneType' object has no attribute|bad operand type for unary ~: 'NoneType'|"
               r"unsupported operand type\(s\) for .*'NoneType'|masked_fill\(\) received an "
               r"invalid combination of arguments - got \(NoneType",
               "attn_mask=None not handled",
               "attn_mask=None means no mask at all: test for None before using the mask."),
    KnownError(MASKS, r"masked_fill_? only supports boolean masks|\"bitwise_(and|or|xor|not)_"
                      r"\w+\" not implemented for '(Float|Double|Half|BFloat16)'|"
                      r"operator\.invert\) is only implemented on integer and Boolean",
               "float mask used as a bool mask",
               "A float mask is added to the scores (0 keeps a position, -inf hides it). Only a "
               "bool mask selects positions or combines with ~, & and |: tell the two kinds "
               "apart by their dtype."),
    KnownError(EVERY, r"Boolean value of Tensor with more than one (value|element) is ambiguous",
               "a tensor used as a single True/False",
               "if, and, or and not need one True/False, but a mask holds many. Whether a mask "
               "was given is a question about None; masks combine element by element with & "
               "and |."),
    # ------------------------------------------------ dtypes
    KnownError(EVERY, r"long int != |!= long int|expected scalar type Long but found|"
                      r"expected scalar type \w+ but found Long",
               "an integer (int64) tensor multiplied with a float one",
               "F.one_hot, torch.arange and argmax give int64 tensors, and a matrix product "
               "does not mix integers with floats. Turn the integer tensor into floats of the "
               "other operand's dtype (the weight's) before the product."),
    KnownError(EVERY, r"expected m1 and m2 to have the same dtype|expected scalar type "
                      r"(Float|Double|Half|BFloat16) but found|to have the same dtype",
               "float32 tensor mixed with float64 inputs",
               "New tensors (torch.zeros, torch.ones, torch.tensor, .float()) are float32, "
               "torch's default, whatever the inputs are; with float64 inputs the two no longer "
               "combine. Make new tensors follow the dtype of the inputs."),
)


def explain_error(exercise_name: str, error: str) -> tuple[str, str] | None:
    """(mistake, hint) for the text of an error raised by the student's code on exercise
    ``exercise_name`` (e.g. "softmax", "MultiHeadAttention"), or None if unknown."""
    for row in KNOWN_ERRORS:
        found = re.search(row.pattern, error)
        if found and (not row.exercises or exercise_name in row.exercises):
            named = found.groupdict()  # sizes and axes quoted from the error's text
            return row.mistake, row.hint.format(**named)
    return None
