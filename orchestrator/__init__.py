"""gpuctl: run GPU training jobs cheaply and reliably.

Layers (imports only point down; enforced by import-linter, see pyproject.toml):
  cli, dashboard, operators, testing  entry points (and the test kit, which may use anything)
  controller               reconcile (pure) -> engine.apply (pure) -> hosts: the driver (SQLite,
                           local and SLURM) and the Kubernetes operator (GPUJob status)
  policies, backends, costs, notify   the three backends are independent of each other
  catalog, state
  spec | runtime | monitor runtime: imported by training scripts; monitor: the sidecar; neither
                           imports anything above errors/contract (a training image needs no controller)
  userfiles                the one reader of input files and YAML (limits, one-line errors)
  errors, contract, extras, home
"""

__version__ = "0.1.0"
