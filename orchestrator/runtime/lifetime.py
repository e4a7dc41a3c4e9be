"""Die with the torchrun agent.

torchrun starts every worker in its own session, so killing the agent (or its process group, as a
node loss does in the local backend) leaves the workers running as orphans that keep training and
writing checkpoints next to a restarted job. Under torchrun the runtime asks Linux to SIGKILL the
worker when its parent exits (``PR_SET_PDEATHSIG``), which is what losing the node would do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> bool:
    """Arrange SIGKILL on parent exit (Linux); True when armed. Exits at once if already orphaned."""
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent == 1 or os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ
