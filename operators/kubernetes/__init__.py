"""The gpuctl Kubernetes operator: reconciles GPUJob resources into pods (run with ``kopf run``)."""
