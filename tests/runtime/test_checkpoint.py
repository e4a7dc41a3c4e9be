"""Checkpoint store: atomic writes, manifest, torn checkpoints, keep K, checksums."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from orchestrator.runtime import SLOW_WRITE_ENV, CheckpointStore, LocalStorage
from orchestrator.runtime.checkpoint import MANIFEST, STATE_FILE, step_dir


def _state(value: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((4, 4), value)}


def test_save_writes_state_then_manifest_with_checksum(tmp_path: Path) -> None:
    store = CheckpointStore(LocalStorage(tmp_path), keep=3)
    manifest = store.save(5, _state(1.0))
    folder = tmp_path / step_dir(5)
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, STATE_FILE]
    on_disk = json.loads((folder / MANIFEST).read_text())
    assert on_disk["step"] == 5
    import hashlib

    assert (
        on_disk["files"][STATE_FILE]["sha256"]
        == hashlib.sha256((folder / STATE_FILE).read_bytes()).hexdigest()
    )
    assert manifest.files == on_disk["files"]
    step, state = store.load_latest() or (None, None)
    assert step == 5
    assert torch.equal(state["w"], _state(1.0)["w"])


def test_empty_store_loads_nothing(tmp_path: Path) -> None:
    assert CheckpointStore(LocalStorage(tmp_path)).load_latest() is None


def test_keeps_last_k(tmp_path: Path) -> None:
    store = CheckpointStore(LocalStorage(tmp_path), keep=2)
    for step in (10, 20, 30, 40):
        store.save(step, _state(step))
    assert store.steps() == [30, 40]


@pytest.mark.parametrize("damage", ["no_manifest", "bad_checksum", "truncated", "missing_state", "bad_json"])
def test_torn_newest_is_ignored(tmp_path: Path, damage: str) -> None:
    store = CheckpointStore(LocalStorage(tmp_path), keep=5)
    store.save(10, _state(10.0))
    store.save(20, _state(20.0))
    folder = tmp_path / step_dir(20)
    if damage == "no_manifest":
        (folder / MANIFEST).unlink()
    elif damage == "bad_checksum":
        data = bytearray((folder / STATE_FILE).read_bytes())
        data[-1] ^= 0xFF
        (folder / STATE_FILE).write_bytes(bytes(data))
    elif damage == "truncated":
        data = (folder / STATE_FILE).read_bytes()
        (folder / STATE_FILE).write_bytes(data[: len(data) // 2])
    elif damage == "missing_state":
        (folder / STATE_FILE).unlink()
    else:
        (folder / MANIFEST).write_text("{not json")
    step, state = store.load_latest() or (None, None)
    assert step == 10
    assert torch.equal(state["w"], _state(10.0)["w"])


def test_prune_removes_old_torn_folders_but_not_newer_ones(tmp_path: Path) -> None:
    store = CheckpointStore(LocalStorage(tmp_path), keep=1)
    (tmp_path / step_dir(5)).mkdir()
    (tmp_path / step_dir(5) / ".tmp-state.pt-1").write_bytes(b"partial")
    (tmp_path / step_dir(99)).mkdir()
    store.save(10, _state(1.0))
    assert store.steps() == [10, 99]
    assert store.load_latest() is not None and store.load_latest()[0] == 10  # type: ignore[index]


def test_write_is_atomic_until_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the state file is being written only a temp file exists; nothing is loadable."""
    storage = LocalStorage(tmp_path)
    seen: list[list[str]] = []

    def spy_pause() -> None:
        seen.append(sorted(p.name for p in (tmp_path / step_dir(7)).iterdir()))

    monkeypatch.setattr("orchestrator.runtime.storage._slow_write_pause", spy_pause)
    CheckpointStore(storage).save(7, _state(7.0))
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0].startswith(".tmp-")
    assert SLOW_WRITE_ENV.startswith("GPUCTL_TEST_")


def test_keep_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        CheckpointStore(LocalStorage(tmp_path), keep=0)
