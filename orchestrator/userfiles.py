"""Files a user names, and the one YAML loader: every input file of gpuctl is read through here.

A job file, a cluster config, ``$GPUCTL_HOME/config.yaml``, a secrets file, a ledger export, a replay
or summary file: each is read the same way, so none can hang gpuctl, exhaust its memory or end in a
traceback.

* :func:`read_text` reads a whole file: opened without blocking (a FIFO does not wait for a writer),
  only if it is a regular file (not a folder, FIFO or device), at most ``max_bytes`` long, UTF-8.
* :func:`text_lines` reads a long file line by line, each line at most :data:`MAX_LINE_BYTES`;
  :func:`check_text_file` reads one through to check it.
* :func:`load_yaml` and :func:`compose_yaml` parse YAML (:func:`compose_yaml_documents` each document
  of a multi-document file, such as a Kubernetes manifest): no aliases (``&a`` and ``*a``: a few bytes of
  them expand to gigabytes), at most :data:`MAX_DEPTH` levels, :data:`MAX_VALUES` values and
  :data:`MAX_YAML_BYTES` bytes, and no key twice in one mapping (YAML would keep the last silently).

Every problem is an :class:`InputError` (a :class:`~orchestrator.errors.UserError`, exit code 2) that
names the file, the line where known, what is wrong and the fix; one the file's content causes is a
:class:`ContentError`. ``tests/test_code_quality.py`` checks that no other module calls ``yaml.load``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import yaml

from orchestrator.errors import NotFoundError, UserError

MAX_YAML_BYTES = 1 << 20
"""A YAML input (job file, config) is a few KiB; 1 MiB leaves room for long commands and many values."""
MAX_DEPTH = 32
"""Nesting of YAML mappings and lists; gpuctl's files need at most 5."""
MAX_VALUES = 20_000
"""Keys, values and list items in one YAML file (keeps loading well under a second)."""
MAX_DATA_BYTES = 1 << 30
"""A data file read whole (a ledger export): 1 GiB."""
MAX_LINE_BYTES = 1 << 20
"""One line of a JSON-lines file (a GPU sample, a window summary, a progress record)."""

CONFIG_FIX = (
    "make it a YAML file readable by you (budgets:, reports:, notify:; see docs/costs.md and "
    "docs/notifications.md), or remove it"
)
"""The fix for the controller config, ``$GPUCTL_HOME/config.yaml``, that cannot be read."""

_T = TypeVar("_T")
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when installed: 20x faster
_MERGE_TAG = "tag:yaml.org,2002:merge"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


class InputError(UserError):
    """A file the user named cannot be read as one: ``source`` names it, ``problem`` says why."""

    def __init__(self, source: str, problem: str, fix: str) -> None:
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}", fix)

    @property
    def detail(self) -> str:
        """``problem. To fix: fix`` on one line (a :class:`~orchestrator.errors.SpecError` problem)."""
        return f"{self.problem}. To fix: {self.fix}"


class ContentError(InputError):
    """The file was read, but what it holds is refused (size, encoding, YAML)."""


def quoted(value: object, limit: int = 40) -> str:
    """``value`` quoted for a message: at most ``limit`` characters, control characters escaped."""
    text = str(value)
    cut = text[:limit] + ("..." if len(text) > limit else "")
    return "'" + _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256
                              else f"\\u{ord(m.group()):04x}", cut) + "'"  # fmt: skip


# --- files -------------------------------------------------------------------------------------


def read_text(
    path: str | Path, what: str, fix: str, max_bytes: int = MAX_YAML_BYTES, data_fix: str | None = None
) -> str:
    """The whole text of ``path``, a regular UTF-8 file of at most ``max_bytes`` bytes.

    ``what`` names the kind of file in messages ("job file"); ``fix`` says what to give instead
    ("give the path of a job file, e.g. examples/quickstart/job.yaml"); ``data_fix`` where the data
    of a file too large belongs.
    """
    source = f"{what} {quoted(path, 200)}"
    with _open(path, source, fix) as handle:
        try:
            raw = handle.read(max_bytes + 1)
        except OSError as exc:
            raise InputError(source, f"cannot be read ({exc.strerror})", fix) from None
        if len(raw) > max_bytes:
            size = max(os.fstat(handle.fileno()).st_size, len(raw))
            raise ContentError(
                source,
                f"the file is {size} bytes, more than the {max_bytes} bytes{_binary_size(max_bytes)} allowed",
                data_fix or "keep only what gpuctl needs in it",
            )
    return _decode(raw, source)


