"""Checks that tell a student which mistake they made.

Each ``check_<exercise>(fn)`` runs ``fn`` on seeded inputs with distinct sizes and edge cases,
compares it with the reference implementation, prints one ``ok:`` line when everything
matches, and otherwise raises ``AssertionError`` saying what was tested, what went wrong and,
when the output matches a catalogued mistake, its name and a hint. It never shows the solution.
The check cells of the notebooks and the graded tests call the same functions.
"""

from .lesson01 import (
                       check_one_hot_embedding,
                       check_sinusoidal_positional_encoding,
                       check_token_and_position_embedding,
)
from .lesson02 import check_attention_scores, check_scaled_dot_product_attention, check_softmax
from .lesson03 import (
                       check_apply_mask,
                       check_causal_mask,
                       check_masked_attention,
                       check_padding_mask,
                       check_to_mha_mask,
)
from .lesson04 import check_merge_heads, check_multi_head_attention, check_split_heads
from .lesson05 import (
    check_copy_task_loss,
    check_greedy_decode,
    check_sequence_accuracy,
    check_train_step,
)

__all__ = [
    "check_one_hot_embedding", "check_sinusoidal_positional_encoding",
    "check_token_and_position_embedding",
    "check_softmax", "check_attention_scores", "check_scaled_dot_product_attention",
    "check_causal_mask", "check_padding_mask", "check_apply_mask", "check_masked_attention",
    "check_to_mha_mask",
    "check_split_heads", "check_merge_heads", "check_multi_head_attention",
    "check_copy_task_loss", "check_train_step", "check_greedy_decode", "check_sequence_accuracy",
]
