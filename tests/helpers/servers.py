"""Helpers for tests that start a server on this machine."""

import socket

TOKEN = "attention-course-browser-test"  # the token of every JupyterLab server the tests start


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
