"""The c10d rendezvous store of one local attempt, in a process of its own.

torchrun agents all connect to it as clients (``is_host=false``), so losing any node, the first one
included, never takes the rendezvous down with it: the survivors of an elastic job re-rendezvous.

    python -m orchestrator.backends.local.rendezvous PORT PID_FILE
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import timedelta


def main(argv: list[str]) -> int:
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    port, pid_file = int(argv[0]), argv[1]
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(hours=24))
    with open(pid_file + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    del store
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
