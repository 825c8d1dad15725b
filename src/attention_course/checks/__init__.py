"""Checks that tell a student which mistake they made.

Each ``check_<exercise>(fn)`` runs ``fn`` on seeded inputs with distinct sizes and edge cases,
compares it with the reference implementation, prints one ``ok:`` line when everything
matches, and otherwise raises ``AssertionError`` saying what was tested, what went wrong and,
when the output matches a catalogued mistake, its name and a hint. It never shows the solution.
The check cells of the notebooks and the graded tests call the same functions.
``check_prediction`` answers the lessons' "Predict first" questions; it grades nothing.

Each lesson's checks live in the module the registry names (``Lesson.checks_module``:
``lessonNN.py``), and their ``check_*`` functions are exported here. What runs in the
student's process while a submission is graded is ``student/``; the rest runs in the grader's.
"""

import importlib

from ..lessons import LESSONS
from ..restart import install as install_restart_hint
from .predictions import check_prediction

MODULES = tuple(importlib.import_module(lesson.checks_module) for lesson in LESSONS)
CHECKS = {name: function for module in MODULES for name, function in vars(module).items()
          if name.startswith("check_") and getattr(function, "__module__", None) == module.__name__}
globals().update(CHECKS)
# the graded checks in lesson order, then the "Predict first" answers (no points, not in CHECKS)
__all__ = [*CHECKS, "check_prediction"]
install_restart_hint()  # in a notebook, a NameError says to run the cells above
