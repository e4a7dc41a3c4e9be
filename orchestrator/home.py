"""The gpuctl home folder: ``$GPUCTL_HOME``, default ``~/.gpuctl``.

It holds the job store, logs and the job folders (whose files may carry secrets from a job's
``env``), so gpuctl creates it readable by its owner only (0700) and its database 0600. A home that
exists already keeps the permissions it has: a home shared by a team is set up by whoever shares it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from orchestrator.errors import PermanentError

HOME_ENV = "GPUCTL_HOME"
HOME_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def home_dir() -> Path:
    """Where the gpuctl home is (it may not exist yet): ``$GPUCTL_HOME`` or ``~/.gpuctl``."""
    return Path(os.environ.get(HOME_ENV) or "~/.gpuctl").expanduser()


def ensure_home(home: Path | None = None) -> Path:
    """The home folder, created with mode 0700 (and missing parents as usual) when it does not exist."""
    home = home or home_dir()
    if not home.is_dir():
        home.parent.mkdir(parents=True, exist_ok=True)
        try:
            home.mkdir(mode=HOME_MODE)
        except FileExistsError:  # created by another process meanwhile: it set the mode
            return home
        home.chmod(HOME_MODE)  # mkdir's mode is filtered by the umask; 0700 is what we mean
    return home


def create_private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (its mode is then left alone)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)


def open_regular_file(path: Path, flags: int, mode: int = 0o666) -> int:
    """``os.open(path, flags, mode)`` of a regular file only (a file descriptor): a symlink planted at
    ``path`` is refused, never followed (``O_NOFOLLOW``), and a FIFO or device neither hangs the
    open (``O_NONBLOCK``) nor is used. Anything but a regular file raises :class:`PermanentError`."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
            raise not_regular(path, "a symbolic link") from None
        if exc.errno == errno.ENXIO:  # a FIFO opened to write with no reader (or a socket)
            raise not_regular(path, "a FIFO or socket") from None
        raise
    kind = stat.S_IFMT(os.fstat(fd).st_mode)
    if kind != stat.S_IFREG:
        os.close(fd)
        raise not_regular(path, _KINDS.get(kind, "not a regular file"))
    os.set_blocking(fd, True)
    return fd


_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder",
          stat.S_IFCHR: "a device", stat.S_IFBLK: "a device", stat.S_IFLNK: "a symbolic link"}  # fmt: skip


def not_regular(path: Path, kind: str) -> PermanentError:
    return PermanentError(
        f"{path} is {kind}, not a regular file: gpuctl does not open it (what is planted there could "
        "redirect its writes or hang it)",
        f"remove it (`rm {path}`) if you did not put it there; gpuctl creates the file it needs",
    )
