"""Every YAML gpuctl reads has the same limits, and refuses a key given twice, naming its line.

The kinds of YAML file: a job spec, the controller config ``$GPUCTL_HOME/config.yaml`` (its budgets and
its notify section are read by two readers), a SLURM cluster config and a secrets file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.backends.secrets import read_secrets_file
from orchestrator.backends.slurm.config import load_cluster_config
from orchestrator.costs.budgets import load_cost_config
from orchestrator.errors import UserError
from orchestrator.notify.config import load_notify_config
from orchestrator.spec import load_spec_file
from orchestrator.userfiles import ContentError, load_yaml, read_text, text_lines


def _job(path: Path) -> object:
    (path.parent / "w").mkdir(exist_ok=True)
    return load_spec_file(path)


def _secrets(path: Path) -> object:
    path.chmod(0o600)
    return read_secrets_file(path)


READERS: dict[str, tuple[str, Callable[[Path], object]]] = {
    "job spec": ("job.yaml", _job),
    "config.yaml budgets": ("config.yaml", load_cost_config),
    "config.yaml notify": ("config.yaml", lambda p: load_notify_config(p.parent)),
    "cluster config": ("slurm.yaml", load_cluster_config),
    "secrets file": ("token", _secrets),
}
"""Each kind of YAML file: its name and how gpuctl reads it."""

PREFIX = b"name: a\ncommand: train.py\nworkdir: w\n"
"""Valid as a job spec; unknown keys elsewhere, but the limits are checked before the keys are."""


def _alias_bomb() -> bytes:
    """About 500 bytes that expand to 9**9 list items: YAML's 'billion laughs'."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev, name = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{name}: &{name} [{','.join(['*' + prev] * 9)}]")
    return "\n".join(lines).encode() + b"\n"


BOMBS = {
    "alias bomb": (_alias_bomb(), "YAML alias *a (line 5): aliases are not allowed in gpuctl's files"),
    "deep nesting": (
        b"x: " + b"[" * 100_000 + b"]" * 100_000 + b"\n",
        "nesting deeper than 32 levels (line 4)",
    ),
    "too many values": (
        b"x: [" + b",".join(b"1" for _ in range(30_000)) + b"]\n",
        "more than 20000 keys, values and list items (line 4)",
    ),
    "oversized": (b"x: '" + b"y" * (1 << 20) + b"'\n", "more than the 1048576 bytes (1 MiB) allowed"),
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("bomb", BOMBS)
@pytest.mark.parametrize("kind", READERS)
def test_every_yaml_file_has_the_job_spec_limits(kind: str, bomb: str, tmp_path: Path) -> None:
    name, read = READERS[kind]
    content, expected = BOMBS[bomb]
    path = tmp_path / name
    path.write_bytes(PREFIX + content)
    started = time.monotonic()
    with pytest.raises(UserError) as err:
        read(path)
    assert time.monotonic() - started < 5.0
    message = str(err.value)
    if kind == "secrets file":  # its own size check; no piece of the file (an anchor's name) is shown
        expected = {"alias bomb": "YAML alias (line 5)", "oversized": "larger than 1 MiB"}.get(bomb, expected)
    assert expected in message, message
    assert "To fix" in message and len(message) < 800


DUPLICATES = {
    "job spec": (b"name: a\ncommand: train.py\nteam: x\nname: b\n", "'name'", "line 1 and line 4"),
    "config.yaml budgets": (b"budgets:\n  teams:\n    ml: 10\n    ml: 99999\n", "'ml'", "line 3 and line 4"),
    "config.yaml notify": (
        b"notify: {teams: {}}\nbudgets: {}\nnotify: {}\n",
        "'notify'",
        "line 1 and line 3",
    ),
    "cluster config": (b"partitions:\n  spot: a\n  'spot': b\n", "'spot'", "line 2 and line 3"),
}


@pytest.mark.parametrize("kind", DUPLICATES)
def test_a_key_given_twice_is_refused_with_its_lines(kind: str, tmp_path: Path) -> None:
    name, read = READERS[kind]
    content, key, lines = DUPLICATES[kind]
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UserError) as err:
        read(path)
    message = str(err.value)
    assert f"the key {key} is given twice in one mapping ({lines})" in message, message
    assert str(path) in message and "To fix: keep one of them" in message


def test_a_secrets_file_key_given_twice_is_refused_without_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"api: s3cr3t-one\napi: s3cr3t-two\n")
    with pytest.raises(UserError) as err:
        _secrets(path)
    assert "given twice in one mapping (line 1 and line 2)" in str(err.value)
    assert "api" not in str(err.value).replace(str(path), "") and "s3cr3t" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "duplicate"),
    [
        ("a: 1\nb: {a: 1}\n", False),  # the same key in two mappings
        ("1: a\n'1': b\n", False),  # an int and a string
        ("yes: a\ntrue: b\n", True),  # both the boolean true
        ("- {a: 1}\n- {a: 2}\n", False),
        ("- {a: 1, a: 2}\n", True),
        ("<<: {a: 1}\nb: 2\n", False),  # a merge key is not a key
    ],
)
def test_keys_are_compared_as_yaml_reads_them(text: str, duplicate: bool) -> None:
    if duplicate:
        with pytest.raises(ContentError, match="given twice"):
            load_yaml(text, "f.yaml")
    else:
        load_yaml(text, "f.yaml")


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _not_utf8(tmp_path: Path) -> Path:
    path = tmp_path / "latin1"
    path.write_bytes(b"ok\ncaf\xe9\n")
    return path


def _under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("x")
    return tmp_path / "file" / "x"


UNREADABLE: dict[str, tuple[Callable[[Path], Path], str]] = {
    "folder": (lambda p: p, "is a folder, not a regular file"),
    "FIFO": (_fifo, "is a FIFO (named pipe), not a regular file"),
    "not UTF-8": (_not_utf8, "the file is not UTF-8 text (byte 0xe9 on line 2)"),
    "under a file": (_under_a_file, "part of the path is a file, not a folder"),
}


@pytest.mark.timeout(20)  # a FIFO opened for reading waits for a writer: it must not be opened so
@pytest.mark.parametrize("case", UNREADABLE)
@pytest.mark.parametrize("how", ["whole", "lines"])
def test_an_unreadable_input_is_one_error_naming_it(case: str, how: str, tmp_path: Path) -> None:
    make, expected = UNREADABLE[case]
    path = make(tmp_path)
    with pytest.raises(UserError) as err:
        if how == "whole":
            read_text(path, "ledger export", "give a ledger export")
        else:
            list(text_lines(path, "replay file", "give a replay file"))
    assert str(err.value).startswith(f"{'ledger export' if how == 'whole' else 'replay file'} '{path}': ")
    assert expected in str(err.value) and "To fix: " in str(err.value)
