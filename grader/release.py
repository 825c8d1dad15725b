"""Generate the student notebooks in notebooks/ from the solution notebooks in solutions/.

For every lesson this runs `nbgrader generate_assignment` (which strips the solutions and hidden
tests), then stamps the released notebook's "Open in Colab" badge and Colab setup cell with the
repository configured under [tool.attention-course] in pyproject.toml. Before anything is
generated, every lesson's graded cells are read as the grader reads them: a cell it could not
grade stops the release.

Usage: python -m grader.release [--out DIR] [--db URL] [LESSON ...]
"""

import argparse
import os
import sys
import tempfile
import tomllib
from pathlib import Path

import nbformat

from attention_course import lessons

from .course import ROOT, GradedCellError, graded_cells, lesson_names
from .records import alembic_head

CONFIG = ROOT / "grader" / "nbgrader_config.py"
PLACEHOLDERS = ("{{COLAB_URL}}", "{{REPOSITORY}}", "{{BRANCH}}")


def course_settings() -> dict[str, str]:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["attention-course"]
    return {"repository": settings["repository"].rstrip("/"), "branch": settings["branch"]}


def colab_url(lesson: str, settings: dict[str, str]) -> str:
    """The Colab address that opens notebooks/<lesson>/<lesson>.ipynb from the repository."""
    owner_and_name = settings["repository"].removeprefix("https://github.com/")
    return (f"https://colab.research.google.com/github/{owner_and_name}/blob/"
            f"{settings['branch']}/notebooks/{lesson}/{lesson}.ipynb")


def stamp(text: str, lesson: str, settings: dict[str, str]) -> str:
    """Fill the badge and setup-cell placeholders of one notebook's JSON text, and ask Colab
    for a GPU runtime only where the registry says the lesson benefits from one."""
    values = (colab_url(lesson, settings), settings["repository"], settings["branch"])
    for placeholder, value in zip(PLACEHOLDERS, values, strict=True):
        text = text.replace(placeholder, value)
    notebook = nbformat.reads(text, as_version=4)
    notebook.metadata.pop("accelerator", None)
    if lessons.lesson(lesson).gpu:
        notebook.metadata["accelerator"] = "GPU"
    return nbformat.writes(notebook) + "\n"


def generate(selected: list[str], out: Path, db_url: str | None) -> None:
    """`nbgrader generate_assignment` for each selected lesson, with the course's
    nbgrader_config.py, into ``out/<lesson>/`` and the gradebook at ``db_url`` (default: the
    configuration's). One nbgrader for all of them: its import alone takes seconds."""
    from nbgrader.apps.api import NbGraderAPI  # imported only when generating
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(CONFIG.name, path=str(CONFIG.parent)).load_config()
    config.CourseDirectory.release_directory = str(out)
    if db_url:
        config.CourseDirectory.db_url = db_url
    # nbgrader's gradebook runs `alembic`, installed next to this Python, on a new database
    tools = str(Path(sys.executable).parent)
    if tools not in os.environ["PATH"].split(os.pathsep):
        os.environ["PATH"] = f"{tools}{os.pathsep}{os.environ['PATH']}"
    alembic_head.install()  # a new gradebook is stamped without running `alembic`
    api = NbGraderAPI(config=config)
    for lesson in selected:
        done = api.generate_assignment(lesson, force=True)
        if not done["success"]:
            raise SystemExit(f"nbgrader could not generate {lesson}:\n"
                             f"{done.get('log', '')}{done.get('error', '')}")


def release(selected: list[str], out: Path, db_url: str | None = None) -> list[Path]:
    """Generate and stamp the selected lessons into ``out``; return the notebooks written.
    SystemExit, before anything is written, if a lesson has a cell the grader cannot read."""
    try:
        for lesson in selected:
            graded_cells(lesson)
    except (GradedCellError, KeyError) as err:
        raise SystemExit(f"not released: {err}") from None
    settings = course_settings()
    generate(selected, out, db_url)
    written = []
    for lesson in selected:
        notebook = out / lesson / f"{lesson}.ipynb"
        notebook.write_text(stamp(notebook.read_text(), lesson, settings))
        written.append(notebook)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", help="lessons to release (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "notebooks",
                        help="where the student notebooks go (default: notebooks/)")
    parser.add_argument("--db", help="gradebook URL (default: a throwaway one; the course "
                                     "workspace gradebook is filled by the grading commands)")
    args = parser.parse_args()
    unknown = set(args.lessons) - set(lesson_names())
    if unknown:
        raise SystemExit(f"unknown lesson(s): {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(lesson_names())}")
    with tempfile.TemporaryDirectory() as scratch:
        db_url = args.db or f"sqlite:///{scratch}/release.db"
        for notebook in release(args.lessons or lesson_names(), args.out.resolve(), db_url):
            print(f"released {notebook}")


if __name__ == "__main__":
    main()
