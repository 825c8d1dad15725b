"""The USE_GPU toggle (attention_course.device): which device pick_device chooses and what it
tells the student, on Colab (faked by conftest.py) and elsewhere."""

import pytest
import torch

from attention_course.device import pick_device


@pytest.fixture
def threads():
    """torch's thread count, as it was before the test."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("threads")
def test_cpu_when_gpu_not_wanted_on_one_thread(capsys):
    torch.set_num_threads(2)
    assert pick_device(False) == torch.device("cpu")
    assert torch.get_num_threads() == 1
    assert capsys.readouterr().out == (
        "Using the CPU (USE_GPU is False). Torch computes on 1 thread.\n")


@pytest.mark.usefixtures("threads")
def test_cpu_threads_none_leaves_torchs_choice(capsys):
    torch.set_num_threads(2)
    pick_device(False, cpu_threads=None)
    assert torch.get_num_threads() == 2
    assert capsys.readouterr().out == "Using the CPU (USE_GPU is False).\n"


@pytest.mark.usefixtures("gpu", "threads")
def test_cuda_when_present_leaves_the_threads(capsys):
    torch.set_num_threads(2)
    assert pick_device(True) == torch.device("cuda")
    assert torch.get_num_threads() == 2
    assert "GPU: Tesla T4" in capsys.readouterr().out


@pytest.mark.usefixtures("no_gpu", "colab", "threads")
def test_no_gpu_on_colab_says_how_to_get_one(capsys):
    assert pick_device(True) == torch.device("cpu")
    out = capsys.readouterr().out
    assert "No GPU found" in out and "Runtime > Change runtime type" in out


@pytest.mark.usefixtures("no_gpu", "not_colab", "threads")
def test_no_gpu_elsewhere_has_no_colab_hint(capsys):
    assert pick_device(True) == torch.device("cpu")
    out = capsys.readouterr().out
    assert "No GPU found" in out and "Runtime" not in out


@pytest.mark.usefixtures("threads")
def test_quiet_prints_nothing(capsys):
    pick_device(False, verbose=False)
    assert capsys.readouterr().out == ""
