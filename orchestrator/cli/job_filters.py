"""`gpuctl list` filters (``--state``, ``--user``, ``--team``, ``--since``) and its watch mode (``-w``).

A filter keeps a job when every given option matches: ``--state`` names one or more states
(comma-separated or repeated; ``active`` stands for every state that has not ended), ``--user`` and
``--team`` are exact names, ``--since`` a duration back from now (``2h``, ``1d``) or an ISO 8601 time
(a time without zone is UTC). ``--watch [SECONDS]`` prints the list again every SECONDS (default 2)
until Ctrl-C; on a terminal each round replaces the last.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from orchestrator.errors import UserError
from orchestrator.spec import parse_duration
from orchestrator.state.status import JobStatus
from orchestrator.terminal import terminal_text

ACTIVE = "active"
DEFAULT_WATCH_S = 2.0
CLEAR = "\x1b[H\x1b[2J"
"""Cursor home and clear screen: a watched list replaces the last one on a terminal."""


def add_list_filters(p: argparse.ArgumentParser) -> None:
    states = ", ".join(s.value for s in JobStatus)
    p.add_argument("--state", action="append", default=[], metavar="STATE[,STATE]",
                   help=f"only jobs in these states ({states}, or {ACTIVE}: not ended); repeatable")  # fmt: skip
    p.add_argument("--user", help="only this user's jobs")
    p.add_argument("--team", help="only this team's jobs")
    p.add_argument("--since", metavar="WHEN",
                   help="only jobs submitted since WHEN: a duration back from now ('2h', '1d') or an ISO 8601 time")  # fmt: skip
    p.add_argument("-w", "--watch", nargs="?", type=_seconds, const=DEFAULT_WATCH_S, metavar="SECONDS",
                   help=f"print the list again every SECONDS (default {DEFAULT_WATCH_S:g}) until Ctrl-C")  # fmt: skip


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.1 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"{text} s: give 0.1 to 86400 seconds")
    return value


@dataclass(frozen=True)
class JobFilter:
    states: frozenset[JobStatus] | None = None
    user: str | None = None
    team: str | None = None
    since: datetime | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, now: datetime | None = None) -> JobFilter:
        return cls(_states(args.state), args.user, args.team, _since(args.since, now or datetime.now(UTC)))

    def keeps(self, status: JobStatus, user: str | None, team: str | None, submitted_at: datetime) -> bool:
        return (
            (self.states is None or status in self.states)
            and (self.user is None or user == self.user)
            and (self.team is None or team == self.team)
            and (self.since is None or submitted_at >= self.since)
        )


def _states(values: list[str]) -> frozenset[JobStatus] | None:
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if not names:
        return None
    out: set[JobStatus] = set()
    for name in names:
        if name.lower() == ACTIVE:
            out.update(s for s in JobStatus if not s.terminal)
        elif name.upper() in JobStatus.__members__:
            out.add(JobStatus[name.upper()])
        else:
            raise UserError(
                terminal_text(f"--state {name!r} is not a job state"),
                f"use one or more of {', '.join(s.value for s in JobStatus)} or {ACTIVE}, comma-separated",
            )
    return frozenset(out)


def _since(text: str | None, now: datetime) -> datetime | None:
    if text is None:
        return None
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UserError(
            terminal_text(f"--since {text!r} is neither a duration nor a time"),
            "give a duration back from now ('90m', '2h', '1d') or an ISO 8601 time ('2026-11-26T08:00')",
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def watch(show: Callable[[], int], every_s: float | None) -> int:
    """``show()`` once, or with ``every_s`` again and again until Ctrl-C (exit code 0)."""
    if every_s is None:
        return show()
    try:
        while True:
            if sys.stdout.isatty():
                sys.stdout.write(CLEAR)
            print(f"every {every_s:g}s, {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC (Ctrl-C to stop)")
            show()
            sys.stdout.flush()
            time.sleep(every_s)
    except KeyboardInterrupt:
        return 0
