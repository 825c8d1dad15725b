"""nbgrader configuration for the course.

Source notebooks (with solutions and hidden tests) live in solutions/<lesson>/, the student
versions nbgrader generates from them in notebooks/<lesson>/. Everything that belongs to one run
of the course (submissions, autograded notebooks, feedback, the gradebook) lives in a workspace
directory, course/ by default, or wherever ATTENTION_COURSE_WORKSPACE points.

The exchange (where `nbgrader release_assignment`, `submit`, `collect`, `release_feedback` and
`fetch_feedback` meet on a JupyterHub) is /srv/nbgrader/exchange, nbgrader's default, or
wherever ATTENTION_COURSE_EXCHANGE points; students need the same course id and exchange in
their own nbgrader_config.py (see docs/instructors/jupyterhub.md).

The formgrader's Autograde button grades through the course's sandboxed grader
(grader/nbgrader_hooks.py); `nbgrader autograde` on the command line stays nbgrader's own, which
runs student code with your rights: grade with `make grade`. The formgrader shows a submission
with nothing of the student's active in the page (grader/records/inert.py).
"""

import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
WORKSPACE = Path(os.environ.get("ATTENTION_COURSE_WORKSPACE", REPOSITORY_ROOT / "course"))
if str(REPOSITORY_ROOT) not in sys.path:  # the grader package, for the formgrader's hooks
    sys.path.append(str(REPOSITORY_ROOT))

c.CourseDirectory.course_id = "attention-step-by-step"
c.CourseDirectory.root = str(REPOSITORY_ROOT)
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = str(WORKSPACE / "submitted")
c.CourseDirectory.autograded_directory = str(WORKSPACE / "autograded")
c.CourseDirectory.feedback_directory = str(WORKSPACE / "feedback")
c.CourseDirectory.db_url = os.environ.get("ATTENTION_COURSE_GRADEBOOK",
                                          f"sqlite:///{WORKSPACE / 'gradebook.db'}")

# The exchange, for a course on JupyterHub (created by `make formgrader`).
c.Exchange.root = os.environ.get("ATTENTION_COURSE_EXCHANGE", "/srv/nbgrader/exchange")

# The formgrader's Autograde button: the course's sandboxed grader, never a kernel of nbgrader's.
# (Nested under NbGraderAPI, the formgrader's: `nbgrader autograde` itself is unchanged.)
c.NbGraderAPI.Autograde.sanitize_preprocessors = []
c.NbGraderAPI.Autograde.autograde_preprocessors = ["grader.nbgrader_hooks.SandboxedAutograde"]
c.SandboxedAutograde.workspace = str(WORKSPACE)

# What the formgrader shows of a submission, in the instructor's Jupyter session: each cell made
# inert (grader/records/inert.py) before nbgrader's formgrade template renders it, whoever wrote
# the notebook (the grader's autograded notebooks are inert already; nbgrader's own autograde, or
# an older grader, keeps the student's markdown, raw cells and grade ids as written), and
# nbconvert's sanitizer on outputs (the template applies it to outputs, never to markdown).
c.HTMLExporter.preprocessors = ["grader.records.inert.InertNotebook"]
c.HTMLExporter.sanitize_html = True

# The student version keeps the signature, docstring and hints; the body becomes this stub.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
