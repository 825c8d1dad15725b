"""Answers as students write them, one module per lesson (lesson01 ... lesson08): each lesson's
correct answers, three styles or more per exercise, and its wrong answers written by hand,
gathered here for every lesson so that the tests of the checks (and benchmarks/checks.py) run
over all of them alike.

A lesson's module defines those of these tables it has answers for:

    CORRECT                    {exercise: [correct answers in different styles]}
    REFERENCES                 {exercise: what its check compares with; the student may not call it}
    PRINTED_NAME               {exercise: the name its check prints, where it is not the exercise}
    STUBS                      {exercise: the class the notebook gives, constructor written}
    CALLING_THE_REFERENCE      {exercise: a class whose forward calls the reference}
    BUILT_INS                  {exercise: {what the student called: an answer calling it}}
    SIGN_EXAMPLES              {(exercise, mistake): {what the student did: an answer}}, for the
                               catalogued mistakes recognised by a sign
    MISTAKES                   {answer: (exercise, [the catalogued mistakes its check names])}
    SLIPS                      [(exercise, slip, the mistake explain_error names from its error)]
    RAISED_AS_NOT_IMPLEMENTED  slips as above, whose error torch raises as NotImplementedError
    GRADIENT_SLIPS             slips as above, whose error is raised while the check computes
                               the gradients (a custom backward pass)

An answer written for one test stays beside that test, and so do the answers of
checks/test_coverage.py, each wrong on one kind of input as that module describes them.
"""

from helpers.answers import (
    lesson01,
    lesson02,
    lesson03,
    lesson04,
    lesson05,
    lesson06,
    lesson07,
    lesson08,
    lesson09,
    lesson10,
)

LESSONS = (lesson01, lesson02, lesson03, lesson04, lesson05, lesson06, lesson07, lesson08,
           lesson09, lesson10)


def gathered(name: str):
    """The lessons' tables called ``name``, one after another: dicts merged, lists joined."""
    tables = [getattr(module, name) for module in LESSONS if hasattr(module, name)]
    if isinstance(tables[0], dict):
        return {key: value for table in tables for key, value in table.items()}
    return [row for table in tables for row in table]


CORRECT = gathered("CORRECT")
REFERENCES = gathered("REFERENCES")
PRINTED_NAME = gathered("PRINTED_NAME")
STUBS = gathered("STUBS")
CALLING_THE_REFERENCE = gathered("CALLING_THE_REFERENCE")
BUILT_INS = gathered("BUILT_INS")
SIGN_EXAMPLES = gathered("SIGN_EXAMPLES")
MISTAKES = gathered("MISTAKES")
SLIPS = gathered("SLIPS")
RAISED_AS_NOT_IMPLEMENTED = gathered("RAISED_AS_NOT_IMPLEMENTED")
GRADIENT_SLIPS = gathered("GRADIENT_SLIPS")
