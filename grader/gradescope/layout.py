"""Where a Gradescope autograder's files are: ``/autograder`` as Gradescope lays it out, or the
folder ``ATTENTION_GRADESCOPE_ROOT`` names (the tests lay out a fake one).

    source/       the zip's contents: the course and the grader (readable by root only)
    submission/   the student's files, put there by Gradescope
    results/      results.json, read by Gradescope
"""

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path("/autograder")
DEFAULT_STAGE = Path("/tmp/attention-course-gradescope")  # noqa: S108 (root-owned, see unprivileged)
DEFAULT_USER = "student"


@dataclass(frozen=True)
class Layout:
    root: Path
    stage: Path  # what the unprivileged user may read (the runner's files, the package) or write
    user: str  # the unprivileged user the student's process runs as

    @classmethod
    def from_environment(cls) -> "Layout":
        env = os.environ
        return cls(Path(env.get("ATTENTION_GRADESCOPE_ROOT", DEFAULT_ROOT)),
                   Path(env.get("ATTENTION_GRADESCOPE_STAGE", DEFAULT_STAGE)),
                   env.get("ATTENTION_GRADESCOPE_USER", DEFAULT_USER))

    @property
    def source(self) -> Path:
        return self.root / "source"

    @property
    def submission(self) -> Path:
        return self.root / "submission"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def results_file(self) -> Path:
        return self.results / "results.json"

    @property
    def secrets(self) -> tuple[Path, ...]:
        """What the student's process must not read: the course and its references, the
        hidden tests, the student's files as handed in, the results."""
        return (self.source, self.submission, self.results)
