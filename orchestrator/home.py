"""The gpuctl home folder: ``$GPUCTL_HOME``, default ``~/.gpuctl``.

It holds the job store, logs and the job folders (whose files may carry secrets from a job's
``env``), so gpuctl creates it readable by its owner only (0700) and its database 0600. A home that
exists already keeps the permissions it has: a home shared by a team is set up by whoever shares it.
"""

from __future__ import annotations

import os
from pathlib import Path

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
