"""A real torchrun agent restarting its workers, with the environment backends give elastic agents.

The restarted world's rank 0 starts late on purpose, so its peer looks for it in the store first.
With torch's shared rendezvous store, the peer found the address rank 0 of the previous world had
left there and never formed the new world (the run hung until killed); this is what kept a SLURM
survivor of a lost node from training on (orchestrator/backends/torchrun.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.backends.torchrun import RESTARTING_AGENT_ENV

pytestmark = pytest.mark.slow

WORKER = """
import os, sys, time
import torch
import torch.distributed as dist

restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
if restart == 1 and rank == 0:
    time.sleep(3)  # the restarted peer reads the store before this rank writes its address
dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
dist.destroy_process_group()
if restart == 0:
    sys.exit(1)  # the first world fails: the agent restarts both workers
with open(f"rank-{rank}.txt", "w") as out:  # a file each: the ranks' prints can share a line
    out.write(f"restart {restart} sum {total.item():g}")
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_restarted_workers_form_a_new_world(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
         "--max-restarts=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
         "--monitor-interval=0.5", str(script)],
        env={**os.environ, "OMP_NUM_THREADS": "1", **RESTARTING_AGENT_ENV},
        capture_output=True, text=True, timeout=150, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = [(tmp_path / f"rank-{rank}.txt").read_text() for rank in (0, 1)]
    assert results == ["restart 1 sum 2", "restart 1 sum 2"], done.stdout[-3000:] + done.stderr[-3000:]
