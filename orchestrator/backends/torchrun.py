"""What a backend tells torchrun besides its command line.

An elastic job's torchrun agent restarts its workers in place (``--max-restarts``) when a node is lost
or joins. Since torch 2.5 the c10d rendezvous lends its own TCPStore server to the workers by default,
and ``init_process_group`` then writes its keys (each rank's gloo or NCCL address) into that same
store on every restart, unprefixed. A restarted rank can read the address a rank of the previous
world left there, before the new rank overwrites it: it connects to a dead port ("Gloo connectFullMesh
failed ... Connection refused") and the new world fails, to be tried again (each retry is a race
again), or it waits for peers that never come and hangs: a SLURM survivor of a lost node takes minutes
to train again, and growing a live world hangs (pytorch/pytorch issue 135712).
With the store not shared, each rendezvous round gives the workers a store of their own, with no
keys of an earlier world in it.

A job that runs with ``--max-restarts=0`` (a Kubernetes pod's torchrun: a new agent per attempt) has
no restarts and needs none of this.
"""

from __future__ import annotations

RESTARTING_AGENT_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
"""The environment of a torchrun agent that restarts its workers: a fresh store for every world."""

AGENT_SIGNAL_EXCEPTION = "torch.distributed.elastic.multiprocessing.api.SignalException"
"""What a torchrun agent raises when it gets SIGTERM, SIGINT, SIGHUP or SIGQUIT (the notice, a cancel):
it stops its workers with that signal, then ends with this exception's traceback, 26 lines of the
agent's own stack and nothing of the training. ``gpuctl logs`` shows such a traceback as one line
(:mod:`orchestrator.cli.log_files`); ``--raw`` shows it as written."""