def read_optional_text(path: str | Path, what: str, fix: str, max_bytes: int = MAX_YAML_BYTES) -> str | None:
    """As :func:`read_text`, but ``None`` when there is no file at ``path`` (an optional config)."""
    try:
        return read_text(path, what, fix, max_bytes)
    except NotFoundError:
        return None


def text_lines(path: str | Path, what: str, fix: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a text file, read as it is iterated; for files of any length.

    Raises :class:`InputError` (the file) or :class:`ContentError` (a line not UTF-8, or longer than
    :data:`MAX_LINE_BYTES`) at the line where it happens.
    """
    source = f"{what} {quoted(path, 200)}"
    with _open(path, source, fix) as handle:
        number = 0
        while True:
            try:
                raw = handle.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:
                raise InputError(source, f"cannot be read ({exc.strerror})", fix) from None
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES:
                raise ContentError(source, f"line {number} is longer than {MAX_LINE_BYTES} bytes", fix)
            try:  # a newline byte is never part of a multi-byte character: each line decodes alone
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise ContentError(
                    source, f"the file is not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {number})",
                    "save it as UTF-8",
                ) from None  # fmt: skip
            yield number, line


def check_text_file(path: str | Path, what: str, fix: str) -> None:
    """Read ``path`` through as :func:`text_lines` does: a readable, regular file of UTF-8 lines."""
    for _ in text_lines(path, what, fix):
        pass


def _open(path: str | Path, source: str, fix: str) -> BinaryIO:
    flags = (
        os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    )
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise NotFoundError(f"{source} does not exist", f"check the path; {fix}") from None
    except NotADirectoryError:
        raise InputError(
            source, "part of the path is a file, not a folder", f"check the path; {fix}"
        ) from None
    except PermissionError:
        raise InputError(
            source, "cannot be read: permission denied", f"check its permissions (ls -l); {fix}"
        ) from None
    except OSError as exc:
        raise InputError(source, f"cannot be opened ({exc.strerror})", fix) from None
    try:
        mode = os.fstat(fd).st_mode  # of the file opened: nothing can swap it after the check
        if not stat.S_ISREG(mode):
            raise InputError(source, f"is {_kind(mode)}, not a regular file", fix)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _binary_size(size: int) -> str:
    if size % (1 << 30) == 0:
        return f" ({size >> 30} GiB)"
    if size % (1 << 20) == 0:
        return f" ({size >> 20} MiB)"
    return ""


def _decode(raw: bytes, source: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ContentError(
            source,
            f"the file is not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line})",
            "save it as UTF-8",
        ) from None


# --- YAML --------------------------------------------------------------------------------------


def load_yaml(text: str, source: str, reveal: bool = True, data_fix: str | None = None) -> Any:
    """The data of one YAML document, within the limits above; ``None`` for an empty one.

    ``reveal=False`` (secrets files): messages give lines only, never a key or a piece of the file.
    ``data_fix`` says where the data of a too-large file belongs.
    """
    return compose_yaml(text, source, reveal, data_fix)[1]


def compose_yaml(
    text: str, source: str, reveal: bool = True, data_fix: str | None = None
) -> tuple[yaml.Node | None, Any]:
    """The node tree (whose marks give line numbers) and the data of one YAML document."""

    def one() -> tuple[yaml.Node | None, Any]:
        root = yaml.compose(text, Loader=_Loader)
        return root, _construct(root, source, reveal)

    return _read_yaml(text, source, reveal, data_fix, one)


def compose_yaml_documents(
    text: str, source: str, reveal: bool = True, data_fix: str | None = None
) -> list[tuple[yaml.Node, Any]]:
    """The node tree and the data of each document of a YAML stream (``---`` between documents), as
    :func:`compose_yaml` reads one: the limits hold for the whole file. An empty file has none."""

    def each() -> list[tuple[yaml.Node, Any]]:
        return [(root, _construct(root, source, reveal)) for root in yaml.compose_all(text, Loader=_Loader)]

    return _read_yaml(text, source, reveal, data_fix, each)


def _read_yaml(text: str, source: str, reveal: bool, data_fix: str | None, parse: Callable[[], _T]) -> _T:
    """``parse()`` within the limits, its errors as :class:`ContentError`: the size, then the events."""
    keep = data_fix or "keep only configuration in the file"
    if len(text) > MAX_YAML_BYTES:
        size = len(text.encode("utf-8", "replace"))
        raise ContentError(
            source, f"the file is {size} bytes, more than the {MAX_YAML_BYTES} bytes (1 MiB) allowed", keep
        )
    try:
        _check_events(text, source, keep, reveal)
        return parse()
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, source, reveal) from None
    except (ValueError, OverflowError) as exc:  # a date such as 2026-13-45, an int of 5000 digits
        shown = f" ({_brief(str(exc))})" if reveal else ""
        raise ContentError(
            source, f"a value cannot be read{shown}", "quote it to make it a string, or correct it"
        ) from None


def _construct(root: yaml.Node | None, source: str, reveal: bool) -> Any:
    _check_keys(root, source, reveal)
    return None if root is None else _Loader("").construct_document(root)


def _yaml_error(exc: yaml.YAMLError, source: str, reveal: bool) -> ContentError:
    mark = getattr(exc, "problem_mark", None)
    problem = str(getattr(exc, "problem", None) or exc)
    if problem == _SECOND_DOCUMENT:  # a '---' line: nothing to do with indentation or quoting
        return ContentError(
            source,
            f"more than one YAML document: another starts{_line(mark)}",
            "keep one document in this file: remove the '---' line and what follows it, or split the file",
        )
    if "nesting depth" in problem:  # libyaml >= 0.2.6 stops deep nesting itself, before our count
        return ContentError(source, f"nesting deeper than {MAX_DEPTH} levels{_line(mark)}", _DEEP_FIX)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    said = f": {_brief(problem)}" if reveal else ""
    return ContentError(source, f"malformed YAML{where}{said}", "check indentation and quoting")


_SECOND_DOCUMENT = "but found another document"
"""What YAML's composer says when a stream read as one document holds a second."""
_DEEP_FIX = "check the brackets and indentation (gpuctl's files need only a few levels)"


def _check_events(text: str, source: str, keep: str, reveal: bool) -> None:
    depth = 0
    for count, event in enumerate(yaml.parse(text, Loader=_Loader)):
        if count > MAX_VALUES:
            raise ContentError(
                source, f"more than {MAX_VALUES} keys, values and list items{_line(event.start_mark)}", keep
            )
        if isinstance(event, yaml.AliasEvent):
            name = f" *{quoted(event.anchor)[1:-1]}" if reveal else ""
            raise ContentError(
                source,
                f"YAML alias{name}{_line(event.start_mark)}: aliases are not allowed in gpuctl's files",
                "write the value out instead of '&anchor' and '*alias'",
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ContentError(
                    source, f"nesting deeper than {MAX_DEPTH} levels{_line(event.start_mark)}", _DEEP_FIX
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _check_keys(node: yaml.Node | None, source: str, reveal: bool) -> None:
    """Refuse a key given twice in one mapping (YAML's loaders keep the last one silently)."""
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_keys(item, source, reveal)
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[Any, int] = {}
    for key, value in node.value:
        _check_keys(value, source, reveal)
        if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
            continue
        identity = _key_identity(key)
        line = key.start_mark.line + 1
        if identity in seen:
            name = f" {quoted(key.value)}" if reveal else ""
            raise ContentError(
                source,
                f"the key{name} is given twice in one mapping (line {seen[identity]} and line {line})",
                "keep one of them (YAML would silently use the last)",
            )
        seen[identity] = line


def _key_identity(key: yaml.ScalarNode) -> Any:
    """What the key becomes: ``yes`` and ``true`` are one key, ``1`` and ``'1'`` two."""
    value = _Loader("").construct_object(key)
    try:
        hash(value)
    except TypeError:
        return (key.tag, key.value)
    return (type(value).__name__, value)


def _line(mark: Any) -> str:
    return f" (line {mark.line + 1})" if mark is not None else ""


def _brief(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
