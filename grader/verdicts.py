"""Points, decided in a process that never runs student code.

The runner leaves, per submission, what the student's objects did on each check's seeded
inputs: JSON metadata and plain arrays (loaded with ``allow_pickle=False``). Here the same
checks the students run are replayed on those observations (``recording.replaying``): the same
comparisons, the same named-mistake diagnosis and the same shortcut rule, but against a
reference computed here. What happened inside the student's kernel (a patched
``torch.allclose``, a check cell that printed "ok") decides nothing.
"""

import io
import json
import zipfile

import numpy as np
import torch

from attention_course import checks
from attention_course.checks.framework import CheckFailed
from attention_course.checks.recording import from_arrays, replaying
from attention_course.data import CopyTask, seeded_generator
from attention_course.model import DecoderOnlyTransformer
from attention_course.multihead import MultiHeadAttention

from .course import GradedCell, Lesson

# Replaying never calls the student's object; a check that builds it first gets a stand-in.
STAND_INS = {"check_multi_head_attention": MultiHeadAttention}
COPY_TASK, COPY_SEEDS, COPY_SEQUENCES, COPY_TARGET = CopyTask(10, 10), (2024, 4242), 1000, 0.99
MODEL_LIMITS = {"vocab_size": 64, "max_len": 64, "d_model": 512, "n_heads": 16, "n_layers": 8,
                "d_ff": 2048}
MAX_RECORD_BYTES = 64 * 2**20


class Unreadable(Exception):
    """The runner's record is missing or malformed."""


def read_record(files: dict[str, bytes]) -> tuple[dict, list]:
    """The runner's metadata and observations, checked for size and shape."""
    meta, arrays = files.get("observations.json"), files.get("observations.npz")
    if meta is None or arrays is None:
        raise Unreadable("the kernel ended without leaving its observations")
    if len(meta) + len(arrays) > MAX_RECORD_BYTES:
        raise Unreadable("the observations are implausibly large")
    try:
        data = json.loads(meta)
        with np.load(io.BytesIO(arrays), allow_pickle=False) as loaded:
            observations = from_arrays(data["observations"], loaded)
        entries = list(data["entries"])
    except (ValueError, KeyError, TypeError, OSError, zipfile.BadZipFile) as err:
        raise Unreadable(f"the observations are malformed ({type(err).__name__})") from None
    return data, [(entry, observations[entry["first"]:entry["first"] + entry["count"]])
                  for entry in entries]


def judge_lesson(lesson: Lesson, recorded: list) -> list[dict]:
    """One result per graded cell of ``lesson``, from the runner's record."""
    return [judge_cell(cell, [(e, o) for e, o in recorded if e.get("grade_id") == cell.grade_id])
            for cell in lesson.cells]


def judge_cell(cell: GradedCell, recorded: list) -> dict:
    try:
        if cell.calls:
            for call in cell.calls:
                _judge_call(call, recorded)
            message = f"ok: {cell.grade_id.removeprefix('check_')} passed"
        else:
            message = _judge_copy_accuracy(recorded)
    except CheckFailed as failure:
        return exercise_result(cell, False, str(failure), failure.mistake)
    except AssertionError as failure:
        return exercise_result(cell, False, str(failure))
    return exercise_result(cell, True, message)


def exercise_result(cell: GradedCell, passed: bool, message: str, mistake: str | None = None):
    return {"grade_id": cell.grade_id, "points": cell.points if passed else 0.0,
            "max_points": cell.points, "passed": passed, "message": message, "mistake": mistake}


def _judge_call(call, recorded: list) -> None:
    found = [(e, o) for e, o in recorded if (e.get("check"), e.get("target"), e.get("seed"))
             == (call.check, call.target, call.seed)]
    if not found:
        raise AssertionError(f"{call.target}: the grader could not observe it (the kernel "
                             f"never reached this check)")
    entry, observations = found[0]
    if entry.get("error"):
        raise AssertionError(f"{call.target}: {entry['error']}")
    try:
        with replaying(observations):
            getattr(checks, call.check)(STAND_INS.get(call.check), seed=call.seed)
    except AssertionError:
        raise
    except Exception as err:  # recorded values the checks cannot even compare
        raise AssertionError(f"{call.target}: its results could not be judged "
                             f"({type(err).__name__}: {err})") from None


def _judge_copy_accuracy(recorded: list) -> str:
    if not recorded:
        raise AssertionError("the trained model could not be observed (the kernel never "
                             "reached the held-out test)")
    entry, observations = recorded[0]
    if entry.get("error"):
        raise AssertionError(f"held-out test: {entry['error']}")
    outputs = observations[0][0].outputs
    decoded, parameters = outputs[:2], outputs[2:]
    model = _rebuild_model(entry.get("config"), entry.get("parameters"), parameters)
    for seed, tokens in zip(COPY_SEEDS, decoded, strict=True):
        test = COPY_TASK.batch(COPY_SEQUENCES, seeded_generator(seed))
        answer = COPY_TASK.answer(test.source)
        if not isinstance(tokens, torch.Tensor) or tokens.shape != answer.shape:
            raise AssertionError(f"greedy_decode returned {_shape(tokens)} for the held-out "
                                 f"prompts, expected {tuple(answer.shape)}")
        accuracy = (tokens == answer).all(dim=-1).double().mean().item()
        if accuracy < COPY_TARGET:
            raise AssertionError(f"the model copies {accuracy:.1%} of {COPY_SEQUENCES} held-out "
                                 f"sequences (seed {seed}) exactly; it needs 99%")
        with torch.no_grad():  # the same measure without the student's functions
            right = (model(test.inputs).argmax(dim=-1) == test.targets) | ~test.loss_mask
        teacher_forced = right.all(dim=-1).double().mean().item()
        if teacher_forced < COPY_TARGET:
            raise AssertionError(f"teacher-forced sequence accuracy {teacher_forced:.1%} "
                                 f"(seed {seed}), below 99%")
    return "ok: the trained model copies at least 99% of held-out sequences"


def _rebuild_model(config, names, parameters) -> DecoderOnlyTransformer:
    """Lesson 05's model class with the student's weights, built from checked numbers."""
    try:
        sizes = {key: int(config[key]) for key in MODEL_LIMITS}
        if any(not 0 < sizes[key] <= limit for key, limit in MODEL_LIMITS.items()):
            raise ValueError("sizes out of range")
        model = DecoderOnlyTransformer(**sizes,
                                       learned_positions=bool(config["learned_positions"]))
        model.load_state_dict(dict(zip(names, parameters, strict=True)), strict=True)
    except Exception as err:
        raise AssertionError(f"the trained model could not be rebuilt from its weights "
                             f"({type(err).__name__}: {str(err)[:300]})") from None
    return model.eval()


def _shape(value) -> str:
    return f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else "no tensor"
