"""Test doubles for code that uses gpuctl, shipped with the library (as httpx ships a mock transport).

- :class:`FakeClock`: time that moves only when told.
- :class:`SimulatedBackend` and :class:`SimScript`: a deterministic cluster with training progress and
  scripted market events (reclaims with a notice, lost nodes, failing training).
- :class:`CrashPlan`, :class:`CrashingStore`, :class:`CrashingBackend`, :class:`ControllerCrash`: the
  controller dies at chosen write→effect boundaries, for crash-safety tests without sleeps.
- :class:`FakeNvml`, :class:`FakeGpu`: the part of pynvml the GPU monitor calls, with GPUs whose
  readings a test sets.
- :mod:`orchestrator.testing.states`: jobs in the store in states the engine writes (``drive`` applies
  real actions with the engine and saves them as a controller tick does).
- :class:`~orchestrator.testing.kube_cluster.SimulatedKubeCluster` (and its API server,
  :class:`~orchestrator.testing.kube_api.KubeApi`): a Kubernetes cluster on kmock with GPU nodes that
  follow a spot trace, a scheduler and spot reclaims, for the operator. It needs the ``testing`` extra
  (kmock, kopf, kubernetes), so it is imported on first use: ``from orchestrator.testing import
  SimulatedKubeCluster`` without it says which extra to install.

docs/testing.md shows how to write a test with each.
"""

import importlib
from typing import Any

from orchestrator.testing.backend import SIM_ON_DEMAND, SIM_SPOT, SimScript, SimulatedBackend
from orchestrator.testing.clock import FakeClock
from orchestrator.testing.crashes import ControllerCrash, CrashingBackend, CrashingStore, CrashPlan
from orchestrator.testing.nvml import FakeGpu, FakeNvml, FakeNVMLError

_KUBE = {"KubeApi": "kube_api", "FakePodLogs": "pod_logs", "NodeShape": "kube_cluster",
         "SimulatedKubeCluster": "kube_cluster"}  # fmt: skip
"""Names of the kmock-backed part, imported when first asked for (they need the ``testing`` extra; not
in ``__all__``, so that ``import *`` works in a base install). Import them from their modules for types."""


def __getattr__(name: str) -> Any:
    module = _KUBE.get(name)
    if module is None:
        raise AttributeError(f"module 'orchestrator.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"orchestrator.testing.{module}"), name)


__all__ = [
    "SIM_ON_DEMAND",
    "SIM_SPOT",
    "ControllerCrash",
    "CrashPlan",
    "CrashingBackend",
    "CrashingStore",
    "FakeClock",
    "FakeGpu",
    "FakeNVMLError",
    "FakeNvml",
    "SimScript",
    "SimulatedBackend",
]
