"""Checkpoint folders with a manifest: write atomically, find the newest complete one, keep the last K.

Layout under the storage root::

    step-00000120/state.pt        torch.save of the training state (rank 0)
    step-00000120/manifest.json   {"step": 120, "files": {"state.pt": {"sha256", "bytes"}}, ...}

The manifest is written last, so a folder without one is torn and ignored. A folder whose manifest
does not parse, or whose files are missing or fail their checksum, is also ignored and an older
complete checkpoint is used instead.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from orchestrator.runtime.storage import HashingWriter, Storage, sha256_of_file

MANIFEST = "manifest.json"
STATE_FILE = "state.pt"
FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step-(\d{8,})$")


def step_dir(step: int) -> str:
    return f"step-{step:08d}"


@dataclass(frozen=True)
class Manifest:
    step: int
    files: dict[str, dict[str, Any]]
    created: float
    meta: dict[str, Any]

    def to_json(self) -> str:
        body = {
            "format": FORMAT_VERSION,
            "step": self.step,
            "files": self.files,
            "created": self.created,
            "meta": self.meta,
        }
        return json.dumps(body, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
            raise ValueError("manifest has no files table")
        return cls(int(data["step"]), data["files"], float(data.get("created", 0)), data.get("meta", {}))


class CheckpointStore:
    """Save and load whole checkpoints through a :class:`Storage`."""

    def __init__(self, storage: Storage, keep: int = 3) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.storage = storage
        self.keep = keep

    def save(self, step: int, state: dict[str, Any], meta: dict[str, Any] | None = None) -> Manifest:
        """Write ``state`` for ``step``, then its manifest, then prune old checkpoints."""
        folder = step_dir(step)

        def fill(out: HashingWriter) -> None:
            torch.save(state, out)  # type: ignore[arg-type]

        digest, size = self.storage.write(f"{folder}/{STATE_FILE}", fill, inject_delay=True)
        manifest = Manifest(step, {STATE_FILE: {"sha256": digest, "bytes": size}}, time.time(), meta or {})
        text = manifest.to_json().encode()

        def fill_manifest(out: HashingWriter) -> None:
            out.write(text)

        self.storage.write(f"{folder}/{MANIFEST}", fill_manifest)
        self.prune()
        return manifest

    def steps(self) -> list[int]:
        """Steps that have a checkpoint folder (complete or not), oldest first."""
        found = []
        for name in self.storage.list_dirs():
            match = _STEP_DIR.match(name)
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def manifest(self, step: int) -> Manifest | None:
        """The parsed manifest of ``step``, or None when it is missing or unreadable."""
        rel = f"{step_dir(step)}/{MANIFEST}"
        if not self.storage.exists(rel):
            return None
        try:
            manifest = Manifest.from_json(self.storage.read_bytes(rel).decode())
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return None
        return manifest if manifest.step == step else None

    def complete_steps(self) -> list[int]:
        """Steps with a manifest (files are verified only on load), oldest first."""
        return [s for s in self.steps() if self.manifest(s) is not None]

    def verified_file(self, step: int, manifest: Manifest, name: str) -> Path | None:
        entry = manifest.files.get(name)
        rel = f"{step_dir(step)}/{name}"
        if entry is None or not self.storage.exists(rel):
            return None
        path = self.storage.local_copy(rel)
        if path.stat().st_size != entry.get("bytes") or sha256_of_file(path) != entry.get("sha256"):
            return None
        return path

    def load_latest(self) -> tuple[int, dict[str, Any]] | None:
        """(step, state) of the newest checkpoint whose manifest and checksums are good, else None."""
        for step in reversed(self.steps()):
            manifest = self.manifest(step)
            if manifest is None:
                continue
            path = self.verified_file(step, manifest, STATE_FILE)
            if path is None:
                continue
            state = torch.load(path, map_location="cpu", weights_only=False)
            return step, state
        return None

    def prune(self) -> None:
        """Keep the newest ``keep`` complete checkpoints; drop older ones and older torn folders."""
        complete = self.complete_steps()
        if not complete:
            return
        kept = set(complete[-self.keep :])
        newest = max(kept)
        for step in self.steps():
            if step not in kept and step < newest:
                self.storage.remove_dir(step_dir(step))
