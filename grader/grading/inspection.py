"""What the grader can see for itself in a submission's source, flagged for a human.

The source is parsed here, in the trusted process, never run. Points do not depend on it (the
checks decide them); a flag says where a human should look: code that reaches the grader's or
the checks' internals, tracing and profiling hooks, ``gc``, ``ctypes``, threads, raw file
descriptors, torch's internals (``torch.ops``, ``torch._C``, its dispatch machinery,
TorchScript), the PyTorch built-in an exercise asks the student to write, code that hides
what it runs (``exec``, ``eval``, ``compile``, an attribute or module named at run time,
decoded data), and an answer that is the course's reference with the names changed. Only the
student's own code is read: cells whose source differs from the released notebook's; the code
of a cell magic (``%%time``, ``%%capture``, ...) and of a line magic is read as code too.
"""

import ast
import difflib
import functools
import importlib
import inspect
import textwrap
from collections.abc import Iterator

import nbformat
from IPython.core.inputtransformer2 import TransformerManager

from attention_course import lessons
from attention_course.checks import CHECKS

from .. import syntax
from ..course import Lesson, nbgrader_metadata, solution_sources
from .submissions import released_source

HOOKS = {  # dotted name (or its start) -> why it is flagged
    "sys.settrace": "a tracing hook", "sys.setprofile": "a profiling hook",
    "sys.gettrace": "a tracing hook", "sys.getprofile": "a profiling hook",
    "torch.autograd.variable": "autograd's engine",
    "threading.settrace": "a tracing hook", "threading.setprofile": "a profiling hook",
    "sys.monitoring": "a tracing hook", "sys._getframe": "frame access",
    "inspect.currentframe": "frame access", "inspect.stack": "frame access",
    "sys.modules": "the interpreter's module table", "gc": "the garbage collector",
    "ctypes": "raw memory access", "threading": "a thread", "_thread": "a thread",
    "multiprocessing": "a process", "concurrent": "a thread pool", "signal": "signal handlers",
    "os.write": "a raw file descriptor", "os.read": "a raw file descriptor",
    "os.fdopen": "a raw file descriptor", "os.dup": "a raw file descriptor",
    "os.dup2": "a raw file descriptor", "os.kill": "signals to processes",
    "torch.ops": "torch's operator internals", "torch._C": "torch's C internals",
    "torch.jit": "TorchScript", "builtins": "the interpreter's built-ins",
    **dict.fromkeys(("torch.utils._python_dispatch", "torch.overrides", "torch.library",
                     "torch._ops", "torch._dispatch", "torch.fx", "torch._dynamo",
                     "torch.compiler"), "torch's dispatch machinery"),
    "asyncio": "an event loop (threads)", "importlib": "a module imported by name at run time",
    **dict.fromkeys(("base64", "binascii", "codecs", "zlib", "bz2", "lzma", "marshal",
                     "pickle", "dill"), "decoded data"),
    "grader": "the grader's code", "attention_course.checks": "the checks' internals",
    **{f"get_ipython().{name}": "how the shell runs or reports cells" for name in (
        "input_transformers_cleanup", "input_transformers_post", "input_transformer_manager",
        "ast_transformers", "events", "showtraceback", "set_custom_exc", "custom_exceptions")},
}
# Attributes that reach the running program's frames, closures and globals, where the checks
# keep what they observe, or autograd's engine under its public functions.
INTERNALS = frozenset({"__closure__", "cell_contents", "__globals__", "__traceback__", "tb_frame",
                       "tb_next", "f_back", "f_locals", "f_globals", "f_builtins", "gi_frame",
                       "cr_frame", "ag_frame", "_execution_engine", "run_backward"})
BY_RUNTIME_NAME = frozenset({"attrgetter", "methodcaller", "__getattribute__"})
MOST_FLAGS = 50
SETTINGS = ("torch.backends.",)  # attributes meant to be set: no patch
SIMILAR = 0.92  # token similarity above which an answer counts as the reference renamed
CLOSER_TO_THE_REFERENCE = 0.05  # ... and by how much closer to it than to the usual answer
SHORTEST_COMPARED = 12  # answers shorter than this many tokens look alike when right


