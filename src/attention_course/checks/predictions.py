"""Answers to the lessons' "Predict first" questions.

A lesson asks for a guess before a demo shows the answer: the student sets ``prediction`` in a
small cell and ``check_prediction(question, prediction)`` prints whether it was right and why.
It is worth no points and is not a graded check (it is not in ``CHECKS``): whatever the answer,
it prints one line and never raises, so an unanswered question (``prediction = None``, as the
notebooks come) runs cleanly everywhere, the autograder included.

A question is data: a choice among a few words, or a number with a tolerance. Choices ignore
case, surrounding spaces, quotes and a final full stop; numbers may be given as an int, a float,
a 0-d tensor or a string such as "0.73".
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Question:
    """The expected answer of one question and why it is right.

    ``options`` are the words a choice question accepts (its answer is one of them); a question
    without options expects a number, right within ``tolerance`` of ``answer``. ``aliases`` maps
    other spellings to an option (e.g. "zero" to "zeros").
    """

    answer: str | float
    why: str  # one or two sentences
    options: tuple[str, ...] = ()
    tolerance: float = 0.0
    aliases: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if self.options and self.answer not in self.options:
            raise ValueError(f"answer {self.answer!r} is not one of the options {self.options}")
        if not self.options and isinstance(self.answer, str):
            raise ValueError("a question without options expects a number")


QUESTIONS = {
    "01-same-the": Question(
        "different", options=("same", "different"),
        why="The token part of both is the same row of the embedding matrix, but position 0 and "
            "position 4 add different rows of the positional encoding, so the sums differ: "
            "that is what adding positions is for."),
    "01-learned-rows": Question(
        6,
        why="The sentence has 6 tokens, so only rows 0 to 5 of the table take part in the "
            "forward pass; rows 6 and 7 get exactly zero gradient and never learn from it."),
    "02-best-key": Question(
        "sat", options=("the", "cat", "sat", "down"),
        why='The query of "cat" is 1 on the verb feature and 0.5 on the determiner feature: it '
            'scores 3.0 against "sat" and 1.5 against "the", so the verb wins.'),
    "02-shifted-softmax": Question(
        0.731, tolerance=0.01,
        why="Only differences between logits matter: softmax([1000, 1001]) = softmax([0, 1]), "
            "so the second entry gets e / (1 + e) = 0.731."),
    "02-temperature": Question(
        "sharper", options=("sharper", "flatter"),
        why="A small temperature is a large scale 1/τ: the gaps between scores grow, the best "
            "key takes almost all the weight and the softmax turns into the hard argmax lookup. "
            "A large temperature does the opposite and every row tends to uniform."),
    "03-empty-row": Question(
        "nan", options=("nan", "uniform", "zeros"), aliases={"zero": "zeros", "0": "zeros"},
        why="Every score in those rows is -inf, so the softmax computes 0 / 0 = NaN. A fill of "
            "-1e9 gives a uniform row instead; the zero row the course asks for takes a step "
            "of its own."),
    "03-last-word": Question(
        1,
        why="With the causal mask only the last query may look at the last key, so only the "
            "last output changes; without a mask every query reads every key and all 6 change."),
    "04-view-heads": Question(
        2,
        why="view reads memory in order, so head 0 gets the first T·D = 12 numbers of x: all "
            "6 channels of token 0, then of token 1. A correct split gives every head all 4 "
            "tokens."),
    "04-params": Question(
        "same", options=("more", "fewer", "same"), aliases={"the same": "same", "equal": "same"},
        why="Every projection is a (C, C) matrix whatever H is: more heads only means narrower "
            "heads (D = C / H), so the layer keeps 4C² + 4C parameters."),
    "05-no-positions": Question(
        "none", options=("none", "some", "all"),
        why="In this one-block model, without positions every source digit looks the same to "
            "attention wherever it stands, so the answer position n + k cannot ask for the digit "
            "at position k: it stays at 0%, while with either kind of positions it learns to "
            "copy. With two blocks the causal mask leaks position and it learns, slowly."),
    "05-learned-or-sinusoidal": Question(
        "learned", options=("learned", "sinusoidal"),
        why="The learned rows start as random vectors, nearly orthogonal, so every position is "
            "easy to tell from its neighbours; neighbouring sinusoidal rows are alike, and "
            "attention needs more steps to sharpen the difference between key k and key k ± 1."),
    "05-no-scale": Question(
        "slower", options=("slower", "same", "faster"),
        aliases={"about the same": "same", "the same": "same"},
        why="Without the factor the token rows start much shorter than the position rows, so "
            "the digits to copy are a whisper under the positions until training has grown "
            "them: over 8 seeds it was never faster, and on 7 it needed 10 to 30 more steps "
            "(or more than 300)."),
    "05-reverse-map": Question(
        "anti-diagonal", options=("diagonal", "anti-diagonal", "uniform"),
        why="Answer position n + k must write the digit at position n - 1 - k, so that is the "
            "key it reads: key + query = 2n - 1, a line at right angles to the copy stripe. "
            "Same block, same loss, other data: the data chose the circuit."),
    "06-shift": Question(
        "no", options=("yes", "no"),
        why="Rotating the query by t and the key by s changes their angle by t - s only, and "
            "shifting both positions by 100 leaves t - s as it was: the scores stay the same, "
            "up to rounding."),
    "06-longer": Question(
        "rotary", options=("none", "sinusoidal", "learned", "rotary"),
        aliases={"rope": "rotary", "no positions": "none"},
        why="Rotary scores depend on offsets only, and the offset of the echo was seen at "
            "every position in training; the learned rows past 16 were never trained, and the "
            "sinusoidal rows past 16 are patterns the model never learned to read."),
    "07-cache-speedup": Question(
        "grows", options=("shrinks", "stays", "grows"),
        aliases={"stays the same": "stays", "same": "stays", "grow": "grows",
                 "shrink": "shrinks"},
        why="Without a cache, step t runs all t tokens again, so writing N tokens costs about "
            "N²/2 token-steps; with a cache each step runs one token, N in all. The ratio grows "
            "like N/2, once the fixed cost of a step is small beside the work."),
    "07-gqa-cache": Question(
        4,
        why="The cache holds keys and values of the key/value heads only: 2 heads instead of "
            "8 is 4 times fewer numbers, whatever the length, the batch or the number of "
            "layers. The queries are never cached."),
    "07-tiled-memory": Question(
        2,
        why="Tiled attention holds a (T, block) slice of scores and a (T, Dv) running output: "
            "both grow like T, so doubling T doubles them. The naive version's (T, T) scores "
            "grow 4 times."),
    "08-causal-tiles": Question(
        36,
        why="Query block i sees key blocks 0 to i, so the 8 rows of tiles compute 1, 2, up to 8 "
            "tiles: 36 in all, the 8 on the diagonal partly hidden, and the 28 above it are "
            "skipped. Smaller blocks bring the share computed closer to one half."),
    "09-cache-ratio": Question(
        16, tolerance=0.5,
        why="Lesson 07's cache holds all 64 tokens; the rolling cache holds the 2 sinks and "
            "the last 2, 4 tokens, in every layer alike: 64 / 4 = 16, and the ratio keeps "
            "growing with the stream."),
    "09-sinks-far": Question(
        "lower", options=("higher", "same", "lower"),
        why="This model never learned to use its first tokens, and at their positions in the "
            "stream they sit hundreds of positions back, an offset it never saw in training: "
            "some queries give them weight, and answers are lost. At places within the cache "
            "they do no harm."),
    "10-lite-ratio": Question(
        7.11, tolerance=0.15,
        why="Multi-head attention caches a key and a value per head: 2 x 16 x 128 = 4096 numbers "
            "per token and layer. MLA caches the latent and the rotary key: 512 + 64 = 576. "
            "4096 / 576 = 7.1."),
    "10-faster-form": Question(
        "absorbed", options=("naive", "same", "absorbed"),
        why="The naive step rebuilds every head's keys and values from all S latents, about "
            "2 S d_c H D multiply-adds; the absorbed step scores and sums the latents directly, "
            "about 2 S d_c H: D = 64 times less arithmetic, and no per-head keys to write."),
    "10-rope-width": Question(
        "worse", options=("better", "same", "worse"),
        why="With d_R = 4 the positions ride on two rotary pairs: one turns a full circle "
            "every 6.3 tokens, the other barely moves over 32 tokens. Offsets 16, 22 and 28 "
            "(3 plus whole turns of the fast pair) then look almost like 3, and the last query "
            "gives them much of its weight. Over 8 seeds: about half right from 17 to 32 "
            "tokens, against nearly all with d_R = 8."),
}


def check_prediction(question: str, answer) -> None:
    """Print whether ``answer`` is the right prediction for ``question``, and why.

    Never raises on an answer: ``None`` says the question is not answered yet, a word that is
    not an option lists the options. An unknown ``question`` is a mistake in the notebook, not
    in the answer: KeyError naming the known questions.
    """
    print(_verdict(question, answer))


def _verdict(question: str, answer) -> str:
    if question not in QUESTIONS:
        raise KeyError(f"no question {question!r}; known: {', '.join(QUESTIONS)}")
    expected = QUESTIONS[question]
    wanted = _options(expected) if expected.options else "a number"
    if answer is None:
        return (f"not answered yet: set prediction to {wanted} in this cell, then run it "
                f"again.")
    if expected.options:
        given = _normalise(answer)
        given = expected.aliases.get(given, given)
        if given not in expected.options:
            return (f"{_shown(answer)} is not one of the options: set prediction to {wanted} "
                    f"and run the cell again.")
        right = given == expected.answer
        shown = f'"{given}"'
        answer_shown = f'"{expected.answer}"'
    else:
        number = _number(answer)
        if number is None:
            return f"{_shown(answer)} is not a number: set prediction to a number and run the " \
                   f"cell again."
        right = abs(number - expected.answer) <= expected.tolerance
        shown, answer_shown = f"{number:g}", f"{expected.answer:g}"
    if right and shown != answer_shown:  # a number within the tolerance
        return f"right: {shown} (the answer is {answer_shown}). {expected.why}"
    if right:
        return f"right: {shown}. {expected.why}"
    return f"not quite: you said {shown}, the answer is {answer_shown}. {expected.why}"


def _normalise(answer) -> str:
    try:
        text = " ".join(str(answer).split()).lower()
    except Exception:  # an object that cannot even be printed is simply not an option
        return ""
    return text.strip("\"'").rstrip(".!").strip()


def _number(answer) -> float | None:
    if isinstance(answer, bool):
        return None  # True is an int to Python, but not an answer to "how many?"
    try:
        number = float(answer.strip() if isinstance(answer, str) else answer)
    except Exception:  # not a number, or a tensor of several: never an error for the student
        return None
    return number if number == number else None  # NaN is no number to compare with


def _options(question: Question) -> str:
    quoted = [f'"{option}"' for option in question.options]
    return ", ".join(quoted[:-1]) + f" or {quoted[-1]}"


def _shown(answer) -> str:
    text = repr(answer) if not isinstance(answer, str) else f'"{answer}"'
    return text if len(text) <= 40 else text[:37] + "..."
