"""`gpuctl submit`'s Ctrl-C counter: counted, never raised while it follows the job; once it was
interrupted, later Ctrl-Cs change nothing, including while Python shuts down (which resets a Python
handler to the default action: the process would end by the signal, exit status -2, not 130)."""

from __future__ import annotations

import signal

from orchestrator.cli.jobs_cmd import _Interrupts


def test_interrupts_are_counted_and_then_ignored_until_the_process_ends() -> None:
    before, hangup = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGHUP)
    try:
        with _Interrupts() as interrupts:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
            assert interrupts.count == 2
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
        signal.signal(signal.SIGHUP, hangup)


def test_an_uninterrupted_submit_gives_the_handlers_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    with _Interrupts() as interrupts:
        assert signal.getsignal(signal.SIGINT) != before
    assert interrupts.count == 0 and signal.getsignal(signal.SIGINT) is before
