"""Every backend the driver hosts (and the test kit's simulated one) offers exactly the methods of the
Backend protocol, same signatures."""

from __future__ import annotations

import inspect

import pytest

from orchestrator.backends.base import Backend
from orchestrator.backends.local.backend import LocalBackend
from orchestrator.backends.slurm.backend import SlurmBackend
from orchestrator.testing import SimulatedBackend

PROTOCOL_METHODS = ["launch", "observe", "own_placements", "spot_capacity", "tick", "stop", "log_paths"]


# Kubernetes has no Backend object: the operator hosts the engine itself (pods are its effects).
@pytest.mark.parametrize("backend", [LocalBackend, SlurmBackend, SimulatedBackend])
@pytest.mark.parametrize("method", PROTOCOL_METHODS)
def test_backend_matches_the_protocol(backend: type, method: str) -> None:
    want = list(inspect.signature(getattr(Backend, method)).parameters)
    got = list(inspect.signature(getattr(backend, method)).parameters)
    assert got == want, f"{backend.__name__}.{method}{got} differs from Backend.{method}{want}"


def test_protocol_lists_every_method() -> None:
    declared = [
        name for name, _ in inspect.getmembers(Backend, inspect.isfunction) if not name.startswith("_")
    ]
    assert sorted(declared) == sorted(PROTOCOL_METHODS)
