"""A real, throwaway PostgreSQL server for tests and benchmarks.

``PostgresServer`` runs Debian's PostgreSQL server binaries (``initdb``, ``pg_ctl``) on a data folder
in a new temporary directory, listening only on 127.0.0.1 on a free port (and on a unix socket in the
same directory), with ``trust`` authentication, which is safe because nothing outside this machine's
loopback can reach it. Durability is switched off (``fsync=off``) and memory kept small: the server
starts in about a second and holds nothing worth keeping. Running as root (CI does), the server runs as
the ``postgres`` system user, which owns the temporary directory, since PostgreSQL refuses to run as root.

Use it as a context manager, or ``start()`` / ``stop()``; ``new_database()`` gives a fresh, empty
database's SQLAlchemy URL::

    with PostgresServer() as server:
        url = server.new_database()      # postgresql+psycopg://postgres@127.0.0.1:PORT/gpuctl_1_ab12cd
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

import psycopg
from psycopg import sql

from orchestrator.errors import EnvironmentProblem

SERVER_USER = "postgres"  # the system user the server runs as when we are root
SUPERUSER = "postgres"  # the database superuser initdb creates
DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"  # where Debian's `postgresql` puts the server
_START_TIMEOUT_S = 60
_TUNING = (
    # Nothing here must survive a crash: no durability, little memory, quick checkpoints.
    "fsync = off",
    "synchronous_commit = off",
    "full_page_writes = off",
    "shared_buffers = 16MB",
    "max_connections = 200",
    "max_wal_size = 256MB",
    "log_min_messages = warning",
)


def find_server_bin() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``: from PATH, else Debian's newest version."""
    on_path = [shutil.which(name) for name in ("initdb", "pg_ctl")]
    if all(on_path):
        return Path(os.path.realpath(str(on_path[1]))).parent
    candidates = sorted(
        glob.glob(DEBIAN_BIN_GLOB),
        key=lambda folder: _version_key(Path(folder).parent.name),
        reverse=True,
    )
    for folder in candidates:
        if all((Path(folder) / name).exists() for name in ("initdb", "pg_ctl", "postgres")):
            return Path(folder)
    raise EnvironmentProblem(
        "The PostgreSQL server binaries (initdb, pg_ctl, postgres) are not installed: "
        "neither on PATH nor under /usr/lib/postgresql/*/bin.",
        fix="install Debian's package `postgresql` (apt-get install postgresql), "
        "or put a PostgreSQL 15+ bin folder on PATH.",
    )


_RUNNING: set[PostgresServer] = set()


