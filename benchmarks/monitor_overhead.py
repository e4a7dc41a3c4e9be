"""CPU cost of the monitor sidecar per sample tick (8 GPUs), from replayed samples.

Measures process CPU time (time.process_time) of each stage over many ticks and prints a table with
the share of one core at a 1 s sampling interval. NVML calls themselves are not measured (no GPU
here); parsing the replay line stands in for reading the values.

    python benchmarks/monitor_overhead.py [--ticks 3000] [--file tests/data/monitor/h100x8_synthetic.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry, generate_latest

from orchestrator.monitor.metrics import GpuCollector
from orchestrator.monitor.samples import GpuSample
from orchestrator.monitor.summary import SummaryWriter, WindowAggregator

DEFAULT_FILE = Path(__file__).resolve().parents[1] / "tests" / "data" / "monitor" / "h100x8_synthetic.jsonl"
SCRAPE_EVERY_S = 15.0  # Prometheus' usual scrape interval
WINDOW_S = 60.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ticks", type=int, default=3000)
    parser.add_argument("--file", default=str(DEFAULT_FILE))
    args = parser.parse_args()

    lines = [line for line in Path(args.file).read_text().splitlines() if line.strip()]
    gpus = len({json.loads(line)["gpu"] for line in lines})
    raw_ticks = [lines[i : i + gpus] for i in range(0, len(lines), gpus)]

    collector = GpuCollector(job="bench", hostname="bench-host", extra_labels={})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    aggregator = WindowAggregator(window_s=WINDOW_S, interval_s=1.0)
    spent = {"read": 0.0, "aggregate": 0.0, "metrics": 0.0, "scrape": 0.0, "summary": 0.0}
    scrapes = windows = 0
    with tempfile.TemporaryDirectory() as folder:
        writer = SummaryWriter(os.path.join(folder, "summary.jsonl"))
        for tick_number in range(args.ticks):
            raw = raw_ticks[tick_number % len(raw_ticks)]
            t0 = time.process_time()
            samples = [GpuSample.from_dict({**json.loads(line), "time": float(tick_number)}) for line in raw]
            t1 = time.process_time()
            finished = aggregator.add(samples)
            t2 = time.process_time()
            collector.update(samples, aggregator.idle_seconds_total)
            t3 = time.process_time()
            spent["read"] += t1 - t0
            spent["aggregate"] += t2 - t1
            spent["metrics"] += t3 - t2
            if finished is not None:
                t4 = time.process_time()
                writer.write(finished)
                spent["summary"] += time.process_time() - t4
                windows += 1
            if tick_number % int(SCRAPE_EVERY_S) == 0:
                t5 = time.process_time()
                generate_latest(registry)
                spent["scrape"] += time.process_time() - t5
                scrapes += 1

    per_tick = {name: value / args.ticks for name, value in spent.items()}
    print(f"monitor overhead: {gpus} GPUs, {args.ticks} ticks, {scrapes} scrapes, {windows} windows")
    print(f"{'stage':<44} {'CPU us/tick':>12} {'% of a core at 1 s':>20}")
    labels = {
        "read": "read+parse samples (stands in for NVML)",
        "aggregate": "window aggregation",
        "metrics": "metrics update",
        "scrape": f"/metrics render (1 scrape per {SCRAPE_EVERY_S:g} s)",
        "summary": f"summary write (1 per {WINDOW_S:g} s window)",
    }
    for name, seconds in per_tick.items():
        print(f"{labels[name]:<44} {seconds * 1e6:>12.1f} {seconds * 100:>19.4f}%")
    total = sum(per_tick.values())
    print(f"{'total':<44} {total * 1e6:>12.1f} {total * 100:>19.4f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
