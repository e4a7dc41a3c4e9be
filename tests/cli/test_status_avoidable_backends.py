"""`gpuctl status --backend kubernetes` and `--backend slurm` show the avoidable line as a local job's
status does: priced from the GPU use the operator wrote into the GPUJob's status, "not measured" where
nothing was measured (issue 34)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.kubernetes import client
from orchestrator.backends.slurm import SlurmClusterConfig, commands
from orchestrator.cli import slurm_cmd
from tests.cli.test_kube_jobs_cli import _cli, kubeconfig  # noqa: F401 (the emulator fixture)
from tests.cli.test_status_document import SLURM_DATA

GIB = 2**30
K = ("--backend", "kubernetes", "--namespace", "ml")


def _segment(hours_ago: float, price: float) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {"start": (now - timedelta(hours=hours_ago)).isoformat(), "end": (now - timedelta(hours=hours_ago - 1)).isoformat(),
            "nodes": 1, "gpusPerNode": 1, "gpuType": "A10G", "market": "spot", "nodePriceUsdPerHour": price}  # fmt: skip


USAGE = {"windows": 6, "samples": 360, "model": "NVIDIA A10G", "monitors": 1, "util_mean_pct": 40.0,
         "util_p95_pct": 60.0, "util_max_pct": 80.0, "mem_peak_bytes": 6 * GIB, "mem_total_bytes": 24 * GIB,
         "mem_peak_fraction": 0.25, "sm_activity_mean": 0.6, "idle_gpu_hours": 0.0, "measured_gpu_hours": 1.0}  # fmt: skip


async def _gpujob(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, status: dict[str, Any]
) -> None:
    job = tmp_path / f"{name}.yaml"
    job.write_text(f"name: {name}\nteam: ml\ncommand: train.py\nresources: {{gpu_types: [A10G], nodes: 1}}\n")
    code, _ = await asyncio.to_thread(_cli, capsys, "submit", str(job), *K, "--detach")
    assert code == 0
    await asyncio.to_thread(client.patch_gpujob_status, name, "ml", status)


@pytest.mark.asyncio
async def test_a_gpujobs_measured_gpu_use_is_priced_in_status(
    kubeconfig: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = {"state": "SUCCEEDED", "attempt": 1, "segments": [_segment(3, 2.0)], "gpuUsage": USAGE}
    await _gpujob(tmp_path, capsys, "priced", status)
    code, out = await asyncio.to_thread(_cli, capsys, "status", "priced", *K, "-o", "json")
    found = json.loads(out)["avoidable"]
    assert code == 0 and found["measured"] == ["GPU use"] and found["not_measured"] == ["step timings"]
    fixes = {f["code"]: f for f in found["fixes"]}
    # GPUs busy 40 % over its one measured GPU-hour, 2 USD spent in the last 30 days
    assert fixes["low-utilization"]["month_usd"] == pytest.approx(0.6 * 2.0), found
    assert found["month_spend_usd"] == pytest.approx(2.0, rel=1e-3)
    counted = [f["month_usd"] for f in found["fixes"] if f["counted"] and f["month_usd"] is not None]
    assert found["avoidable_month_usd"] == pytest.approx(max(counted))
    assert found["avoidable_remaining_usd"] == 0  # it ended
    assert fixes["larger-batch"]["counted"] is False and fixes["larger-batch"]["share"] == pytest.approx(0.6)
    code, out = await asyncio.to_thread(_cli, capsys, "status", "priced", *K)
    line = next(s for s in out.splitlines() if s.startswith("avoidable spend"))
    assert "of team ml's last 30 days" in line and "step timings not measured" in line


@pytest.mark.asyncio
async def test_a_gpujob_with_no_gpu_use_is_not_measured(
    kubeconfig: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await _gpujob(
        tmp_path, capsys, "blind", {"state": "SUCCEEDED", "attempt": 1, "segments": [_segment(3, 2.0)]}
    )
    code, out = await asyncio.to_thread(_cli, capsys, "status", "blind", *K)
    assert code == 0 and "avoidable spend: not measured" in out
    code, out = await asyncio.to_thread(_cli, capsys, "status", "blind", *K, "-o", "json")
    found = json.loads(out)["avoidable"]
    assert found["measured"] == [] and found["avoidable_month_usd"] is None


def test_a_slurm_job_asked_directly_is_not_measured(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SLURM keeps neither step timings nor GPU use: the line says so, never zero waste."""
    text = (SLURM_DATA / "squeue-22.05.json").read_text()
    monkeypatch.setattr(commands, "run_slurm", lambda argv: text)
    monkeypatch.setattr(commands, "submitting_user", lambda: (0, "root"))  # the capture's owner
    assert slurm_cmd.status("sj2", SlurmClusterConfig(), "json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert (
        doc["segments"]
        and doc["avoidable"]["measured"] == []
        and doc["avoidable"]["avoidable_month_usd"] is None
    )
    assert slurm_cmd.status("sj2", SlurmClusterConfig(), "table") == 0
    assert "avoidable spend: not measured" in capsys.readouterr().out
