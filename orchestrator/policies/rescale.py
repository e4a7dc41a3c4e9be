"""Rescale: run an elastic job on the spot nodes there are (down to ``min``) instead of waiting.

The controller calls :func:`rescale_target` at each tick; the simulator uses the same function and
:func:`relative_throughput` to model N nodes.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from orchestrator.errors import UserError


def check_node_range(min_nodes: int, max_nodes: int) -> None:
    if min_nodes < 1 or max_nodes < min_nodes:
        raise UserError(
            f"bad node range {min_nodes}:{max_nodes}", "give MIN:MAX with 1 <= MIN <= MAX, e.g. 2:4"
        )


def rescale_target(available_nodes: int, min_nodes: int, max_nodes: int, current_nodes: int) -> int:
    """Nodes to run on now: all the market offers up to ``max_nodes``, or 0 (wait / fall back) when it
    offers fewer than ``min_nodes``.

    ``available_nodes`` counts spot nodes the job may hold, including its own running ones.
    ``current_nodes`` is what runs now: the target never exceeds what is available, so a shrink
    forced by preemption is immediate, and growth happens as soon as capacity returns (each change
    costs one re-rendezvous, which is small next to the throughput gained).
    """
    del current_nodes  # growth and shrink both follow capacity; kept in the signature for callers
    return int(rescale_targets(np.array([available_nodes]), min_nodes, max_nodes)[0])


def rescale_targets(available_nodes: NDArray[np.int64], min_nodes: int, max_nodes: int) -> NDArray[np.int64]:
    """:func:`rescale_target` for many jobs at once (the simulator's form)."""
    check_node_range(min_nodes, max_nodes)
    target: NDArray[np.int64] = np.where(
        available_nodes >= min_nodes, np.minimum(available_nodes, max_nodes), 0
    ).astype(np.int64)
    return target


def relative_throughput(nodes: int, max_nodes: int, scaling_efficiency: float = 0.9) -> float:
    """Throughput of ``nodes`` nodes as a fraction of ``max_nodes``' throughput.

    Each doubling of the node count keeps ``scaling_efficiency`` of per-node speed (0.9: 2 nodes run
    1.8x one node).
    """
    if nodes <= 0:
        return 0.0
    if not 0.0 < scaling_efficiency <= 1.0:
        raise UserError(f"scaling efficiency {scaling_efficiency} is out of range", "use a value in (0, 1]")

    def speed(n: int) -> float:
        return float(n * scaling_efficiency ** math.log2(n))

    return speed(nodes) / speed(max_nodes)
