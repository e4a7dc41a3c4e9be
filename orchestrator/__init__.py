"""gpuctl: run GPU training jobs cheaply and reliably.

Layers (imports only point down; enforced by import-linter, see pyproject.toml):
  cli, operators           entry points
  controller               reconcile loop (pure) + driver that applies actions
  policies, backends, costs
  catalog, state
  spec, errors, contract, home
Separate: runtime (imported by training scripts) and monitor (the sidecar).
"""

__version__ = "0.1.0"
