"""The autograder zip of one lesson, as Gradescope takes it (``make gradescope LESSON=...``).

At the zip's root: ``setup.sh`` (run once, as root, when Gradescope builds the image: it
installs Python 3.11, CPU torch at the version in constraints.txt and the course, with uv, into
folders every user may read, creates the unprivileged user, and makes the course's files
root's alone), ``run_autograder`` (run for each submission) and ``gradescope.json`` (the
settings). Beside them, what grading reads: the course package, the grader, this lesson's
source notebook (solutions and hidden tests) and the released notebooks. Nothing else of the
repository: no other lesson's solutions, no tests, no workspace.
"""

import stat
import zipfile
from pathlib import Path

from ..course import SOLUTIONS, lesson_names
from ..workspace import ROOT
from .settings import FILE_NAME, Settings, SettingsError

SKIPPED = ("__pycache__", ".ipynb_checkpoints")
TOP_FILES = ("pyproject.toml", "constraints.txt", "excludes.txt", "README.md", "LICENSE")
TREES = ("src", "grader", "notebooks")

SETUP = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, to build the autograder's image (its Ubuntu base image).
# The environment goes where every user may read it; the course's own files stay root's alone.
set -euo pipefail
SOURCE=/autograder/source
VENV=/opt/attention-course
pin() { sed -n "s/^$1==//p" "$SOURCE/constraints.txt"; }
export DEBIAN_FRONTEND=noninteractive UV_PYTHON_INSTALL_DIR=/opt/python
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv ca-certificates bubblewrap
python3 -m venv /opt/uv
/opt/uv/bin/pip install --quiet "uv==$(pin uv)"
UV=/opt/uv/bin/uv
$UV venv --python 3.11 "$VENV"
$UV pip install --python "$VENV/bin/python" --no-deps \
    --index-url https://download.pytorch.org/whl/cpu "torch==$(pin torch)"
$UV pip install --python "$VENV/bin/python" -c "$SOURCE/constraints.txt" \
    --excludes "$SOURCE/excludes.txt" -e "$SOURCE[instructor]"
# bytecode once, for the student's process too (it may not write into the environment)
"$VENV/bin/python" -c 'import torch, matplotlib.pyplot, IPython, tqdm.auto, ipywidgets'
id -u {user} >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin {user}
chown -R root:root "$SOURCE" && chmod -R go-rwx "$SOURCE"
"""

RUN = r"""#!/usr/bin/env bash
# Gradescope runs this for each submission, as root: grades /autograder/submission and writes
# /autograder/results/results.json. ATTENTION_GRADESCOPE_ROOT and ATTENTION_GRADESCOPE_PYTHON
# point it elsewhere (the course's tests lay out a fake /autograder).
root="${ATTENTION_GRADESCOPE_ROOT:-/autograder}"
python="${ATTENTION_GRADESCOPE_PYTHON:-/opt/attention-course/bin/python}"
cd "$root/source" || exit 1
PYTHONPATH="$root/source/src:$root/source" exec "$python" -m grader gradescope run
"""


def build(settings: Settings, out: Path, user: str = "student") -> Path:
    """Write ``out/<lesson>.zip``; return its path."""
    if settings.lesson not in lesson_names():
        raise SettingsError(f"unknown lesson {settings.lesson!r}; known: "
                            f"{', '.join(lesson_names())}")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{settings.lesson}.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        _add_script(archive, "setup.sh", SETUP.replace("{user}", user))
        _add_script(archive, "run_autograder", RUN)
        archive.writestr(FILE_NAME, settings.to_json())
        for name, file in course_files(settings.lesson).items():
            archive.write(file, name)
    return path


def course_files(lesson: str) -> dict[str, Path]:
    """Name in the zip -> file: what grading ``lesson`` reads."""
    files = {name: ROOT / name for name in TOP_FILES if (ROOT / name).is_file()}
    trees = [ROOT / tree for tree in TREES] + [SOLUTIONS / lesson]
    for tree in trees:
        for file in sorted(tree.rglob("*")):
            if file.is_file() and not any(part in SKIPPED for part in file.parts):
                files[file.relative_to(ROOT).as_posix()] = file
    return files


def _add_script(archive: zipfile.ZipFile, name: str, text: str) -> None:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFREG | 0o755) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, text)
