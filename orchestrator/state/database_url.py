"""Which database holds the job store and the ledger: one setting, a database URL.

``GPUCTL_DATABASE_URL`` if set, else ``database.url`` in ``$GPUCTL_HOME/config.yaml``, else the
embedded default, SQLite under the gpuctl home (``sqlite:///$GPUCTL_HOME/gpuctl.db``). A team points
every controller, login node and the operator at one PostgreSQL server:
``postgresql+psycopg://USER:PASSWORD@HOST:5432/DATABASE`` (``postgresql://`` is taken to mean the same).

A URL may hold a password: :func:`masked_url` is the form every message and log line shows.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from orchestrator.errors import UserError
from orchestrator.userfiles import CONFIG_FIX, load_yaml, read_optional_text

URL_ENV = "GPUCTL_DATABASE_URL"
CONFIG_FILE = "config.yaml"
DEFAULT_FILE = "gpuctl.db"
POSTGRES_DRIVER = "postgresql+psycopg"
URL_FIX = (
    "give a SQLite path (`sqlite:////abs/path/gpuctl.db`) or a PostgreSQL server "
    "(`postgresql+psycopg://USER:PASSWORD@HOST:5432/DATABASE`), or unset it for the default "
    "(SQLite under the gpuctl home)"
)


def database_url(home: Path) -> str:
    """The database URL in effect for the gpuctl home ``home`` (see the module's doc); a URL that is
    not one gpuctl can use raises :class:`UserError` naming where it was set."""
    found = os.environ.get(URL_ENV, "").strip()
    if found:
        return _checked(found, f"{URL_ENV} (environment)")
    configured = _configured_url(home)
    if configured is not None:
        return _checked(configured, f"database.url in {home / CONFIG_FILE}")
    return sqlite_url(home / DEFAULT_FILE)


def _configured_url(home: Path) -> str | None:
    path = home / CONFIG_FILE
    text = read_optional_text(path, "controller config", CONFIG_FIX)
    if text is None:
        return None
    data: Any = load_yaml(text, str(path), reveal=False)
    section = data.get("database") if isinstance(data, dict) else None
    if section is None:
        return None
    url = section.get("url") if isinstance(section, dict) else None
    if not isinstance(url, str) or not url.strip():
        raise UserError(
            f"database.url in {path} is not a database URL (a non-empty string)",
            f"set database.url to a URL: {URL_FIX}",
        )
    return url.strip()


def _parse(url: str) -> URL | None:
    try:
        return make_url(url)
    except (ArgumentError, ValueError):
        return None


def _checked(url: str, where: str) -> str:
    """``url`` in the form gpuctl uses (``postgresql://`` becomes ``postgresql+psycopg://``)."""
    parsed = _parse(url)
    if parsed is None or parsed.drivername not in (
        "sqlite",
        "sqlite+pysqlite",
        "postgresql",
        POSTGRES_DRIVER,
    ):
        shown = "a malformed URL" if parsed is None else f"a {parsed.drivername!r} URL"
        raise UserError(
            f"{where} is {shown} ({masked_url(url)}); gpuctl keeps its jobs in SQLite or PostgreSQL",
            f"fix {where.split(' (')[0]}: {URL_FIX}",
        )
    if parsed.drivername.startswith("sqlite"):
        if not parsed.database or parsed.database == ":memory:":
            raise UserError(
                f"{where} names no SQLite file ({masked_url(url)}): an in-memory store would lose every job",
                f"fix {where.split(' (')[0]}: {URL_FIX}",
            )
        return url
    if not parsed.database:
        raise UserError(
            f"{where} names no database on the PostgreSQL server ({masked_url(url)})",
            f"fix {where.split(' (')[0]}: add the database name, e.g. .../gpuctl",
        )
    return parsed.set(drivername=POSTGRES_DRIVER).render_as_string(hide_password=False)


def masked_url(url: str) -> str:
    """``url`` with its password (if any) shown as ``***``: the only form a message or log may show."""
    parsed = _parse(url)
    if parsed is None:
        return "<a database URL that does not parse>"
    return parsed.render_as_string(hide_password=True)


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def sqlite_url(path: Path) -> str:
    """The URL of the SQLite file ``path``."""
    return f"sqlite:///{path.absolute()}"


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:///PATH`` URL."""
    parsed = make_url(url)
    return Path(parsed.database or "")
