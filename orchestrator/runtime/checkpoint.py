"""Checkpoint folders with a manifest: write atomically, find the newest complete one, keep the last K.

Layout under the storage root::

    step-00000120/state.pt        torch.save of the training state (rank 0)
    step-00000120/manifest.json   {"step": 120, "files": {"state.pt": {"sha256", "bytes"}}, ...}

The manifest is written last, so a folder without one is torn and ignored. A folder whose manifest
does not parse, or whose files are missing or fail their checksum, is also ignored and an older
complete checkpoint is used instead.

Trust: the checksum detects damage, not tampering (whoever can write the folder can write a matching
manifest). So ``state.pt`` holds only tensors and plain values (dict, list, tuple, str, int, float,
bool, None, ...) and is loaded with ``torch.load(weights_only=True)``, which builds no other
objects and so runs no code from the file. :func:`check_plain` refuses other values before a
save; a file holding them is refused on load (:class:`UnsafeCheckpointError`).
"""

from __future__ import annotations

import collections
import json
import pickle
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from orchestrator.errors import PermanentError, UserError
from orchestrator.runtime.storage import TEMP_PREFIX, HashingWriter, Storage, sha256_of_file

MANIFEST = "manifest.json"
STATE_FILE = "state.pt"
FORMAT_VERSION = 2
"""2: state.pt loads with weights_only=True. 1 (older gpuctl): pickled numpy RNG state."""
STALE_AFTER_S = 3600.0
"""A folder without manifest untouched this long has lost its writer; cleanup may remove it."""
CONVERT_COMMAND = "python -m orchestrator.runtime.convert_checkpoint"
_STEP_DIR = re.compile(r"^step-(\d{8,})$")


def step_dir(step: int) -> str:
    return f"step-{step:08d}"


_PLAIN_LEAVES = (type(None), bool, int, float, complex, str, bytes, bytearray, torch.dtype, torch.device)
_PLAIN_MAPPINGS = (dict, collections.OrderedDict)
_PLAIN_SEQUENCES = (list, tuple, set, torch.Size)
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def unsafe_value(value: Any, where: str = "state") -> str | None:
    """Where the first value that ``torch.load(weights_only=True)`` would refuse sits, else None."""
    kind = type(value)
    if kind in _PLAIN_LEAVES or kind in _PLAIN_TENSORS:
        return None
    if kind in _PLAIN_MAPPINGS:
        for key, item in value.items():
            found = unsafe_value(key, f"{where} key {key!r}") or unsafe_value(item, f"{where}[{key!r}]")
            if found:
                return found
        return None
    if kind in _PLAIN_SEQUENCES:
        for index, item in enumerate(value):
            found = unsafe_value(item, f"{where}[{index}]")
            if found:
                return found
        return None
    return f"{where} is a {kind.__module__}.{kind.__qualname__}"


def check_plain(state: dict[str, Any]) -> None:
    """Raise a UserError naming the first value a checkpoint may not hold."""
    found = unsafe_value(state)
    if found:
        raise UserError(
            f"cannot checkpoint: {found}; checkpoints hold only tensors and plain Python values "
            "(dict, list, tuple, set, str, int, float, bool, None), so that loading one runs no code",
            "store a plain form instead (float(x) for a numpy scalar, torch.from_numpy(a) for an "
            "array, obj.state_dict() or a dict of fields for an object)",
        )


class UnsafeCheckpointError(PermanentError):
    """A checkpoint file holds objects gpuctl will not unpickle (loading them could run code)."""


