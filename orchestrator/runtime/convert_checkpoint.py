"""Convert checkpoints written by an older gpuctl (format 1) so that they load safely.

Format 1 stored numpy's RNG state as a pickled numpy array, so its ``state.pt`` only loads with
``torch.load(weights_only=False)``, which runs whatever code the file names. This one-off command
loads such a file that way *because you say you trust it*, turns numpy values into tensors and
plain numbers, and writes it back in format 2 (which loads with ``weights_only=True``)::

    python -m orchestrator.runtime.convert_checkpoint LOCATION --i-trust-this-file [--step N]

LOCATION is the checkpoint location (a folder or ``s3://bucket/prefix``). Run it while the job is
stopped. Checkpoints that already load safely are left as they are.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from typing import Any

import numpy as np
import torch

from orchestrator.errors import GpuctlError, UserError
from orchestrator.runtime.checkpoint import STATE_FILE, CheckpointStore, check_plain, step_dir
from orchestrator.runtime.rng import numpy_state_to_plain
from orchestrator.runtime.storage import open_storage


def plain_state(state: Any) -> Any:
    """``state`` with numpy RNG states, arrays and scalars replaced by tensors and Python numbers."""
    if isinstance(state, dict) and isinstance(state.get("rng"), list):
        rngs = [
            {**r, "numpy": numpy_state_to_plain(r["numpy"])} if isinstance(r, dict) and "numpy" in r else r
            for r in state["rng"]
        ]
        state = {**state, "rng": rngs}
    return _numpy_to_plain(state)


def _numpy_to_plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, np.generic):
        return value.item()
    if type(value) is dict:
        return {k: _numpy_to_plain(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_numpy_to_plain(v) for v in value)
    return value


def convert(location: str, step: int | None = None) -> list[str]:
    """Convert the complete checkpoints at ``location`` (or only ``step``); one line per checkpoint."""
    store = CheckpointStore(open_storage(location))
    steps = [step] if step is not None else store.complete_steps()
    report = []
    for number in steps:
        manifest = store.manifest(number)
        rel = f"{step_dir(number)}/{STATE_FILE}"
        if manifest is None or not store.storage.exists(rel):
            raise UserError(
                f"{store.storage.url_of(step_dir(number))} is not a complete checkpoint",
                "give a step that `ls` shows with a manifest.json",
            )
        with store.storage.local_copy(rel) as path:
            if not store.file_matches(path, manifest, STATE_FILE):
                report.append(f"{step_dir(number)}: skipped, its checksum does not match its manifest")
                continue
            try:
                torch.load(path, map_location="cpu", weights_only=True)
                report.append(f"{step_dir(number)}: already loads safely, left as it is")
                continue
            except pickle.UnpicklingError:
                state = torch.load(path, map_location="cpu", weights_only=False)  # trusted by the user
        state = plain_state(state)
        check_plain(state)
        store.write(number, state, meta={**manifest.meta, "converted_from_format": manifest.format})
        report.append(f"{step_dir(number)}: converted")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("location", help="checkpoint location: a folder or s3://bucket/prefix")
    parser.add_argument("--step", type=int, help="only this step (default: every complete checkpoint)")
    parser.add_argument(
        "--i-trust-this-file",
        action="store_true",
        dest="trusted",
        help="required: loading an old checkpoint runs any code it names",
    )
    args = parser.parse_args(argv)
    try:
        if not args.trusted:
            raise UserError(
                "converting loads the old checkpoint with pickle, which runs any code the file names",
                "only if you trust everyone who could write to it, add --i-trust-this-file",
            )
        for line in convert(args.location, args.step):
            print(line)
    except GpuctlError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
