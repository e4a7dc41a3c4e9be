"""The fixtures of this folder's emulator tests (tests/operators/kubernetes/operator_cluster.py):
``cluster``, the real operator on the simulated cluster; ``ledger``, its ledger database."""

from tests.operators.kubernetes.operator_cluster import cluster_fixture, ledger_fixture

__all__ = ["cluster_fixture", "ledger_fixture"]
