"""The one exception hierarchy of gpuctl.

Every error a user can cause or meet says *what happened* and *how to fix it*::

    GpuctlError                 root: never raised directly
    ├── UserError               bad input from the user: exit code 2, no traceback
    │   ├── SpecError           a job spec field is wrong (names the field path and YAML line)
    │   ├── NotFoundError       a job, file or resource the user named does not exist
    │   └── MissingExtra        an optional dependency is not installed: names the pip extra
    ├── TemporaryError          worth retrying later (capacity, a cluster manager not answering)
    ├── PermanentError          the operation cannot succeed as asked (no GPU type fits the budget)
    │   └── EnvironmentProblem  the machine lacks something (no NVML, no sbatch): says what to install
    └── InternalError           a bug in gpuctl (an illegal state transition); please report it

Third-party errors are mapped to these with ``raise ... from exc`` at the boundary where they occur.
"""

from __future__ import annotations


class GpuctlError(Exception):
    """Root of all gpuctl errors. ``str(err)`` is the full user-facing message."""

    exit_code = 1

    def __init__(self, what: str, fix: str | None = None) -> None:
        self.what = what
        self.fix = fix
        super().__init__(self.message)

    @property
    def message(self) -> str:
        if self.fix:
            return f"{self.what}\n  To fix: {self.fix}"
        return self.what


class UserError(GpuctlError):
    """The user's input is wrong; the message says which part and how to correct it."""

    exit_code = 2


class SpecError(UserError):
    """One or more job spec fields are invalid.

    ``problems`` holds one line per field: ``path (line N): what is wrong. To fix: ...``.
    """

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: invalid job spec ({len(problems)} problem(s)):\n{lines}")


class NotFoundError(UserError):
    """Something the user named (a job, a file) does not exist."""


class MissingExtra(UserError):
    """A command needs an optional dependency (a pip extra of gpuctl) that is not installed."""

    def __init__(self, package: str, extra: str, needed_for: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{needed_for} needs the Python package '{package}', which is not installed",
            f"pip install 'gpuctl[{extra}]'",
        )


class TemporaryError(GpuctlError):
    """A condition that may clear by itself; callers retry with a delay."""

    def __init__(self, what: str, fix: str | None = None, retry_after_s: float = 5.0) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(what, fix)


class PermanentError(GpuctlError):
    """The request cannot succeed as made; retrying will not help."""


class EnvironmentProblem(PermanentError):
    """A required tool or driver is missing on this machine."""

    exit_code = 3


class InternalError(GpuctlError):
    """A gpuctl bug, such as an illegal job state transition."""

    def __init__(self, what: str) -> None:
        super().__init__(what, "this is a bug in gpuctl; please report it with `gpuctl events JOB` output")
