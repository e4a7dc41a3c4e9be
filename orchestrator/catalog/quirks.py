"""Rows of the built-in price data that its own README marks as wrong, set aside in one place.

The shared data README (copied in ``data/SOURCE.md``) lists the snapshot's known faults. Each is decided
here, once, for everything that reads the built-in catalog (placement, ``gpuctl gpus``, cost
estimates, the simulator):

- a size that does not exist (Azure ``Standard_ND96isr_H100_v5`` listed with 12 GPUs; the real size
  has 8): the row is left out, since its per-GPU price and its node size are both wrong;
- a spot price equal to (or above) the on-demand price (Azure's H100 rows): not a spot price; the
  spot price is left out and the row stays an on-demand offer;
- prices the README calls suspect without saying which way they are wrong (GCP us-central1 H100 and
  A100-80GB, 2x other regions): kept, and named in a note.

``gpuctl gpus`` prints a note for each (:func:`notes`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from orchestrator.catalog.offers import Offer


@dataclass(frozen=True)
class WrongRow:
    """A row the README marks as wrong: ``cloud`` and ``instance_type`` name it."""

    cloud: str
    instance_type: str
    problem: str


@dataclass(frozen=True)
class SuspectPrices:
    """Prices the README calls suspect: kept, with a note."""

    cloud: str
    region: str
    gpu_types: tuple[str, ...]
    problem: str


WRONG_ROWS = (WrongRow("azure", "Standard_ND96isr_H100_v5", "listed with 12 GPUs; the real size has 8"),)
SUSPECT = (SuspectPrices("gcp", "us-central1", ("H100", "A100-80GB"), "2x the prices of other regions"),)
SPOT_NOT_BELOW = "it equals the on-demand price, so it is no spot price"


@dataclass(frozen=True)
class SetAside:
    """What was left out of one offer, and why (``what``: ``row`` or ``spot price``)."""

    cloud: str
    instance_type: str
    region: str
    gpu_type: str
    what: str
    problem: str

    def line(self) -> str:
        name = f"{self.cloud} {self.instance_type} ({self.gpu_type}, {self.region})"
        left = "left out" if self.what == "row" else "spot price left out"
        return f"{name} {left}: {self.problem}"


def trusted(offers: Iterable[Offer]) -> tuple[list[Offer], list[SetAside]]:
    """The offers as the catalog uses them, and what was set aside (one entry per instance type and
    region)."""
    kept: list[Offer] = []
    aside: dict[tuple[str, str, str, str], SetAside] = {}
    for offer in offers:
        wrong = next(
            (w for w in WRONG_ROWS if (w.cloud, w.instance_type) == (offer.cloud, offer.instance_type)), None
        )
        if wrong is not None:
            _note(aside, offer, "row", wrong.problem)
            continue
        spot, od = offer.spot_usd_per_hour, offer.on_demand_usd_per_hour
        if spot is not None and od is not None and spot >= od:
            _note(aside, offer, "spot price", SPOT_NOT_BELOW)
            offer = replace(offer, spot_usd_per_hour=None)
        kept.append(offer)
    return kept, list(aside.values())


def _note(aside: dict[tuple[str, str, str, str], SetAside], offer: Offer, what: str, problem: str) -> None:
    key = (offer.cloud, offer.instance_type, offer.region, what)
    aside.setdefault(
        key, SetAside(offer.cloud, offer.instance_type, offer.region, offer.gpu_type, what, problem)
    )


def notes(set_aside: Iterable[SetAside], gpu: str | None = None, cloud: str | None = None) -> list[str]:
    """The lines ``gpuctl gpus`` prints under its table (of ``gpu`` and ``cloud`` only, when given)."""

    def wanted(gpu_types: Iterable[str], of_cloud: str) -> bool:
        in_gpu = gpu is None or gpu.lower() in {g.lower() for g in gpu_types}
        return in_gpu and (cloud is None or cloud == of_cloud)

    out = [
        f"{s.line()} (the price data's README marks it wrong)"
        for s in set_aside
        if wanted([s.gpu_type], s.cloud)
    ]
    out += [
        f"{s.cloud} {s.region} {', '.join(s.gpu_types)} prices kept, but suspect: {s.problem}"
        for s in SUSPECT
        if wanted(s.gpu_types, s.cloud)
    ]
    return out
