"""The USE_GPU toggle (attention_course.device): which device pick_device chooses and what it
tells the student, on Colab (faked by conftest.py) and elsewhere."""

import pytest
import torch

from attention_course.device import pick_device


def test_cpu_when_gpu_not_wanted(capsys):
    assert pick_device(False) == torch.device("cpu")
    assert capsys.readouterr().out == "Using the CPU (USE_GPU is False).\n"


@pytest.mark.usefixtures("gpu")
def test_cuda_when_present(capsys):
    assert pick_device(True) == torch.device("cuda")
    assert "GPU: Tesla T4" in capsys.readouterr().out


@pytest.mark.usefixtures("no_gpu", "colab")
def test_no_gpu_on_colab_says_how_to_get_one(capsys):
    assert pick_device(True) == torch.device("cpu")
    out = capsys.readouterr().out
    assert "No GPU found" in out and "Runtime > Change runtime type" in out


@pytest.mark.usefixtures("no_gpu", "not_colab")
def test_no_gpu_elsewhere_has_no_colab_hint(capsys):
    assert pick_device(True) == torch.device("cpu")
    out = capsys.readouterr().out
    assert "No GPU found" in out and "Runtime" not in out


def test_quiet_prints_nothing(capsys):
    pick_device(False, verbose=False)
    assert capsys.readouterr().out == ""
