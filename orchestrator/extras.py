"""Optional dependencies: which pip extra brings which module, and one way to ask for them.

The base install (see pyproject.toml) runs every command that needs no optional part. Code that
needs one imports it through :func:`require` (or checks :func:`installed` before doing anything), so a
user without it gets one clear line naming the extra instead of a traceback::

    gpuctl: error: the Kubernetes backend needs the Python package 'kubernetes', which is not installed
      To fix: pip install 'gpuctl[kubernetes]'
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from orchestrator.errors import MissingExtra

EXTRA_OF_MODULE: dict[str, tuple[str, str]] = {
    # top-level module: (distribution to name in the message, gpuctl extra that installs it)
    "torch": ("torch", "train"),
    "pynvml": ("nvidia-ml-py", "monitor"),
    "kubernetes": ("kubernetes", "kubernetes"),
    "kopf": ("kopf", "kubernetes"),
    "sklearn": ("scikit-learn", "examples"),
    "kmock": ("kmock", "testing"),
    "starlette": ("starlette", "dashboard"),
    "jinja2": ("jinja2", "dashboard"),
    "uvicorn": ("uvicorn", "dashboard"),
}


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (cheap even for torch)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing(module: str, needed_for: str) -> MissingExtra:
    """The error for an optional ``module`` that is not installed (its top level names the extra)."""
    package, extra = EXTRA_OF_MODULE[module.split(".")[0]]
    return MissingExtra(package, extra, needed_for)


def require(module: str, needed_for: str) -> ModuleType:
    """Import an optional ``module``, or raise :class:`MissingExtra` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != module.split(".")[0]:
            raise  # the module is there but something it imports is broken: show that, not a hint
        raise missing(module, needed_for) from exc


def check(module: str, needed_for: str) -> None:
    """Raise :class:`MissingExtra` unless ``module`` is installed; imports nothing."""
    if not installed(module):
        raise missing(module, needed_for)
