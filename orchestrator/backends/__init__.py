"""Side effects of running jobs: local processes, SLURM, Kubernetes."""
