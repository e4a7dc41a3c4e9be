"""The operator's kopf handlers, imported once with a short reconcile interval for the emulator tests
(kopf's timer interval is fixed when the handlers module is imported). Import ``handlers`` from here."""

from __future__ import annotations

import os

_saved_interval = os.environ.get("GPUCTL_RECONCILE_INTERVAL_S")
os.environ["GPUCTL_RECONCILE_INTERVAL_S"] = "0.3"  # read when the handlers module is imported

from operators.kubernetes import handlers  # noqa: E402  (importing registers the handlers)

if _saved_interval is None:
    os.environ.pop("GPUCTL_RECONCILE_INTERVAL_S")
else:
    os.environ["GPUCTL_RECONCILE_INTERVAL_S"] = _saved_interval

__all__ = ["handlers"]
