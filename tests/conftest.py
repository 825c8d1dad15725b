"""Shared test setup: a headless matplotlib backend and seeded random inputs."""

import matplotlib

matplotlib.use("Agg")  # before anything imports pyplot: tests never open a window

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture
def gen() -> torch.Generator:
    """A CPU random generator with a fixed seed, so every test sees the same inputs."""
    return torch.Generator().manual_seed(0)
