"""What the delivery tests share: a secret resolver for targets that name no secret, and a wait."""

from __future__ import annotations

import time
from collections.abc import Callable

from orchestrator.notify import Notification
from orchestrator.spec.env import FromEnv, SecretRef


def no_secrets(ref: SecretRef | FromEnv, n: Notification) -> str:
    raise AssertionError("no secret expected")


def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait until ``condition`` holds (failing after ``timeout`` seconds)."""
    ends = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < ends
        time.sleep(0.01)
