"""A lock that a thread of a test holds while the reader starts (tests/hostile/test_hung_mounts.py):
a call made in a fork of that process would find it held forever."""

from __future__ import annotations

import os
import threading

LOCK = threading.Lock()


def pid_under_lock() -> int:
    """This process's pid, once it holds LOCK."""
    with LOCK:
        return os.getpid()
