"""The course package as the student's process sees it while one lesson is graded.

It is made of two parts. On disk, the same for every lesson (``build``): the utilities and the
student's half of the checks (the whole of ``checks/student/``), with a stand-in
``checks/__init__.py`` whose ``check_*`` functions only say
that the grader runs the checks (so the notebook's own check cells run and do nothing). In
memory, per submission (``modules``): the source of what the lesson's notebook may import (the
registry's ``may_import``: earlier lessons' references and this lesson's given code), sent with
the job and imported from there (``runner.py``). Nothing else: not this lesson's exercise
references, no check, no mistake catalogue, neither importable nor readable as files, so no
code in the submission can produce a right answer with them. A module of which only some names
may be imported is cut down to those names and what they need (read with ``ast``); if they need
an exercise reference of the lesson, building fails and says so.
"""

import ast
import functools
import shutil
from pathlib import Path

import attention_course
from attention_course import lessons

from .. import syntax

SOURCE = Path(attention_course.__file__).parent
STUDENT_SIDE = SOURCE / "checks" / "student"  # the checks' modules that run beside student code
ON_DISK = ("__init__", "device", "viz")  # the package's own modules every lesson's package has
CHECKS_STAND_IN = '''"""Under the grader, checks run in the grader's own process: these say so."""


def _graded_elsewhere(*args, **kwargs):
    print("(checks run in the grader's own process)")


def __getattr__(name):
    if name.startswith("check_"):
        return _graded_elsewhere
    raise AttributeError(name)
'''


class PackageError(ValueError):
    """The registry asks for a sandbox package that cannot be built (the message says why)."""


def build(root: Path) -> Path:
    """Write the part on disk under ``root`` (replacing what was there); return ``root``, the
    folder to put on the student's ``sys.path``."""
    package = root / "attention_course"
    if root.exists():
        shutil.rmtree(root)
    (package / "checks").mkdir(parents=True)
    for name in ON_DISK:
        shutil.copy(SOURCE / f"{name}.py", package / f"{name}.py")
    shutil.copytree(STUDENT_SIDE, package / "checks" / "student",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (package / "checks" / "__init__.py").write_text(CHECKS_STAND_IN)
    return root


@functools.cache
def modules(lesson: lessons.Lesson) -> dict[str, str]:
    """Module name -> source, for what ``lesson``'s notebook may import."""
    wanted: dict[str, set[str] | None] = {}  # None: the whole module
    for entry in lesson.may_import:
        module, _, name = entry.partition(".")
        if not name:
            wanted[module] = None
        elif wanted.get(module, set()) is not None:
            wanted.setdefault(module, set()).add(name)
    forbidden = exercise_references(lesson)
    present = set(wanted) | set(ON_DISK)
    sources = {}
    for module, names in wanted.items():
        source = (SOURCE / f"{module}.py").read_text()
        sources[module] = cut_down(source, names, forbidden.get(module, set()), present,
                                   f"{lesson.id}: {module}")
    return sources


def exercise_references(lesson: lessons.Lesson) -> dict[str, set[str]]:
    """Module -> names of ``lesson``'s exercise references (``Practice.reference``)."""
    references: dict[str, set[str]] = {}
    for practice in lesson.practice:
        if practice.reference:
            module, _, name = practice.reference.partition(".")
            references.setdefault(module, set()).add(name)
    return references


def cut_down(source: str, names: set[str] | None, forbidden: set[str], present: set[str],
             where: str) -> str:
    """``source`` reduced to ``names`` and the top-level definitions they need (all of it when
    ``names`` is None); PackageError if that includes a ``forbidden`` name or imports a module
    of the package that is not ``present``."""
    tree = syntax.parse(source)
    defined = {name: statement for statement in tree.body for name in _defines(statement)}
    keep = set(defined) - {n for n, s in defined.items() if _is_import(s)} if names is None \
        else set(names)
    missing = keep - set(defined)
    if missing:
        raise PackageError(f"{where}: no top-level name {sorted(missing)[0]!r}")
    needed, todo = set(), list(keep)
    while todo:
        name = todo.pop()
        if name in needed or name not in defined:
            continue
        needed.add(name)
        todo += _uses(defined[name])
    leaked = needed & forbidden
    if leaked:
        raise PackageError(f"{where}: needs {sorted(leaked)[0]}, an exercise reference of the "
                           f"lesson being graded")
    kept = []
    for statement in tree.body:
        if _is_docstring(statement):
            kept.append(statement)
        elif _is_import(statement):
            imported = [a for a in statement.names if (a.asname or a.name).split(".")[0] in needed]
            if imported:
                _check_import(statement, present, where)
                kept.append(type(statement)(**{**vars(statement), "names": imported}))
        elif any(name in needed for name in _defines(statement)):
            kept.append(statement)
    return ast.unparse(ast.Module(body=kept, type_ignores=[])) + "\n"


def _defines(statement: ast.stmt) -> list[str]:
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [statement.name]
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return [(a.asname or a.name).split(".")[0] for a in statement.names]
    targets = (statement.targets if isinstance(statement, ast.Assign)
               else [statement.target] if isinstance(statement, ast.AnnAssign) else [])
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _uses(statement: ast.stmt) -> list[str]:
    return [n.id for n in ast.walk(statement) if isinstance(n, ast.Name)]


def _is_import(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Import | ast.ImportFrom)


def _is_docstring(statement: ast.stmt) -> bool:
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str))


def _check_import(statement: ast.stmt, present: set[str], where: str) -> None:
    if isinstance(statement, ast.ImportFrom) and statement.level:
        modules = ([statement.module.split(".")[0]] if statement.module
                   else [a.name for a in statement.names])
        for module in modules:
            if module not in present:
                raise PackageError(f"{where}: imports {module}, which the lesson may not import")
