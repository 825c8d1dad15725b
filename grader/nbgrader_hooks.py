"""The formgrader's Autograde button, through the course's sandboxed grader.

nbgrader's formgrader autogrades one submission with its ``Autograde`` converter, which would
run the student's notebook in a kernel with the instructor's rights. grader/nbgrader_config.py
gives the converters the formgrader makes (``c.NbGraderAPI.Autograde``: those of the
`nbgrader autograde` command are not touched) no preprocessor of nbgrader's at all, and this one
instead: it grades the submission with ``python -m grader grade --lesson L --student S
--again`` (the sandbox, the limits and the gradebook writes of `make grade`), and hands back the
autograded notebook that wrote. When grading cannot run (no sandbox, say), the button reports
the grader's message and nothing of the student's is run.
"""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool, Float, Unicode

ROOT = Path(__file__).resolve().parents[1]


class SandboxedAutograde(Preprocessor):
    """Grades the submission being converted with the course's grader, in its sandbox."""

    enabled = Bool(True, help="nbconvert runs only enabled preprocessors").tag(config=True)
    workspace = Unicode("", help="the course workspace (submitted/, results/, the gradebook)"
                        ).tag(config=True)
    timeout = Float(1800.0, help="seconds the grading may take").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        student, lesson = info["student"], info["assignment"]
        command = [sys.executable, "-m", "grader", "--workspace", self.workspace, "grade",
                   "--lesson", lesson, "--student", student, "--again", "--workers", "1"]
        env = os.environ | {"ATTENTION_COURSE_WORKSPACE": self.workspace,
                            "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                    f"{os.environ.get('PATH', '')}"}
        self.log.info("Grading %s's %s in the course's sandbox", student, lesson)
        try:
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the course's grader took more than {self.timeout:g} s") from None
        if done.stdout.strip():
            self.log.info("%s", done.stdout.strip())
        if done.returncode != 0:
            raise RuntimeError(f"the course's grader could not grade {student}'s {lesson}:\n"
                               f"{done.stderr.strip() or done.stdout.strip()}")
        graded = Path(self.workspace) / "autograded" / student / lesson / f"{lesson}.ipynb"
        return nbformat.read(graded, as_version=4), resources
