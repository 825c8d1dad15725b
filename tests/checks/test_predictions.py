"""The "Predict first" questions: check_prediction says right or wrong and why, never raises on
an answer, grades nothing, and every prediction cell of the lessons asks a question it knows."""

import contextlib
import io
import re

import pytest
import torch

from attention_course import checks
from attention_course.checks import check_prediction
from attention_course.checks.predictions import QUESTIONS, Question
from attention_course.lessons import ids
from helpers.notebooks import LESSONS_WITH_STAGED_HINTS, NOTEBOOKS, SOLUTIONS, grading, read

CELL = re.compile(r'from attention_course\.checks import check_prediction\n\n'
                  r'prediction = None  # your answer: (?P<wanted>.+)\n'
                  r'check_prediction\("(?P<question>[\w-]+)", prediction\)')


def said(question, answer) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert check_prediction(question, answer) is None
    text = out.getvalue()
    assert text.count("\n") == 1, "one line"
    return text


def test_a_right_answer_says_so_and_why():
    text = said("02-temperature", "sharper")
    assert text.startswith('right: "sharper". ') and "argmax" in text


@pytest.mark.parametrize("answer", ["Sharper", "  SHARPER ", '"sharper."', "sharper!"])
def test_choices_ignore_case_spaces_quotes_and_a_full_stop(answer):
    assert said("02-temperature", answer).startswith("right: ")


def test_a_wrong_answer_gives_the_right_one_and_why():
    text = said("02-temperature", "flatter")
    assert text.startswith('not quite: you said "flatter", the answer is "sharper". ')


def test_an_alias_counts_as_its_option():
    assert said("04-params", "The same").startswith('right: "same"')
    assert said("03-empty-row", "zero").startswith('not quite: you said "zeros"')


def test_none_means_not_answered_yet_and_lists_the_options():
    assert said("02-temperature", None) == ('not answered yet: set prediction to "sharper" or '
                                            '"flatter" in this cell, then run it again.\n')
    assert "set prediction to a number" in said("03-last-word", None)


@pytest.mark.parametrize("answer", ["blurry", 3, True, ["sharper"], object()])
def test_an_answer_that_is_no_option_lists_the_options(answer):
    text = said("02-temperature", answer)
    assert "is not one of the options" in text and '"sharper" or "flatter"' in text


@pytest.mark.parametrize("answer", [0.731, 0.73, 0.74, "0.73", " 0.725 ", torch.tensor(0.731)])
def test_numbers_are_right_within_the_tolerance_however_they_are_given(answer):
    assert said("02-shifted-softmax", answer).startswith("right: ")


def test_a_number_within_the_tolerance_also_shows_the_answer():
    assert said("02-shifted-softmax", 0.73).startswith("right: 0.73 (the answer is 0.731). ")
    assert said("03-last-word", 1.0).startswith("right: 1. ")


def test_a_wrong_number_gives_the_right_one():
    assert said("02-shifted-softmax", 0.5).startswith(
        "not quite: you said 0.5, the answer is 0.731. ")
    assert said("03-last-word", "6").startswith("not quite: you said 6, the answer is 1. ")


@pytest.mark.parametrize("answer", ["six", "e / (1 + e)", True, float("nan"),
                                    torch.tensor([1.0, 2.0]), [1]])
def test_something_that_is_no_number_is_said_so(answer):
    assert "is not a number: set prediction to a number" in said("03-last-word", answer)


def test_an_unknown_question_is_a_mistake_in_the_notebook():
    with pytest.raises(KeyError, match="known: 01-"):
        check_prediction("02-no-such-question", "sharper")


def test_a_question_is_a_choice_with_its_answer_among_the_options_or_a_number():
    with pytest.raises(ValueError, match="not one of the options"):
        Question("maybe", why="", options=("yes", "no"))
    with pytest.raises(ValueError, match="expects a number"):
        Question("six", why="")
    for question in QUESTIONS.values():
        assert question.why.strip() and question.why.count(". ") <= 2  # one or two sentences
        assert all(alias not in question.options and target in question.options
                   for alias, target in question.aliases.items())


def test_it_grades_nothing():
    assert "check_prediction" in checks.__all__
    assert "check_prediction" not in checks.CHECKS
    assert checks.check_prediction is check_prediction


def prediction_cells(folder, lesson_id):
    """(index, question) of every cell of a lesson that calls check_prediction."""
    cells = read(folder, lesson_id).cells
    return cells, [(i, CELL.fullmatch(cell.source)) for i, cell in enumerate(cells)
                   if "check_prediction" in cell.source]


@pytest.mark.parametrize("folder", [SOLUTIONS, NOTEBOOKS], ids=lambda folder: folder.name)
@pytest.mark.parametrize("lesson_id", ids())
def test_every_prediction_cell_asks_a_known_question_in_the_course_format(folder, lesson_id):
    cells, found = prediction_cells(folder, lesson_id)
    for i, match in found:
        assert match, f"{lesson_id}, cell {i}: not in the prediction cell format"
        question = QUESTIONS[match["question"]]
        assert match["question"].startswith(f"{lesson_id[:2]}-")
        assert cells[i].get("id") == f"predict-{match['question']}"
        assert not grading(cells[i]), "a prediction cell is not an nbgrader cell"
        wanted = ([f'"{option}"' for option in question.options] if question.options
                  else ["a number"])
        assert re.findall(r'"[^"]*"|a number', match["wanted"]) == wanted
        prompt = cells[i - 1]
        assert prompt.cell_type == "markdown" and "**Predict first:**" in prompt.source
        namespace = {}
        assert said_by(cells[i].source, namespace).startswith("not answered yet: ")


def said_by(source, namespace) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(source, namespace)
    return out.getvalue()


def test_every_question_is_asked_once_and_every_covered_lesson_asks_one():
    asked = [match["question"] for lesson_id in ids()
             for _, match in prediction_cells(SOLUTIONS, lesson_id)[1] if match]
    assert sorted(asked) == sorted(QUESTIONS)
    for lesson_id in LESSONS_WITH_STAGED_HINTS:
        assert any(question.startswith(f"{lesson_id[:2]}-") for question in asked), lesson_id
