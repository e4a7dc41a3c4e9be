"""Checkpoint store: atomic writes, manifest, torn checkpoints, keep K, checksums."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from orchestrator.runtime import SLOW_WRITE_ENV, CheckpointStore, LocalStorage
from orchestrator.runtime.checkpoint import MANIFEST, STATE_FILE, step_dir
from orchestrator.runtime.storage import TEMP_PREFIX, HashingWriter


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


def _age(path: Path, seconds: float) -> None:
    """Make ``path`` and what it holds look untouched for ``seconds``."""
    then = time.time() - seconds
    for item in [path, *path.iterdir()]:
        os.utime(item, (then, then))


def test_prune_removes_stale_torn_folders_but_not_newer_or_fresh_ones(tmp_path: Path) -> None:
    store = CheckpointStore(LocalStorage(tmp_path), keep=1, stale_after_s=600)
    for step, age in ((3, 3600), (5, 10)):  # torn older folders: one long dead, one maybe in progress
        (tmp_path / step_dir(step)).mkdir()
        (tmp_path / step_dir(step) / STATE_FILE).write_bytes(b"partial")
        _age(tmp_path / step_dir(step), age)
    (tmp_path / step_dir(99)).mkdir()
    store.save(10, _state(1.0))
    assert store.steps() == [5, 10, 99]
    assert store.load_latest() is not None and store.load_latest()[0] == 10  # type: ignore[index]


def test_cleanup_never_removes_another_writers_folder_mid_write(tmp_path: Path) -> None:
    """Writer A is still writing step 30 while writer B saves newer steps and prunes to keep=1."""
    slow = LocalStorage(tmp_path)
    work = slow.begin(step_dir(30))

    def half(out: HashingWriter) -> None:
        out.write(b"half of a state")

    slow.write(f"{work}/{STATE_FILE}", half)
    other = CheckpointStore(LocalStorage(tmp_path), keep=1, stale_after_s=600)
    for step in (40, 50):
        other.save(step, _state(float(step)))
    assert (tmp_path / work / STATE_FILE).read_bytes() == b"half of a state"
    _age(tmp_path / work, 3600)  # A died long ago: its work folder is garbage now
    other.save(60, _state(60.0))
    assert not (tmp_path / work).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [step_dir(60)]


def test_write_is_atomic_until_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state is written in a hidden work folder; step-N appears complete, then the root is fsynced."""
    storage = LocalStorage(tmp_path)
    seen: list[list[str]] = []
    synced: list[tuple[Path, list[str]]] = []

    def spy_pause() -> None:
        seen.append(sorted(p.name for p in tmp_path.iterdir()))

    from orchestrator.runtime import storage as storage_module

    real_fsync_dir = storage_module._fsync_dir

    def spy_fsync_dir(path: Path) -> None:
        synced.append((path, sorted(p.name for p in path.iterdir())))
        real_fsync_dir(path)

    monkeypatch.setattr("orchestrator.runtime.storage._slow_write_pause", spy_pause)
    monkeypatch.setattr("orchestrator.runtime.storage._fsync_dir", spy_fsync_dir)
    CheckpointStore(storage).save(7, _state(7.0))
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0].startswith(f"{TEMP_PREFIX}{step_dir(7)}-")
    assert str(os.getpid()) in seen[0][0]
    assert sorted(p.name for p in (tmp_path / step_dir(7)).iterdir()) == [MANIFEST, STATE_FILE]
    assert synced[-1] == (tmp_path, [step_dir(7)])  # the root, after the rename
    assert SLOW_WRITE_ENV.startswith("GPUCTL_TEST_")


class _FullDisk(LocalStorage):
    def write(self, rel: str, fill: object, *, inject_delay: bool = False) -> tuple[str, int]:
        if rel.endswith(MANIFEST):
            raise OSError("disk full")
        return super().write(rel, fill, inject_delay=inject_delay)  # type: ignore[arg-type]


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        CheckpointStore(_FullDisk(tmp_path)).save(3, _state(3.0))
    assert list(tmp_path.iterdir()) == []


def test_saving_a_step_again_replaces_its_folder(tmp_path: Path) -> None:
    store = CheckpointStore(LocalStorage(tmp_path))
    store.save(5, _state(1.0))
    store.save(5, _state(2.0))
    found = store.load_latest()
    assert found is not None and found[0] == 5 and torch.equal(found[1]["w"], _state(2.0)["w"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [step_dir(5)]


def test_keep_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        CheckpointStore(LocalStorage(tmp_path), keep=0)
