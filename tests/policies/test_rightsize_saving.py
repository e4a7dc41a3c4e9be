"""The right-size recommendation states its saving in USD against staying on the current GPU type, in the
same terms as every other fix, so "move to T4" ranks against "add loader workers" (issue 34, 3)."""

from __future__ import annotations

import pytest

from orchestrator.costs.avoidable import FixShare, JobFixes, price
from orchestrator.policies.rightsize import right_size
from tests.policies.test_sizing import MEASURED, OFFERS


def test_the_pick_states_what_it_saves_against_the_current_type() -> None:
    work = 250.0 * 3600 * 10  # 10 h on one A10G (10 USD), 25 h on one T4 (7.50 USD)
    choice = right_size(MEASURED, work, 30.0, offers=OFFERS, current_gpu_type="A10G")
    assert choice.choice.offer.gpu_type == "T4"
    assert choice.saving is not None
    assert choice.saving.current_cost_usd == pytest.approx(10.0)
    assert choice.saving.usd == pytest.approx(2.5) and choice.saving.share == pytest.approx(0.25)
    assert "saves 2.50 USD (25%) of the remaining work against staying on A10G" in choice.reason
    assert right_size(MEASURED, work, 30.0, offers=OFFERS).saving is None  # no current type given


def test_staying_on_the_pick_saves_nothing() -> None:
    work = 250.0 * 3600 * 10
    choice = right_size(MEASURED, work, 30.0, offers=OFFERS, current_gpu_type="T4")
    assert choice.saving is not None and choice.saving.usd == 0.0
    assert "saves" not in choice.reason


def test_the_saving_ranks_with_the_other_fixes() -> None:
    work = 250.0 * 3600 * 10
    saving = right_size(MEASURED, work, 30.0, offers=OFFERS, current_gpu_type="A10G").saving
    assert saving is not None
    moved = FixShare("right-size", "move to T4", saving.share, saving.basis)
    loader = FixShare("input-bound", "add loader workers", 0.4, "steps wait 40 % on data")
    found = price("j", "t", JobFixes((moved, loader), ("step timings",)), spend_usd=10.0, to_finish_usd=10.0)
    assert [(p.fix.code, p.remaining_usd) for p in found.priced] == [
        ("input-bound", 4.0),
        ("right-size", 2.5),
    ]
