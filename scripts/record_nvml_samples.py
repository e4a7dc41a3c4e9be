"""Record real NVML samples in the monitor's replay format, idle and under a matrix-product load.

Run on a machine with an NVIDIA GPU (torch with CUDA for the load phase):

    python3 scripts/record_nvml_samples.py --idle 10 --load 20 --out samples.jsonl

It writes one JSON line per GPU per second (``GpuSample.to_dict()``: the same lines that
``gpuctl monitor --source replay FILE`` reads), first ``--idle`` seconds with the GPU idle, then
``--load`` seconds while a bf16 matrix product runs on GPU 0 in a background thread, then ``--idle``
seconds again. It prints one line per phase with the mean utilization, memory and power it saw, so
the recording shows that the monitor tells a busy GPU from an idle one. The monitor's replay test
data under tests/data/monitor/ can be made this way.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path

from orchestrator.monitor.nvml_source import NvmlSource
from orchestrator.monitor.samples import GpuSample


def _load(stop: threading.Event) -> None:
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while not stop.is_set():
        for _ in range(20):
            a = (a @ b).clamp_(-1, 1)
        torch.cuda.synchronize()


def _record(source: NvmlSource, seconds: float, phase: str, out: list[dict[str, object]]) -> None:
    samples: list[GpuSample] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        tick = source.sample()
        samples.extend(tick)
        out.extend({**s.to_dict(), "phase": phase} for s in tick)
        time.sleep(1.0)
    gpu0 = [s for s in samples if s.gpu == 0]
    if gpu0:
        print(
            f"{phase:>5}: {len(gpu0)} samples of GPU 0 ({gpu0[0].model}): "
            f"util {statistics.mean(s.util_pct for s in gpu0):.0f} %, "
            f"memory used {statistics.mean(s.mem_used_bytes for s in gpu0) / 2**30:.1f} GiB "
            f"of {gpu0[0].mem_total_bytes / 2**30:.0f}, "
            f"power {statistics.mean(s.power_w for s in gpu0):.0f} W, "
            f"SM activity {[s.sm_activity for s in gpu0][-3:]}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=10.0, help="seconds idle before and after the load")
    parser.add_argument("--load", type=float, default=20.0, help="seconds under a matrix-product load")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines file to write")
    args = parser.parse_args()

    source = NvmlSource()
    rows: list[dict[str, object]] = []
    _record(source, args.idle, "idle", rows)
    stop = threading.Event()
    worker = threading.Thread(target=_load, args=(stop,), daemon=True)
    worker.start()
    time.sleep(2.0)  # let the load reach the GPU before sampling it
    _record(source, args.load, "load", rows)
    stop.set()
    worker.join()
    _record(source, args.idle, "after", rows)
    source.close()
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(f"wrote {len(rows)} samples to {args.out}")


if __name__ == "__main__":
    main()
