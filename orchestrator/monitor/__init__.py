"""GPU monitor sidecar: NVML samples -> dcgm-exporter-compatible /metrics, window summaries,
preemption notices, and diagnosis rules. Imports only orchestrator.contract and orchestrator.errors
from gpuctl (nvidia-ml-py is imported lazily, only for live sampling)."""
