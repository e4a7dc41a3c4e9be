"""Test doubles for code that uses gpuctl, shipped with the library (as httpx ships a mock transport).

- :class:`FakeClock`: time that moves only when told.
- :class:`SimulatedBackend` and :class:`SimScript`: a deterministic cluster with training progress and
  scripted market events (reclaims with a notice, lost nodes, failing training).
- :class:`CrashPlan`, :class:`CrashingStore`, :class:`CrashingBackend`, :class:`ControllerCrash`: the
  controller dies at chosen write→effect boundaries, for crash-safety tests without sleeps.

The NVML fake is ``tests/monitor`` 's for now; a simulated Kubernetes cluster is not here yet.
"""

from orchestrator.testing.backend import SIM_ON_DEMAND, SIM_SPOT, SimScript, SimulatedBackend
from orchestrator.testing.clock import FakeClock
from orchestrator.testing.crashes import ControllerCrash, CrashingBackend, CrashingStore, CrashPlan

__all__ = [
    "SIM_ON_DEMAND",
    "SIM_SPOT",
    "ControllerCrash",
    "CrashPlan",
    "CrashingBackend",
    "CrashingStore",
    "FakeClock",
    "SimScript",
    "SimulatedBackend",
]
