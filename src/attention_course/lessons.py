"""The course's lessons: the one registry that the checks, the grader, release, the tests, the
benchmarks and the demo read.

A lesson is its notebook (``solutions/<id>/<id>.ipynb``, released to ``notebooks/<id>/``), the
reference modules it teaches, its checks module (``checks/lessonNN.py``, found by its number)
and an entry here. Adding a lesson means adding those files and one ``Lesson`` below.
"""

from dataclasses import dataclass

# Modules every lesson may import whole: the CPU/GPU choice, the plots and the checks.
UTILITIES = ("device", "viz", "checks")


@dataclass(frozen=True)
class Practice:
    """A graded part of a lesson: what the student writes and the check that grades it.

    ``name`` is the grade_id of the practice cell (the function or class the student writes);
    ``reference`` is where the package has the same thing (``module.name``), which the lesson's
    notebook never imports. A practice with ``written=False`` has no practice cell of its own:
    its check grades what the lesson's earlier cells built (lesson 05's trained model).
    ``difficulty`` (1 to 3) and ``minutes`` (about how long it takes) are shown above the
    practice cell, in the ``header`` line; 0 means not rated yet.
    """

    name: str
    reference: str | None = None
    written: bool = True
    difficulty: int = 0  # 1: one idea in a few lines, 2: two ideas or a shape trap, 3: several
    minutes: int = 0

    @property
    def check(self) -> str:
        return f"check_{self.name}"

    @property
    def header(self) -> str:
        """The first line of the markdown cell above the practice cell, e.g.
        ``**Exercise · softmax** · difficulty ●○○ · about 10 minutes``."""
        dots = "●" * self.difficulty + "○" * (3 - self.difficulty)
        return f"**Exercise · {self.name}** · difficulty {dots} · about {self.minutes} minutes"


@dataclass(frozen=True)
class Lesson:
    """One lesson: its folder name, title, the modules it teaches and what it grades.

    ``may_import`` lists what the notebook may import from the package besides ``UTILITIES``:
    a module (``"attention"``) or one name of a module (``"training.History"``), taken from
    earlier lessons' references or from this lesson's given code, never a practice reference.
    """

    id: str
    title: str
    teaches: tuple[str, ...]
    practice: tuple[Practice, ...]
    may_import: tuple[str, ...] = ()
    builds: str = ""  # what the student builds, in words (the README's lesson table)
    gpu: bool = False  # Colab opens it on a GPU runtime: it runs at sizes where a GPU helps

    @property
    def number(self) -> int:
        return int(self.id[:2])

    @property
    def checks_module(self) -> str:
        return f"attention_course.checks.lesson{self.id[:2]}"


