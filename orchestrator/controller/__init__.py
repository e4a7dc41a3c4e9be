"""The reconcile loop: a pure decision step and a driver that applies its actions."""
