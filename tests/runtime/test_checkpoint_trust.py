"""Checkpoints hold only tensors and plain values: a planted pickle is refused and runs nothing."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from orchestrator.errors import UserError
from orchestrator.runtime import CheckpointStore, LocalStorage, Runtime, capture_rng, restore_rng
from orchestrator.runtime.checkpoint import MANIFEST, UnsafeCheckpointError, step_dir, unsafe_value
from orchestrator.runtime.convert_checkpoint import main as convert_main


class _Payload:
    """Unpickling this creates a marker file: a stand-in for any code an attacker wants run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def test_a_planted_pickle_with_a_correct_manifest_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    store = CheckpointStore(LocalStorage(tmp_path / "ck"))
    store.save(10, {"model": {"w": torch.ones(2)}})
    # whoever can write the location can write a checkpoint with a matching sha256 manifest
    store.write(20, {"model": {"w": torch.ones(2)}, "extra": _Payload(marker)})
    with pytest.raises(UnsafeCheckpointError) as caught:
        store.load_latest()
    assert not marker.exists()
    message = str(caught.value)
    assert str(tmp_path / "ck" / step_dir(20) / "state.pt") in message
    assert "(such as io.open)" in message and "To fix:" in message and "convert" not in message


def test_runtime_resume_refuses_a_planted_checkpoint(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    CheckpointStore(LocalStorage(tmp_path / "ck")).write(5, {"model": _Payload(marker)})
    rt = Runtime(nn.Linear(2, 1), storage=str(tmp_path / "ck"), every_steps=1)
    try:
        with pytest.raises(UnsafeCheckpointError):
            rt.resume()
    finally:
        rt.notice.uninstall()
    assert not marker.exists()


def test_checkpointing_a_value_that_would_not_load_safely_is_refused_up_front(tmp_path: Path) -> None:
    rt = Runtime(nn.Linear(2, 1), storage=str(tmp_path / "ck"), every_steps=1)
    rt.extra["best"] = np.float64(0.5)
    try:
        with pytest.raises(UserError, match=r"state\['extra'\]\['best'\] is a numpy.float64"):
            rt.checkpoint(1)
    finally:
        rt.notice.uninstall()
    assert list((tmp_path / "ck").iterdir()) == []


def _scheduled(kind: str) -> tuple[torch.optim.Optimizer, Any]:
    model = nn.Linear(3, 2)
    if kind == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    schedulers: dict[str, Callable[[], Any]] = {
        "lambda": lambda: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.9**s),
        "onecycle": lambda: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10),
        "cosine": lambda: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10),
        "plateau": lambda: torch.optim.lr_scheduler.ReduceLROnPlateau(opt),
        "sequential": lambda: torch.optim.lr_scheduler.SequentialLR(
            opt,
            [torch.optim.lr_scheduler.LinearLR(opt), torch.optim.lr_scheduler.ExponentialLR(opt, 0.9)],
            milestones=[2],
        ),
    }
    sched = schedulers["cosine" if kind in ("sgd", "adamw") else kind]()
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    if kind == "plateau":
        sched.step(1.0)  # the metric it watches
    else:
        sched.step()
    return opt, sched


@pytest.mark.parametrize("kind", ["sgd", "adamw", "lambda", "onecycle", "plateau", "sequential"])
def test_common_optimizer_and_scheduler_states_are_plain(tmp_path: Path, kind: str) -> None:
    opt, sched = _scheduled(kind)
    state = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "rng": [capture_rng()]}
    assert unsafe_value(state) is None
    store = CheckpointStore(LocalStorage(tmp_path))
    store.save(1, state)
    loaded = (store.load_latest() or (0, {}))[1]
    assert loaded["scheduler"] == state["scheduler"]
    assert loaded["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]


def _old_gpuctl_checkpoint(location: Path, step: int) -> None:
    """What gpuctl wrote before format 2: numpy's RNG state as a pickled array, manifest format 1."""
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    store = CheckpointStore(LocalStorage(location))
    store.write(step, {"step": step, "model": {"w": torch.arange(3.0)}, "rng": [rng], "extra": {}})
    manifest_path = location / step_dir(step) / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["format"] = 1
    manifest_path.write_text(json.dumps(manifest))


def _draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_an_old_checkpoint_is_refused_with_how_to_convert_and_converts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    location = tmp_path / "ck"
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    _old_gpuctl_checkpoint(location, 40)
    expected = _draws()
    store = CheckpointStore(LocalStorage(location))
    with pytest.raises(UnsafeCheckpointError) as caught:
        store.load_latest()
    message = str(caught.value)
    assert "numpy" in message and "older gpuctl (checkpoint format 1)" in message
    assert f"python -m orchestrator.runtime.convert_checkpoint {location} --i-trust-this-file" in message

    assert convert_main([str(location)]) == 2  # refuses without the explicit trust flag
    assert "--i-trust-this-file" in capsys.readouterr().err
    with pytest.raises(UnsafeCheckpointError):
        store.load_latest()

    assert convert_main([str(location), "--i-trust-this-file"]) == 0
    assert "step-00000040: converted" in capsys.readouterr().out
    step, state = store.load_latest() or (0, {})
    assert step == 40 and torch.equal(state["model"]["w"], torch.arange(3.0))
    assert json.loads((location / step_dir(40) / MANIFEST).read_text())["format"] == 2
    restore_rng(state["rng"][0])
    assert _draws() == expected
    assert convert_main([str(location), "--i-trust-this-file"]) == 0
    assert "already loads safely" in capsys.readouterr().out
