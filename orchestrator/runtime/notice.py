"""Preemption notices: a signal (GPUCTL_NOTICE_SIGNAL, default SIGTERM, and SIGUSR1) or a file."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from types import FrameType

from orchestrator.contract import DEFAULT_NOTICE_SIGNAL, ENV_NOTICE_FILE, ENV_NOTICE_SIGNAL
from orchestrator.errors import UserError


def parse_signal(name: str | None) -> signal.Signals:
    """``"SIGTERM"``, ``"TERM"`` or ``"15"`` to a signal; the contract default when empty."""
    if not name:
        return DEFAULT_NOTICE_SIGNAL
    text = name.strip().upper()
    try:
        if text.isdigit():
            return signal.Signals(int(text))
        return signal.Signals[text if text.startswith("SIG") else f"SIG{text}"]
    except (KeyError, ValueError) as exc:
        raise UserError(
            f"{ENV_NOTICE_SIGNAL}={name!r} is not a signal", "use a name such as SIGTERM or SIGUSR1"
        ) from exc


class NoticeWatcher:
    """Remembers that a notice arrived; :meth:`pending` is cheap enough to call every step."""

    def __init__(self, notice_signal: signal.Signals | None = None, notice_file: str | Path | None = None):
        self.signals = sorted(
            {notice_signal or parse_signal(os.environ.get(ENV_NOTICE_SIGNAL)), signal.SIGUSR1}
        )
        file_env = os.environ.get(ENV_NOTICE_FILE)
        self.notice_file = Path(notice_file) if notice_file else (Path(file_env) if file_env else None)
        self._event = threading.Event()
        self.received: signal.Signals | None = None
        self._previous: dict[signal.Signals, object] = {}

    def install(self) -> None:
        """Install the handlers (main thread only; elsewhere only the notice file is watched)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum)
        self._event.set()

    def describe(self) -> str:
        """How the notice came: ``SIGTERM``, ``notice file PATH``, or ``another rank's notice``."""
        if self.received is not None:
            return self.received.name
        if self.notice_file is not None and self.notice_file.exists():
            return f"notice file {self.notice_file}"
        return "another rank's notice" if not self._event.is_set() else "asked by the training script"

    def trigger(self) -> None:
        """Act as if a notice arrived (tests, or a training script's own reasons)."""
        self._event.set()

    def pending(self) -> bool:
        if not self._event.is_set() and self.notice_file is not None and self.notice_file.exists():
            self._event.set()
        return self._event.is_set()