@dataclass(frozen=True)
class Manifest:
    step: int
    files: dict[str, dict[str, Any]]
    created: float
    meta: dict[str, Any]
    format: int = FORMAT_VERSION

    def to_json(self) -> str:
        body = {
            "format": self.format,
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
        return cls(
            int(data["step"]),
            data["files"],
            float(data.get("created", 0)),
            data.get("meta", {}),
            int(data.get("format", 1)),
        )


class CheckpointStore:
    """Save and load whole checkpoints through a :class:`Storage`."""

    def __init__(self, storage: Storage, keep: int = 3, stale_after_s: float = STALE_AFTER_S) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.storage = storage
        self.keep = keep
        self.stale_after_s = stale_after_s

    def save(self, step: int, state: dict[str, Any], meta: dict[str, Any] | None = None) -> Manifest:
        """Write ``state`` for ``step``, then its manifest, publish the folder, prune old checkpoints."""
        check_plain(state)
        manifest = self.write(step, state, meta)
        self.prune()
        return manifest

    def write(self, step: int, state: dict[str, Any], meta: dict[str, Any] | None = None) -> Manifest:
        """Write one checkpoint folder (no checks, no pruning)."""
        folder = step_dir(step)
        work = self.storage.begin(folder)
        try:

            def fill(out: HashingWriter) -> None:
                torch.save(state, out)  # type: ignore[arg-type]

            digest, size = self.storage.write(f"{work}/{STATE_FILE}", fill, inject_delay=True)
            manifest = Manifest(
                step, {STATE_FILE: {"sha256": digest, "bytes": size}}, time.time(), meta or {}
            )
            text = manifest.to_json().encode()

            def fill_manifest(out: HashingWriter) -> None:
                out.write(text)

            self.storage.write(f"{work}/{MANIFEST}", fill_manifest)
            self.storage.commit(work, folder)
        except BaseException:
            self.storage.abort(work)
            raise
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

    @staticmethod
    def file_matches(path: Path, manifest: Manifest, name: str) -> bool:
        entry = manifest.files.get(name) or {}
        return path.stat().st_size == entry.get("bytes") and sha256_of_file(path) == entry.get("sha256")

    def load_latest(self) -> tuple[int, dict[str, Any]] | None:
        """(step, state) of the newest checkpoint whose manifest and checksums are good, else None.

        Raises :class:`UnsafeCheckpointError` when that checkpoint holds more than tensors and
        plain values (a planted file, or one written by gpuctl before checkpoint format 2)."""
        for step in reversed(self.steps()):
            manifest = self.manifest(step)
            rel = f"{step_dir(step)}/{STATE_FILE}"
            if manifest is None or STATE_FILE not in manifest.files or not self.storage.exists(rel):
                continue
            with self.storage.local_copy(rel) as path:
                if not self.file_matches(path, manifest, STATE_FILE):
                    continue
                return step, self._load_plain(path, rel, manifest)
        return None

    def _load_plain(self, path: Path, rel: str, manifest: Manifest) -> dict[str, Any]:
        where = self.storage.url_of(rel)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            raise _unsafe_checkpoint_error(where, self.storage.url_of(""), manifest.format, exc) from None
        except Exception as exc:
            raise PermanentError(
                f"checkpoint {where} passes its checksum but cannot be read: {exc}",
                f"delete its folder {self.storage.url_of(step_dir(manifest.step))} to resume from the "
                "checkpoint before it",
            ) from exc
        if not isinstance(state, dict):
            raise PermanentError(
                f"checkpoint {where} holds a {type(state).__name__}, not a dict of training state",
                f"delete its folder {self.storage.url_of(step_dir(manifest.step))}",
            )
        return state

    def prune(self) -> None:
        """Keep the newest ``keep`` complete checkpoints and remove what is safely dead.

        Removed: complete checkpoints older than the kept ones (nobody writes a complete folder),
        and folders without manifest (step folders older than the newest complete one, and
        hidden work folders) that nothing has touched for ``stale_after_s``: a younger one may be
        another writer's checkpoint in progress."""
        complete = self.complete_steps()
        if not complete:
            return
        kept = set(complete[-self.keep :])
        newest = complete[-1]
        done = set(complete)
        for step in self.steps():
            if step in kept or step > newest:
                continue
            if step in done or self._stale(step_dir(step)):
                self.storage.remove_dir(step_dir(step))
        for name in self.storage.list_dirs():
            if name.startswith(TEMP_PREFIX) and self._stale(name):
                self.storage.remove_dir(name)

    def _stale(self, name: str) -> bool:
        age = self.storage.age_s(name)  # None: gone, empty or unknown; leave it alone
        return age is not None and age >= self.stale_after_s


_UNSUPPORTED = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")


def _unsafe_checkpoint_error(
    where: str, location: str, format_version: int, exc: Exception
) -> UnsafeCheckpointError:
    found = _UNSUPPORTED.search(str(exc))
    what = f" (such as {found.group(1)})" if found else ""
    message = (
        f"refusing to load checkpoint {where}: it holds Python objects other than tensors and plain "
        f"values{what}, and unpickling them can run any code. Its checksum proves only that the file "
        "is undamaged, not who wrote it"
    )
    if format_version < FORMAT_VERSION:
        fix = (
            f"it was written by an older gpuctl (checkpoint format {format_version}). If you trust "
            f"everyone who can write to {location}, convert it once with `{CONVERT_COMMAND} "
            f"{location} --i-trust-this-file`; otherwise delete it"
        )
    else:
        fix = (
            f"do not use this file unless you know who wrote it: delete its folder, or the whole of "
            f"{location}, and check who can write there"
        )
    return UnsafeCheckpointError(message, fix)