LESSONS = (
    Lesson(
        "01_embeddings", "embeddings", teaches=("embeddings",),
        builds="one-hot lookup = embedding, sinusoidal positional encoding, the matrix that "
               "moves it by an offset, the whole token + position embedding layer (fixed, "
               "learned or no positions, from an offset)",
        practice=(Practice("one_hot_embedding", "embeddings.one_hot_embedding",
                           difficulty=1, minutes=5),
                  Practice("sinusoidal_positional_encoding",
                           "embeddings.sinusoidal_positional_encoding", difficulty=2, minutes=15),
                  Practice("offset_matrix", "embeddings.offset_matrix", difficulty=2,
                           minutes=15),
                  Practice("embedding_layer", "embeddings.TokenAndPositionEmbedding",
                           difficulty=2, minutes=20))),
    Lesson(
        "02_scaled_dot_product", "scaled dot-product attention", teaches=("attention",),
        builds="stable softmax, `softmax(QK^T / sqrt(D)) V` from the scaled scores to the "
               "weighted sum of the values",
        practice=(Practice("softmax", "attention.softmax", difficulty=1, minutes=10),
                  Practice("scaled_dot_product_attention",
                           "attention.scaled_dot_product_attention", difficulty=2,
                           minutes=15))),
    Lesson(
        "03_masking", "masking", teaches=("masks",),
        builds="causal and padding masks, applying a mask, masked attention, attention over a "
               "padded batch of sequences of different lengths, mask conventions",
        practice=(Practice("causal_mask", "masks.causal_mask", difficulty=1, minutes=10),
                  Practice("padding_mask", "masks.padding_mask", difficulty=2, minutes=10),
                  Practice("apply_mask", "masks.apply_mask", difficulty=2, minutes=10),
                  Practice("masked_attention", "attention.scaled_dot_product_attention",
                           difficulty=3, minutes=20),
                  Practice("packed_attention", "attention.packed_attention",
                           difficulty=3, minutes=20),
                  Practice("to_mha_mask", "masks.to_mha_mask", difficulty=1, minutes=5)),
        may_import=("attention.attention_scores", "attention.softmax")),
    Lesson(
        "04_multi_head", "multi-head attention", teaches=("multihead",),
        builds="splitting and merging heads, the whole `MultiHeadAttention` module "
               "(constructor, dropout, forward), parity with `nn.MultiheadAttention`",
        practice=(Practice("split_heads", "multihead.split_heads", difficulty=2, minutes=10),
                  Practice("merge_heads", "multihead.merge_heads", difficulty=1, minutes=5),
                  Practice("multi_head_attention", "multihead.MultiHeadAttention",
                           difficulty=3, minutes=25)),
        may_import=("attention", "masks")),
    Lesson(
        "05_copy_task", "the transformer block, trained to copy",
        teaches=("model", "data", "training"),
        builds="MLP, classic and gated (SwiGLU), pre-norm decoder block with its causal "
               "self-attention, the whole model around the blocks (embedding, blocks, final "
               "norm, head); the loss with the causal shift and the answer mask, the training "
               "step; a model of your block trained to copy, ablations of positions and the "
               "embedding scale; RMSNorm for a modern block",
        practice=(Practice("mlp", "model.MLP", difficulty=2, minutes=15),
                  Practice("decoder_block", "model.DecoderBlock", difficulty=2, minutes=15),
                  Practice("decoder_only_transformer", "model.DecoderOnlyTransformer",
                           difficulty=2, minutes=20),
                  Practice("copy_task_loss", "training.copy_task_loss", difficulty=2, minutes=10),
                  Practice("train_step", "training.train_step", difficulty=2, minutes=10),
                  Practice("copy_accuracy", written=False),
                  Practice("rms_norm", "model.RMSNorm", difficulty=2, minutes=10)),
        may_import=("embeddings", "attention", "masks", "multihead", "data",
                    "training.train", "training.TrainConfig", "training.AdamW",
                    "training.History", "training.greedy_decode", "training.sequence_accuracy")),
    Lesson(
        "06_rotary_positions", "rotary position embeddings", teaches=("rope", "lengths"),
        builds="rotating the half-split pairs of queries and keys by the angles of given "
               "positions, rotary multi-head attention that places its queries and keys at "
               "given positions; models with no, sinusoidal, learned and rotary positions "
               "tested on sequences twice as long as in training",
        practice=(Practice("rotate_pairs", "rope.rotate_pairs", difficulty=2, minutes=25),
                  Practice("rotary_multi_head_attention", "rope.RotaryMultiHeadAttention",
                           difficulty=2, minutes=15)),
        may_import=("attention", "masks", "embeddings", "multihead", "lengths",
                    "training.AdamW")),
    Lesson(
        "07_inference_and_scale", "attention at inference and at scale",
        teaches=("inference", "tiled"),
        builds="a key/value cache whose decoding equals uncached decoding token for token, "
               "with rotary positions too (keys rotated once, before the cache), "
               "a grouped-query attention layer (each key/value head shared by a group of "
               "query heads) and the cache it saves, tiled attention with "
               "an online softmax and each query's logsumexp, two partial attentions merged by "
               "their logsumexps; the speed-up and the memory each one buys, measured",
        practice=(Practice("cached_attention", "inference.cached_attention",
                           difficulty=2, minutes=15),
                  Practice("cached_rotary_attention", "inference.CachedRotaryAttention",
                           difficulty=2, minutes=15),
                  Practice("grouped_query_attention_layer", "inference.GroupedQueryAttention",
                           difficulty=2, minutes=20),
                  Practice("tiled_attention", "tiled.tiled_attention", difficulty=3, minutes=25),
                  Practice("merge_attention", "tiled.merge_attention", difficulty=2, minutes=15)),
        may_import=("attention", "masks", "multihead", "rope", "inference.TinyDecoder",
                    "inference.generate", "inference.cache_bytes", "tiled.peak_memory")),
    Lesson(
        "08_flash_backward", "training with tiled attention: FlashAttention's backward pass",
        teaches=("flash",),
        builds="the gradients of attention by hand (dV, dP, D, dS, dQ, dK), the tiled backward "
               "pass that recomputes the weights from the logsumexps and skips the blocks a "
               "causal mask hides, a `torch.autograd.Function` saving Q, K, V, O and the "
               "logsumexps only; its memory and time in training against autograd and PyTorch, "
               "measured",
        practice=(Practice("attention_backward", "flash.attention_backward",
                           difficulty=2, minutes=20),
                  Practice("flash_backward", "flash.flash_backward", difficulty=3, minutes=30),
                  Practice("flash_attention", "flash.flash_attention", difficulty=3,
                           minutes=25)),
        may_import=("attention", "masks", "tiled.tiled_attention", "tiled.peak_memory")),
    Lesson(
        "09_sliding_windows", "attention over long streams: sliding windows and attention sinks",
        teaches=("streaming",),
        builds="a sliding-window causal mask with attention sinks (bottom-right aligned), a "
               "rolling key/value cache of fixed size that keeps the sinks and whose decoding "
               "equals attention under that mask token for token, rotary positions in it two "
               "ways (keys rotated once at their positions in the stream; StreamingLLM's "
               "places within the cache), attention with a learned sink logit per head; cache "
               "bytes against lesson 07's cache, and a model decoded 16 times past its training "
               "length with full attention, a window, and sinks",
        practice=(Practice("sliding_window_mask", "streaming.sliding_window_mask",
                           difficulty=1, minutes=10),
                  Practice("rolling_cache_attention", "streaming.rolling_cache_attention",
                           difficulty=2, minutes=20),
                  Practice("rolling_rotary_attention", "streaming.rolling_rotary_attention",
                           difficulty=2, minutes=15),
                  Practice("streaming_llm_attention", "streaming.streaming_llm_attention",
                           difficulty=2, minutes=15),
                  Practice("sink_attention", "streaming.sink_attention", difficulty=2,
                           minutes=15)),
        may_import=("attention", "masks", "multihead", "rope", "inference", "lengths",
                    "embeddings", "training.AdamW")),
    Lesson(
        "10_latent_attention", "multi-head latent attention: a cache made small by compression",
        teaches=("latent",),
        builds="attention from a latent key/value cache, naive (keys and values up-projected) "
               "and absorbed (the key up-projection folded into the query, the value "
               "up-projection after the weighted sum), equal in float64; DeepSeek-V2's layer "
               "with its decoupled rotary key, decoding with a cache of d_c + d_R numbers per "
               "token; cache bytes of MHA, GQA, MQA and MLA from a configuration and measured; "
               "decoding time of both forms and a small MLA model trained against MHA and GQA",
        practice=(Practice("naive_latent_attention", "latent.naive_latent_attention",
                           difficulty=2, minutes=15),
                  Practice("absorbed_latent_attention", "latent.absorbed_latent_attention",
                           difficulty=2, minutes=20),
                  Practice("latent_attention", "latent.LatentAttention", difficulty=3,
                           minutes=30),
                  Practice("cache_bytes_per_token", "latent.cache_bytes_per_token",
                           difficulty=1, minutes=10)),
        may_import=("attention", "masks", "embeddings", "multihead", "rope", "inference",
                    "lengths", "training.AdamW", "latent.SelfAttention",
                    "latent.RotaryGroupedQueryAttention")),
)


def lesson(lesson_id: str) -> Lesson:
    """The registry entry of ``lesson_id``; KeyError naming the known lessons if none."""
    for entry in LESSONS:
        if entry.id == lesson_id:
            return entry
    raise KeyError(f"unknown lesson {lesson_id!r}; known: {', '.join(ids())}")


def ids() -> list[str]:
    return [entry.id for entry in LESSONS]


def lesson_of_module(module: str) -> Lesson | None:
    """The lesson that teaches ``module`` (e.g. "masks"), or None for a utility."""
    return next((entry for entry in LESSONS if module in entry.teaches), None)
