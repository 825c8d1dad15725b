"""The USE_GPU toggle: which device pick_device chooses and what it tells the student."""

import sys

import pytest
import torch

from attention_course.device import pick_device


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def google_modules():
    return {name: module for name, module in sys.modules.items()
            if name == "google" or name.startswith("google.")}


@pytest.fixture
def colab(tmp_path, monkeypatch):
    """A stand-in ``google.colab`` package on sys.path, as Colab has."""
    package = tmp_path / "google" / "colab"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Stand-in for Google Colab."""\n')
    saved = google_modules()
    for name in saved:
        del sys.modules[name]
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in google_modules():
        del sys.modules[name]
    sys.modules.update(saved)


@pytest.fixture
def not_colab(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", None)  # find_spec then says: not there


def test_cpu_when_gpu_not_wanted(capsys):
    assert pick_device(False) == torch.device("cpu")
    assert capsys.readouterr().out == "Using the CPU (USE_GPU is False).\n"


def test_cuda_when_present(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "Tesla T4")
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
