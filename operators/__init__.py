"""Deployable controllers: Kubernetes operator, SLURM login-node daemon."""
