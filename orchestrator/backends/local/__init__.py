"""Local backend: torchrun agents as processes on this machine, with a simulated spot market."""
