"""Right-size: the GPU type and count that finish the work by the deadline at the lowest cost.

Input is what was measured on each GPU type (a short profiling run or an earlier attempt): per-GPU
throughput, peak memory per GPU, utilization. Only measured types are considered: throughput is not
guessed across GPU generations. Prices come from the catalog's offers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.catalog.offers import MarketKind, Offer, find_offers
from orchestrator.errors import PermanentError

MEMORY_HEADROOM = 0.9
"""Use at most this fraction of a GPU's memory (fragmentation, allocator caches)."""


@dataclass(frozen=True)
class GpuMeasurement:
    """Recorded on ``gpu_type``: work units (samples, tokens, steps) per second per GPU, peak memory
    per GPU in GiB and mean GPU utilization in [0, 1]; ``None`` where the monitor measured nothing
    (the memory check is then skipped, and the reason says so)."""

    gpu_type: str
    units_per_second_per_gpu: float
    peak_memory_gib: float | None
    utilization: float | None


@dataclass(frozen=True)
class SizeOption:
    offer: Offer
    nodes: int
    gpus: int
    hours: float
    cost_usd: float


@dataclass(frozen=True)
class RightSizeSaving:
    """What the pick saves against staying on the current GPU type, for the same remaining work, in the
    USD terms of every other fix (:mod:`orchestrator.costs.avoidable`)."""

    current_gpu_type: str
    current_cost_usd: float
    """The cheapest option on the current GPU type that meets the deadline."""
    choice_cost_usd: float

    @property
    def usd(self) -> float:
        return max(0.0, self.current_cost_usd - self.choice_cost_usd)

    @property
    def share(self) -> float:
        """The share of the remaining work's cost saved (0 to 1)."""
        return self.usd / self.current_cost_usd if self.current_cost_usd > 0 else 0.0

    @property
    def basis(self) -> str:
        return (
            f"the same work costs {self.choice_cost_usd:.2f} USD at the measured throughput on the pick, "
            f"{self.current_cost_usd:.2f} USD on {self.current_gpu_type}"
        )


@dataclass(frozen=True)
class RightSizeChoice:
    choice: SizeOption
    reason: str
    considered: tuple[SizeOption, ...]
    saving: RightSizeSaving | None = None
    """Against ``current_gpu_type`` (None when not given, or no option on it meets the deadline)."""


def saving_against(
    choice: SizeOption, options: Sequence[SizeOption], current_gpu_type: str
) -> RightSizeSaving | None:
    """What ``choice`` saves against the cheapest of ``options`` on ``current_gpu_type``."""
    same = [o for o in options if o.offer.gpu_type.lower() == current_gpu_type.lower()]
    if not same:
        return None
    current = min(same, key=lambda o: o.cost_usd)
    return RightSizeSaving(current.offer.gpu_type, current.cost_usd, choice.cost_usd)


def _throughput(m: GpuMeasurement, gpus: int, scaling_efficiency: float) -> float:
    return float(m.units_per_second_per_gpu * gpus * scaling_efficiency ** math.log2(gpus))


def right_size(
    measurements: Sequence[GpuMeasurement],
    work_units: float,
    deadline_h: float,
    *,
    market: MarketKind = MarketKind.ON_DEMAND,
    max_nodes: int = 1,
    scaling_efficiency: float = 0.9,
    offers: Iterable[Offer] | None = None,
    current_gpu_type: str | None = None,
) -> RightSizeChoice:
    """Cheapest (GPU type, instance, node count) whose memory fits and that meets the deadline; with
    ``current_gpu_type``, what that saves against staying on it (in the reason too)."""
    pool = list(offers) if offers is not None else None
    options: list[SizeOption] = []
    ruled_out: list[str] = []
    for m in measurements:
        found = [o for o in find_offers(m.gpu_type, offers=pool) if o.price(market) is not None]
        if not found:
            ruled_out.append(f"{m.gpu_type}: no {market} offer in the catalog")
            continue
        if m.peak_memory_gib is not None and m.peak_memory_gib > found[0].gpu_memory_gib * MEMORY_HEADROOM:
            ruled_out.append(
                f"{m.gpu_type}: peak memory {m.peak_memory_gib:g} GiB does not fit in "
                f"{MEMORY_HEADROOM:.0%} of {found[0].gpu_memory_gib:g} GiB"
            )
            continue
        fits_type = False
        for offer in found:
            price = offer.price(market)
            assert price is not None
            for nodes in range(1, max_nodes + 1):
                gpus = offer.gpu_count * nodes
                hours = work_units / _throughput(m, gpus, scaling_efficiency) / 3600.0
                if hours <= deadline_h:
                    fits_type = True
                    options.append(SizeOption(offer, nodes, gpus, hours, hours * price * nodes))
        if not fits_type:
            fastest = work_units / _throughput(
                m, max(o.gpu_count for o in found) * max_nodes, scaling_efficiency
            )
            ruled_out.append(
                f"{m.gpu_type}: even the largest size needs {fastest / 3600.0:.1f} h > {deadline_h:g} h"
            )
    if not options:
        raise PermanentError(
            f"no measured GPU type finishes the work within {deadline_h:g} h: " + "; ".join(ruled_out),
            "allow more nodes, a later deadline, or measure another GPU type",
        )
    options.sort(key=lambda o: (o.cost_usd, o.hours, o.offer.instance_type))
    best = options[0]
    measured = {m.gpu_type: m for m in measurements}[best.offer.gpu_type]
    util = measured.utilization
    reason = (
        f"{best.offer.gpu_type} x{best.gpus} ({best.nodes} x {best.offer.instance_type}, "
        f"{best.offer.zone}, {market}): {best.hours:.1f} h <= {deadline_h:g} h deadline "
        f"for {best.cost_usd:.2f} USD, the lowest cost that fits"
    )
    other = next((o for o in options if o.offer.gpu_type != best.offer.gpu_type), None)
    if other is not None:
        reason += (
            f"; next other type {other.offer.gpu_type} x{other.gpus} would cost {other.cost_usd:.2f} USD"
        )
    if util is not None and util < 0.5:
        reason += f"; measured utilization is only {util:.0%}: the input pipeline may be the bottleneck"
    if measured.peak_memory_gib is None:
        reason += "; GPU memory was not measured (no monitor data), so it was not checked"
    saving = saving_against(best, options, current_gpu_type) if current_gpu_type else None
    if saving is not None and saving.usd > 0:
        reason += (
            f"; saves {saving.usd:.2f} USD ({saving.share:.0%}) of the remaining work against "
            f"staying on {saving.current_gpu_type}"
        )
    if ruled_out:
        reason += "; ruled out: " + "; ".join(ruled_out)
    return RightSizeChoice(best, reason, tuple(options), saving)
