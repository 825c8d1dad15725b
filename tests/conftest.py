"""Shared test setup: a headless matplotlib backend, seeded random inputs, the one set of fakes
for Colab and the GPU, ``graded_class``, which builds a class of submissions and grades it as an
instructor does, and the order in which modules are handed to the workers."""

import functools
import subprocess
import sys
import types
from collections.abc import Callable, Iterable
from importlib.machinery import ModuleSpec
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before anything imports pyplot: tests never open a window

import nbval.kernel  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.notebooks import start_again_if_it_dies  # noqa: E402

# The modules that keep a worker busy a minute or more in `make test`, longest first (their
# setup, call and teardown summed from `--durations=0`, 2 cores, 3 workers)
LONGEST = ("tests/adversarial/test_adversarial.py",  # 176 s
           "tests/repo/test_bench.py",  # 166 s
           "tests/colab/test_colab_pinned.py",  # 97 s
           "tests/browser/test_browser_lessons.py",  # 87 s
           "tests/notebooks/test_lesson_notebooks.py",  # 86 s
           "tests/pipeline/test_grading.py",  # 73 s
           "tests/pipeline/test_gradebook.py",  # 70 s
           "tests/pipeline/test_cluster.py")  # 65 s


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first, then the other modules with a slow test, then the rest, each
    in collection order: pytest-xdist (``make test``: --dist loadscope --no-loadscope-reorder)
    hands modules to workers in this order, so the long ones start early and short ones fill
    the end."""
    slow = {module_of(item) for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> tuple[int, bool]:
        module = module_of(item)
        return (LONGEST.index(module) if module in LONGEST else len(LONGEST),
                module not in slow)

    items.sort(key=rank)


# a kernel that dies while starting is started once more (see start_again_if_it_dies)
nbval.kernel.start_new_kernel = start_again_if_it_dies(nbval.kernel.start_new_kernel)


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


@pytest.fixture
def gen() -> torch.Generator:
    """A CPU random generator with a fixed seed, so every test sees the same inputs."""
    return torch.Generator().manual_seed(0)


# ---------------------------------------------------------------- Colab and the GPU, faked

def stand_in(name: str) -> types.ModuleType:
    module = types.ModuleType(name, "Stand-in for Google Colab.")
    module.__spec__ = ModuleSpec(name, loader=None, is_package=True)
    return module


@pytest.fixture
def colab(monkeypatch):
    """A `google.colab` module imported, as on every Colab runtime: in sys.modules, and found
    by importlib.util.find_spec."""
    for name in ("google", "google.colab"):
        monkeypatch.setitem(sys.modules, name, stand_in(name))


@pytest.fixture
def not_colab(monkeypatch):
    """No `google.colab` module imported, as anywhere but on Colab."""
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


# ---------------------------------------------------------------- a class, graded

@pytest.fixture(scope="session")
def graded_class(tmp_path_factory):
    """``graded_class(name, ...)``: a class built in a workspace of its own and graded, as
    ``build_class`` says; a module fixture calls it once and its tests share the class (a test
    that changes it works on a copy)."""
    return functools.partial(build_class, tmp_path_factory)


def build_class(tmp_path_factory, name: str, *, submitted: dict | None = None,
                downloads: Callable[..., Iterable[Path]] | None = None,
                prepare: Callable | None = None, gradebook: str | None = None,
                grade: tuple[str, ...] | Callable | None = ("--workers", "1"),
                command_line: bool = False, then: tuple[str, ...] = ()):
    """The Workspace of a class, in a new folder called ``name``, built in this order:

    submitted     {(student, lesson): (notebook or its bytes, timestamp.txt's text or None)},
                  written to submitted/ as collect writes it
    downloads     downloads(workspace) -> the LMS zips or exchange folders to `collect`
    prepare       prepare(workspace), before grading: what else the class needs
    grade         the options of `grade` (run in this process, or with ``command_line`` by
                  `python -m grader` in a process of its own), or grade(workspace) where it is
                  graded another way; None: not graded
    then          the commands run after grading (e.g. "report", "feedback")

    ``gradebook``, a database URL, is the gradebook of grading and of the commands after it
    (ATTENTION_COURSE_GRADEBOOK); without it, the workspace's SQLite file.
    """
    from grader import cli
    from grader.workspace import Workspace

    workspace = Workspace(tmp_path_factory.mktemp(name) / "course")
    for (student, lesson), (notebook, stamp) in (submitted or {}).items():
        write_submission(workspace, student, lesson, notebook, stamp)
    for download in downloads(workspace) if downloads else ():
        assert cli.main(["--workspace", str(workspace.root), "collect", str(download)]) == 0
    if prepare:
        prepare(workspace)
    with pytest.MonkeyPatch.context() as patch:
        if gradebook:
            patch.setenv("ATTENTION_COURSE_GRADEBOOK", gradebook)
        if callable(grade):
            grade(workspace)
        elif grade is not None and command_line:
            run_grader(workspace, "grade", *grade)
        elif grade is not None:
            assert cli.main(["--workspace", str(workspace.root), "grade", *grade]) == 0
        for command in then:
            assert cli.main(["--workspace", str(workspace.root), command]) == 0
    return workspace


def write_submission(workspace, student: str, lesson: str, notebook, stamp: str | None) -> None:
    """submitted/<student>/<lesson>/ as collect writes it: the notebook, and timestamp.txt."""
    import nbformat

    folder = workspace.submitted / student / lesson
    folder.mkdir(parents=True, exist_ok=True)
    data = notebook if isinstance(notebook, bytes) else nbformat.writes(notebook).encode()
    (folder / f"{lesson}.ipynb").write_bytes(data)
    if stamp:
        (folder / "timestamp.txt").write_text(stamp)


def run_grader(workspace, *command: str) -> None:
    """`python -m grader` in a process of its own, with this process's environment."""
    from grader.course import ROOT

    done = subprocess.run([sys.executable, "-m", "grader", "--workspace", str(workspace.root),
                           *command], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
