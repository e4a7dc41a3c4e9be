"""Generates h100x8_synthetic.jsonl: SYNTHETIC samples (no GPU was available to record real ones).

8x "NVIDIA H100 80GB HBM3", 1 s ticks for 120 s of a data-parallel training job: 10 s warm-up
(memory ramps, low utilization), steady training at 93-99 % with a short input stall every 15 s,
a 6 s checkpoint pause at 60-65 s (utilization 0), and GPU 5 power-capped (clock-event reason
0x4, lower SM clock) for 20 s. Values follow H100 SXM limits (700 W, 1980 MHz boost).
Run: python tests/data/monitor/generate_h100x8.py > tests/data/monitor/h100x8_synthetic.jsonl
"""

from __future__ import annotations

import json
import random

START = 1763790000.0
TOTAL = 85520809984  # bytes NVML reports for an H100 80GB HBM3
GIB = 2**30


def main() -> None:
    rng = random.Random(20261122)
    uuids = [
        f"GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-"
        f"{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}"
        for _ in range(8)
    ]
    for tick in range(120):
        for gpu in range(8):
            warm = tick < 10
            checkpoint = 60 <= tick < 66
            stall = tick % 15 == 14
            capped = gpu == 5 and 30 <= tick < 50
            if checkpoint:
                util = 0.0
            elif warm:
                util = float(rng.randint(5, 40))
            elif stall:
                util = float(rng.randint(20, 45))
            else:
                util = float(rng.randint(93, 99))
            used = int((4 + min(tick, 10) * 5.0) * GIB + rng.randint(0, 256) * 2**20)
            power = 70 + util / 100 * 600 + rng.uniform(-15, 15)
            clock = 1980 if util > 0 else 1755
            reasons = 0 if util > 0 else 0x1  # idle
            if capped:
                power, clock, reasons = min(power, 500.0), 1620, 0x4
            temp = 33 + util / 100 * 35 + rng.uniform(-1, 1)
            sm = None if tick == 0 else round(min(util / 100 * rng.uniform(0.78, 0.88), 1.0), 4)
            print(
                json.dumps(
                    {
                        "time": START + tick,
                        "gpu": gpu,
                        "uuid": uuids[gpu],
                        "model": "NVIDIA H100 80GB HBM3",
                        "util_pct": util,
                        "mem_used_bytes": used,
                        "mem_total_bytes": TOTAL,
                        "power_w": round(power, 1),
                        "sm_clock_mhz": clock,
                        "temp_c": round(temp),
                        "clock_event_reasons": reasons,
                        "processes": [{"pid": 4100 + gpu, "used_bytes": used - 600 * 2**20}],
                        "gr_engine_active": None if sm is None else round(min(util / 100 * 0.97, 1.0), 4),
                        "sm_activity": sm,
                        "sm_occupancy": None if sm is None else round(sm * 0.45, 4),
                    }
                )
            )


if __name__ == "__main__":
    main()