def as_run(source: str) -> str:
    """A cell's code as the kernel runs it, for comparing cells: its syntax tree after IPython's
    transformations (a magic becomes a call whose arguments count); for a cell that does not
    parse, its text with line endings made ``\\n`` and spaces at the ends of lines left out."""
    return _as_run(source, _parse(_newlines(source)))


def _newlines(source: str) -> str:
    """Line endings as Python reads them: ``\\r\\n`` and ``\\r`` are ``\\n``."""
    return source.replace("\r\n", "\n").replace("\r", "\n")


def _as_run(source: str, tree: ast.Module | None) -> str:
    if tree is not None:
        return ast.dump(tree)
    lines = _newlines(source).split("\n")
    return "not Python: " + "\n".join(line.rstrip() for line in lines).strip("\n")


@functools.cache
def released_code(lesson: str) -> frozenset[str]:
    """Every code cell of the released notebook, as run: what is not the student's."""
    return frozenset(as_run(source) for source in released_source(lesson))


def _students_cells(notebook: nbformat.NotebookNode, lesson: Lesson) -> Iterator:
    """(cell, its syntax tree or None) of every code cell the student wrote or changed."""
    released = released_code(lesson.name)
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        tree = _parse(_newlines(cell.source))
        if _as_run(cell.source, tree) not in released:
            yield cell, tree


def inspect_submission(notebook: nbformat.NotebookNode, lesson: Lesson) -> list[str]:
    """Flags for a human, from the student's own cells of ``notebook`` (the first
    ``MOST_FLAGS`` different ones)."""
    flags: dict[str, None] = {}  # in order, once each
    cells = [(cell, tree) for cell, tree in _students_cells(notebook, lesson) if tree is not None]
    aliases = {name: target for _, tree in cells for name, target in _aliases(tree).items()}
    for cell, tree in cells:
        answer = bool(nbgrader_metadata(cell).get("solution"))
        for flag in _flags(tree, lesson, answer, aliases):
            flags[flag] = None
            if len(flags) == MOST_FLAGS:
                return [*flags, "... and more: the first flags are listed"]
    return list(flags)


def answer_tokens(notebook: nbformat.NotebookNode, lesson: Lesson) -> dict[str, str]:
    """The student's answer to each exercise of ``lesson`` (its function, or its class's
    ``forward``) as tokens that renaming does not change, for comparing students."""
    wanted = _reference_tokens(lesson.name)
    answers = {}
    for _, tree in _students_cells(notebook, lesson):
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.FunctionDef) and _answer_name(node) in wanted:
                answers[_answer_name(node)] = " ".join(_tokens(node))
    return answers


def _answer_name(definition: ast.FunctionDef) -> str:
    owner = getattr(definition, "parent", None)
    return f"{owner.name}.{definition.name}" if isinstance(owner, ast.ClassDef) \
        else definition.name


def _parse(source: str) -> ast.Module | None:
    """The cell's syntax tree, each node knowing its ``parent``; None if it does not parse.
    IPython's magics are the calls IPython turns them into, and the code a magic runs (a cell
    magic's body, a line magic's line) is read as code of the cell's own."""
    try:
        tree = syntax.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # the kernel reports it; there is nothing to read
    tree.body += [statement for code in _magic_code(tree) if (inner := _parse(code))
                  for statement in inner.body]
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child.parent = node
    return tree


