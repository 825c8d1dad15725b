"""nbgrader configuration for the course.

Source notebooks (with solutions and hidden tests) live in solutions/<lesson>/, the student
versions nbgrader generates from them in notebooks/<lesson>/. Everything that belongs to one run
of the course (submissions, autograded notebooks, feedback, the gradebook) lives in a workspace
directory, course/ by default, or wherever ATTENTION_COURSE_WORKSPACE points.
"""

import os
from pathlib import Path

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
WORKSPACE = Path(os.environ.get("ATTENTION_COURSE_WORKSPACE", REPOSITORY_ROOT / "course"))

c.CourseDirectory.course_id = "attention-step-by-step"
c.CourseDirectory.root = str(REPOSITORY_ROOT)
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = str(WORKSPACE / "submitted")
c.CourseDirectory.autograded_directory = str(WORKSPACE / "autograded")
c.CourseDirectory.feedback_directory = str(WORKSPACE / "feedback")
c.CourseDirectory.db_url = os.environ.get("ATTENTION_COURSE_GRADEBOOK",
                                          f"sqlite:///{WORKSPACE / 'gradebook.db'}")

# The student version keeps the signature, docstring and hints; the body becomes this stub.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# `make collect ZIP=...`: nbgrader zip_collect reads an LMS download whose files are named
# <student>_<lesson>.ipynb (e.g. s07_02_scaled_dot_product.ipynb), inside any folders.
# (nbgrader joins this to the course root, so it must be relative to it)
c.ZipCollectApp.downloaded_directory = os.path.relpath(WORKSPACE / "downloaded", REPOSITORY_ROOT)
c.FileNameCollectorPlugin.named_regexp = r".*/(?P<student_id>[A-Za-z0-9.@-]+)_(?P<file_id>[^/]+)$"
c.FileNameCollectorPlugin.valid_ext = [".ipynb"]
