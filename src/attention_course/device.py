"""Choosing where tensors live: a GPU when one is asked for and present, else the CPU, on one
thread.

Used by every lesson's setup cell (the ``USE_GPU`` toggle). The lessons' models and tensors are
small: on a CPU, a second thread saves about a sixth of the time when the machine is quiet and
costs several times the time when other programs keep the cores busy, as a browser or a video
call does, because the threads wait on each other.
"""

import importlib.util

import torch

COLAB_GPU_HINT = "On Colab: Runtime > Change runtime type > T4 GPU, then run the notebook again."
CPU_THREADS = 1


def in_colab() -> bool:
    """True when running inside Google Colab."""
    try:
        return importlib.util.find_spec("google.colab") is not None
    except ModuleNotFoundError:  # no ``google`` package at all
        return False


def pick_device(use_gpu: bool = True, verbose: bool = True,
                cpu_threads: int | None = CPU_THREADS) -> torch.device:
    """CUDA (or Apple MPS) if ``use_gpu`` and one is present, otherwise the CPU.

    On the CPU, torch then computes on ``cpu_threads`` threads (None: torch's default, one per
    core). Prints one line saying what was chosen and, on Colab without a GPU, how to get one.
    """
    device, message = _choose(use_gpu)
    if device.type == "cpu" and cpu_threads is not None:
        torch.set_num_threads(cpu_threads)
        message += f" Torch computes on {cpu_threads} thread{'s' * (cpu_threads > 1)}."
    if verbose:
        print(message)
    return device


def _choose(use_gpu: bool) -> tuple[torch.device, str]:
    if not use_gpu:
        return torch.device("cpu"), "Using the CPU (USE_GPU is False)."
    if torch.cuda.is_available():
        return torch.device("cuda"), f"Using the GPU: {torch.cuda.get_device_name(0)}."
    if torch.backends.mps.is_available():
        return torch.device("mps"), "Using the Apple GPU (MPS)."
    message = "No GPU found, using the CPU (every lesson runs fine on it)."
    return torch.device("cpu"), f"{message} {COLAB_GPU_HINT}" if in_colab() else message