def _magic_code(tree: ast.Module) -> list[str]:
    """What the magics of a cell run: get_ipython().run_cell_magic(name, line, body) runs
    ``body`` (and some magics ``line``), run_line_magic(name, line) runs ``line``."""
    code = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("run_cell_magic", "run_line_magic"):
            code += [arg.value for arg in node.args[1:]
                     if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    return code


HIDDEN_CODE = {"exec": "runs code from a string", "eval": "runs code from a string",
               "compile": "runs code from a string", "__import__": "a module imported by name "
               "at run time"}
BY_NAME = ("getattr", "setattr", "delattr")  # flagged when the name is computed


def _aliases(tree: ast.Module) -> dict[str, str]:
    """What the names a cell's imports bind stand for: ``import attention_course as course``
    gives {"course": "attention_course"}, ``from torch import nn`` {"nn": "torch.nn"}."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.asname: alias.name for alias in node.names if alias.asname}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {alias.asname or alias.name: f"{node.module}.{alias.name}"
                      for alias in node.names}
    return found


def _flags(tree: ast.Module, lesson: Lesson, answer: bool, aliases: dict[str, str]) -> list[str]:
    """Flags of one cell; ``answer``: it is a practice cell, where the exercise's built-ins
    are flagged too (elsewhere a student may well compare with them). ``aliases``: what the
    student's imports bind (a name spelled through one is read as what it stands for)."""
    builtins = _exercise_builtins(lesson) if answer else set()
    flags = []
    for node in ast.walk(tree):
        for name in _names(node, aliases):
            why = next((w for hook, w in HOOKS.items()
                        if name == hook or name.startswith(hook + ".")), None)
            if why and not _is_check_import(node):
                flags.append(f"uses {name} ({why})")
            elif "." in name and any(part in name.rsplit(".", 1)[-1] for part in builtins):
                flags.append(f"calls {name}, the built-in an exercise of this lesson asks "
                             f"the student to write")
        if isinstance(node, ast.Call) and _is_name(node.func, "open") and node.args \
                and isinstance(node.args[0], ast.Constant) and type(node.args[0].value) is int:
            flags.append("opens a raw file descriptor")
        flags += _hidden(node) + _internals(node)
        if isinstance(node, ast.FunctionDef):
            flags += _copied(node, lesson)
        flags += [f"replaces {name} (library code patched)"
                  for name in _patched(node, aliases)]
    return flags


def _hidden(node: ast.AST) -> list[str]:
    """A flag for a call that hides what it runs or reaches: exec, eval, compile, __import__,
    and getattr, setattr or delattr with an attribute name that is not written out."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return []
    name = node.func.id
    if name in HIDDEN_CODE:
        return [f"calls {name} ({HIDDEN_CODE[name]})"]
    if name in BY_NAME and (len(node.args) < 2 or not isinstance(node.args[1], ast.Constant)):
        return [f"calls {name} with a computed attribute name (what it reaches is hidden)"]
    return []


def _internals(node: ast.AST) -> list[str]:
    """A flag for ``x.f_back``, ``getattr(x, "cell_contents")``, ``attrgetter("tb_frame")``
    and the like (``INTERNALS``), and for attributes reached by a name given at run time."""
    if isinstance(node, ast.Attribute):
        attribute = node.attr
    elif isinstance(node, ast.Constant):
        attribute = node.value
    elif isinstance(node, ast.Name):
        attribute = node.id
    else:
        return []
    if attribute in BY_RUNTIME_NAME:
        return [f"uses {attribute} (an attribute reached by a name given at run time)"]
    if attribute in INTERNALS:
        return [f"reaches {attribute} (frames, closures or autograd's engine, where the checks "
                "keep what they observe)"]
    return []


def _names(node: ast.AST, aliases: dict[str, str]) -> list[str]:
    """Dotted names ``node`` imports or spells out (``torch.ops.aten``, ``sys.settrace``), a
    name bound by an import read as what it stands for (``course.checks`` as
    ``attention_course.checks``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [f"{node.module}.{alias.name}" for alias in node.names]
    if isinstance(node, ast.Attribute) and not isinstance(getattr(node, "parent", None),
                                                          ast.Attribute):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            return [".".join([aliases.get(node.id, node.id), *reversed(parts)])]
        if isinstance(node, ast.Call) and _is_name(node.func, "get_ipython"):
            return [".".join(["get_ipython()", *reversed(parts)])]
    return []


PATCHABLE = ("torch", "F", "nn", "np", "numpy", "attention_course", "builtins", "json", "os",
             "sys", "IPython", "get_ipython")


def _patched(node: ast.AST, aliases: dict[str, str]) -> list[str]:
    """Attributes of libraries that ``node`` assigns (``torch.Tensor.clone = ...``), and
    ``setattr`` on them."""
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [name for t in targets if isinstance(t, ast.Attribute)
                 for name in _names(t, aliases)]
    elif isinstance(node, ast.Call) and _is_name(node.func, "setattr") and node.args:
        names = [n for n in _names(node.args[0], aliases) or
                 ([aliases.get(node.args[0].id, node.args[0].id)]
                  if isinstance(node.args[0], ast.Name) else [])]
    else:
        return []
    return [name for name in names if name.split(".")[0] in PATCHABLE
            and not name.startswith(SETTINGS)]


def _is_check_import(node: ast.AST) -> bool:
    """``from attention_course.checks import check_x``: what every check cell does."""
    return (isinstance(node, ast.ImportFrom) and node.module == "attention_course.checks"
            and all(alias.name in CHECKS or alias.name == "check_prediction"
                    for alias in node.names))


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


@functools.cache
def _exercise_builtins(lesson: Lesson) -> set[str]:
    """The torch built-ins the lesson's exercises may not call (their shortcut rule)."""
    names = set()
    for cell in lesson.cells:
        for call in cell.calls:
            module = importlib.import_module(CHECKS[call.check].__module__)
            names |= {name for value in vars(module).values()
                      if hasattr(value, "forbidden") and hasattr(value.forbidden, "builtin_names")
                      for name in value.forbidden.builtin_names}
    return names


# ---------------------------------------------------------------- answers copied from the reference

def _copied(definition: ast.FunctionDef, lesson: Lesson) -> list[str]:
    """A flag if ``definition`` is the lesson's reference of the same name, renamed (for a
    class the student completes, its ``forward``)."""
    name = _answer_name(definition)
    reference = _reference_tokens(lesson.name).get(name)
    if reference is None:
        return []
    mine = _tokens(definition)
    if len(mine) < SHORTEST_COMPARED:
        return []
    similarity = _similarity(mine, reference)
    usual = _similarity(mine, _solution_tokens(lesson.name).get(name, []))
    if similarity < SIMILAR or similarity - usual < CLOSER_TO_THE_REFERENCE:
        return []  # (an answer as close to the usual way of writing it is no copy)
    return [f"{name} is the course's reference with the names changed "
            f"(similarity {similarity:.2f})"]


def _similarity(a: list[str], b: list[str]) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


@functools.cache
def _solution_tokens(lesson: str) -> dict[str, list[str]]:
    """Name the student writes -> tokens of the instructor's answer (the solution notebook)."""
    found = {}
    for source in solution_sources(lesson).values():
        tree = _parse(source)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.FunctionDef):
                found[_answer_name(node)] = _tokens(node)
    return found


@functools.cache
def _reference_tokens(lesson: str) -> dict[str, list[str]]:
    """Name the student writes -> tokens of its reference (a class's ``forward``)."""
    found = {}
    for practice in lessons.lesson(lesson).practice:
        if practice.reference:
            module, _, name = practice.reference.partition(".")
            obj = getattr(importlib.import_module(f"attention_course.{module}"), name)
            if inspect.isclass(obj):
                obj, name = obj.forward, f"{name}.forward"
            tree = syntax.parse(textwrap.dedent(inspect.getsource(obj))).body[0]
            found[name] = _tokens(tree)
    return found


def _tokens(definition: ast.AST) -> list[str]:
    """The definition's body as node kinds and constants, names numbered in order of
    appearance, docstrings left out: renaming variables does not change it."""
    numbers: dict[str, str] = {}
    tokens = []
    for node in ast.walk(definition):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            continue
        tokens.append(type(node).__name__)
        name = getattr(node, "id", None) or getattr(node, "arg", None)
        if isinstance(name, str):
            tokens.append(numbers.setdefault(name, f"v{len(numbers)}"))
        elif isinstance(node, ast.Attribute):
            tokens.append(node.attr)
        elif isinstance(node, ast.Constant) and not isinstance(node.value, str):
            tokens.append(repr(node.value))
    return tokens