def stop_leftovers() -> list[str]:
    """Stop every server this process started and has not stopped; where each was (a test session
    calls this at its end and fails if any was left running)."""
    left = sorted(_RUNNING, key=lambda server: server.port)
    shown = [f"127.0.0.1:{server.port} ({server.folder})" for server in left]
    for server in left:
        server.stop()
    return shown


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """One throwaway PostgreSQL server on loopback; see the module docstring."""

    def __init__(self) -> None:
        self.bin_dir = find_server_bin()
        self.host = "127.0.0.1"
        self.port = 0
        self._folder: Path | None = None
        self._databases = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def folder(self) -> Path:
        if self._folder is None:
            raise RuntimeError("the PostgreSQL server is not started")
        return self._folder

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    @property
    def running(self) -> bool:
        return self._folder is not None

    def start(self) -> PostgresServer:
        """Create the data folder, start the server and wait until it accepts connections."""
        if self._folder is not None:
            return self
        self._folder = Path(tempfile.mkdtemp(prefix="gpuctl-pg-"))
        atexit.register(self.stop)
        _RUNNING.add(self)
        try:
            self._chown_to_server_user(self._folder)
            self._initdb()
            self._start_on_free_port()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are ended) and remove its folder."""
        folder, self._folder = self._folder, None
        if folder is None:
            return
        atexit.unregister(self.stop)
        _RUNNING.discard(self)
        if (folder / "data" / "postmaster.pid").exists():
            self._run(
                ["pg_ctl", "stop", "-D", str(folder / "data"), "-m", "fast", "-w", "-t", "60"],
                check=False,
            )
        shutil.rmtree(folder, ignore_errors=True)

    def server_pid(self) -> int | None:
        """The postmaster's process id, from its pid file; None when it is not running."""
        if self._folder is None:
            return None
        pid_file = self.data_dir / "postmaster.pid"
        try:
            return int(pid_file.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    # -- databases ------------------------------------------------------------------------------

    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL (psycopg 3 driver) of one database on this server."""
        return f"postgresql+psycopg://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def new_database(self) -> str:
        """Create a fresh, empty database and return its SQLAlchemy URL."""
        self._databases += 1
        name = f"gpuctl_{self._databases}_{secrets.token_hex(3)}"
        with self._admin_connection() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def database_names(self) -> list[str]:
        """Every database on the server that is not a template."""
        with self._admin_connection() as conn:
            rows = conn.execute("SELECT datname FROM pg_database WHERE NOT datistemplate").fetchall()
        return sorted(str(row[0]) for row in rows)

    def _admin_connection(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=SUPERUSER,
            dbname="postgres",
            autocommit=True,
            connect_timeout=10,
        )

    # -- internals ------------------------------------------------------------------------------

    def _as_server_user(self) -> bool:
        return os.geteuid() == 0

    def _chown_to_server_user(self, path: Path) -> None:
        if not self._as_server_user():
            return
        try:
            user = pwd.getpwnam(SERVER_USER)
        except KeyError as exc:
            raise EnvironmentProblem(
                f"Running as root, but there is no `{SERVER_USER}` system user to run PostgreSQL as "
                "(PostgreSQL refuses to run as root).",
                fix="install Debian's package `postgresql`, which creates that user, "
                "or run the tests as a non-root user.",
            ) from exc
        os.chown(path, user.pw_uid, user.pw_gid)

    def _run(self, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin_dir / argv[0]), *argv[1:]]
        if self._as_server_user():
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            cwd=str(self.folder) if self._folder else None,
        )
        if check and result.returncode != 0:
            raise EnvironmentProblem(
                f"PostgreSQL's {argv[0]} failed (exit {result.returncode}): "
                f"{(result.stderr or result.stdout).strip()[-2000:]}",
                fix="check that Debian's package `postgresql` is installed completely "
                f"and that {self.folder} is writable by the server's user.",
            )
        return result

    def _initdb(self) -> None:
        self._run(
            [
                "initdb",
                "-D",
                str(self.data_dir),
                "--username",
                SUPERUSER,
                "--auth",
                "trust",
                "--no-locale",
                "--encoding",
                "UTF8",
                "--no-sync",
            ]
        )

    def _write_config(self, port: int) -> None:
        lines = [
            *_TUNING,
            "listen_addresses = '127.0.0.1'",
            f"port = {port}",
            f"unix_socket_directories = '{self.folder}'",
        ]
        # The file belongs to the server's user; we (root or that user) may append to it.
        conf = self.data_dir / "postgresql.auto.conf"
        conf.write_text("\n".join(lines) + "\n")

    def _start_on_free_port(self) -> None:
        last_error: EnvironmentProblem | None = None
        for _ in range(3):  # another process may take the free port between probe and bind
            port = _free_port()
            self._write_config(port)
            log = self.folder / "server.log"
            result = self._run(
                [
                    "pg_ctl",
                    "start",
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(log),
                    "-w",
                    "-t",
                    str(_START_TIMEOUT_S),
                ],
                check=False,
            )
            if result.returncode == 0:
                self.port = port
                self._wait_accepting()
                return
            last_error = EnvironmentProblem(
                f"PostgreSQL did not start on 127.0.0.1:{port}: {self._log_tail(log)}",
                fix="read the server log above; check that Debian's package `postgresql` is installed.",
            )
        assert last_error is not None
        raise last_error

    def _wait_accepting(self) -> None:
        """pg_ctl -w waited for the postmaster to report ready; confirm with a real connection."""
        result = self._run(
            ["pg_isready", "-h", self.host, "-p", str(self.port), "-t", str(_START_TIMEOUT_S)],
            check=False,
        )
        if result.returncode != 0:
            raise EnvironmentProblem(
                f"PostgreSQL started but does not accept connections on {self.host}:{self.port}: "
                f"{result.stdout.strip()}",
                fix=f"read {self.folder / 'server.log'}.",
            )
        with self._admin_connection() as conn:
            conn.execute("SELECT 1")

    def _log_tail(self, log: Path) -> str:
        try:
            return log.read_text(errors="replace").strip()[-2000:] or "(empty server log)"
        except OSError:
            return "(no server log)"
