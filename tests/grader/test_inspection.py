"""Flags for a human, read from a submission's source in the trusted process."""

import inspect
import re
import textwrap

import pytest

from attention_course import attention
from grader.course import read_lesson
from grader.demo import practice_names, student_notebook
from grader.grading.inspection import MOST_FLAGS, inspect_submission
from helpers.notebooks import lessons

LESSON = "02_scaled_dot_product"

FAMILIES = {
    "a tracing hook": "import sys\nsys.settrace(lambda *a: None)",
    "a profiling hook": "import sys\nsys.setprofile(None)",
    "the garbage collector": "import gc\nfor o in gc.get_objects(): pass",
    "raw memory access": "import ctypes",
    "a thread": "import threading\nthreading.Thread(target=print).start()",
    "a raw file descriptor": "import os\nos.write(4, b'{}')",
    "opens a raw file descriptor": "open(4, 'wb').write(b'x')",
    "torch's operator internals": "import torch\ny = torch.ops.aten._softmax.default",
    "torch's C internals": "import torch\ntorch._C._set_grad_enabled(True)",
    "TorchScript": "import torch\nf = torch.jit.script(lambda x: x)",
    "the checks' internals": "from attention_course.checks import observing",
    "the grader's code": "import grader.grading.verdicts",
    "the interpreter's module table": "import sys\nsys.modules['x'] = None",
    "library code patched": "import torch\ntorch.Tensor.clone = lambda self: self",
    "how the shell runs or reports cells": "get_ipython().input_transformers_cleanup.append(f)",
    "torch's dispatch machinery": "from torch.utils._python_dispatch import _pop_mode\n"
                                  "_pop_mode()",
    "an event loop (threads)": "import asyncio\nasyncio.to_thread(print)",
    "a module imported by name at run time": "import importlib\n"
                                             "m = importlib.import_module('s' + 'ys')",
    "decoded data": "import base64\ncode = base64.b64decode('cHJpbnQoMSk=')",
    "runs code from a string": "exec('print(1)')",
    "with a computed attribute name": "import sys\nsetting = getattr(sys, 'set' + 'profile')",
    "reaches f_back": "try:\n    1 / 0\nexcept ZeroDivisionError as err:\n"
                      "    frame = err.__traceback__.tb_frame.f_back",
    "reaches cell_contents": "import sys\nfor cell in sys.getprofile().__closure__:\n"
                             "    getattr(cell, 'cell_contents').clear()",
    "reaches tb_frame": "import operator, sys\nframe = operator.attrgetter('tb_frame')(tb)",
    "a name given at run time": "import operator\nget = operator.attrgetter('f_' + 'back')",
    "autograd's engine": "from torch.autograd.variable import Variable\n"
                         "run = Variable._execution_engine.run_backward",
}
# where IPython hides code from a plain reading: a magic's own line or body
MAGIC_FAMILIES = {
    "a profiling hook": "%%time\nimport sys\nsys.setprofile(None)",
    "a tracing hook": "%%capture out\nimport sys\nsys.settrace(None)",
    "runs code from a string": "%time exec('print(1)')",
}


def flags_of(extra: str, lesson: str = LESSON, answers: dict | None = None) -> list[str]:
    notebook = student_notebook(lesson, answers or {}, textwrap.dedent(extra) if extra else None)
    return inspect_submission(notebook, read_lesson(lesson))


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_is_flagged(family):
    flags = flags_of(FAMILIES[family])
    assert any(family in flag for flag in flags), flags


@pytest.mark.parametrize("family", MAGIC_FAMILIES)
def test_code_inside_a_magic_is_read_as_code(family):
    flags = flags_of(MAGIC_FAMILIES[family])
    assert any(family in flag for flag in flags), flags


@pytest.mark.parametrize(("source", "flagged"), [
    ("import attention_course as course\n"
     "course.checks.student.harness.LatentOnly.__call__ = lambda self, *a: None",
     "replaces attention_course.checks.student.harness.LatentOnly.__call__"),
    ("import attention_course as course\nrecord = course.checks.student.shortcuts",
     "uses attention_course.checks.student.shortcuts"),
    ("from attention_course import checks as c\nc.student.shortcuts.watch_calls = None",
     "replaces attention_course.checks.student.shortcuts.watch_calls"),
    ("import torch as t\nt._C._set_grad_enabled(True)", "uses torch._C._set_grad_enabled"),
    ("import sys as system\nsetattr(system, 'settrace', None)", "replaces sys"),
])
def test_a_name_bound_by_an_import_is_read_as_what_it_stands_for(source, flagged):
    assert any(flag.startswith(flagged) for flag in flags_of(source)), flags_of(source)


def test_ordinary_getattr_and_magics_are_not_flagged():
    assert flags_of("import torch\nrelu = getattr(torch, 'relu')\n%time x = 1 + 1") == []


def test_ipython_syntax_and_ordinary_tools_are_not_flagged():
    assert flags_of("%load_ext autoreload\n%autoreload 2\nimport cProfile\n"
                    "cProfile.run('1 + 1')\n!echo hi\nimport math, time") == []


@pytest.mark.parametrize("lesson", lessons())
def test_the_instructors_answers_are_not_flagged(lesson):
    assert flags_of("", lesson, dict.fromkeys(practice_names(lesson))) == []


def test_the_reference_with_its_names_changed_is_flagged():
    body = textwrap.dedent(inspect.getsource(attention.scaled_dot_product_attention))
    for name, new in (("query", "q_in"), ("key", "k_in"), ("scale", "factor"),
                      ("Tensor", "object")):
        body = re.sub(rf"\b{name}\b", new, body)
    renamed = body
    assert any("course's reference" in flag for flag in flags_of(renamed))


def test_the_exercises_built_in_is_flagged_in_an_answer_not_in_a_scratch_cell():
    answered = flags_of("", answers={"softmax": "return torch.softmax(x, dim)"})
    assert any("the built-in an exercise" in flag for flag in answered), answered
    assert flags_of("z = torch.randn(3, 4)\nprint(torch.softmax(z, -1))") == []


def test_a_built_in_spelled_out_whole_is_flagged_in_an_answer():
    body = "return F.scaled_dot_product_attention(query, key, value, scale=scale), None"
    answered = flags_of("", answers={"scaled_dot_product_attention": body})
    assert any("F.scaled_dot_product_attention" in flag for flag in answered), answered


def test_settings_meant_to_be_set_are_not_patches():
    assert flags_of("import torch\ntorch.backends.cudnn.benchmark = True") == []


def test_a_cell_too_deep_to_parse_and_a_flood_of_flags_cost_the_grader_little():
    deep = "x = 1" + "+1" * 100_000
    flood = "import gc\n" + "\n".join(f"gc.a{i}" for i in range(5000))
    flags = flags_of(deep + "\n\n# next\n") + flags_of(flood)
    assert len(flags) <= MOST_FLAGS + 1 and any("gc" in flag for flag in flags)
