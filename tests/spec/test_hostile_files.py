"""Hostile job files (issue 13): one row per class of attack, each refused with one short, exact message."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.errors import SpecError
from orchestrator.spec import load_spec_file

OK = b"name: a\ncommand: train.py\n"


def _alias_bomb() -> bytes:
    """521 bytes that expand to 9**9 list items: the 'billion laughs' of YAML."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev, name = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{name}: &{name} [{','.join(['*' + prev] * 9)}]")
    return OK + "\n".join(lines).encode() + b"\n"


HOSTILE = [
    (
        "infinite grace",
        OK + b"checkpoint: {notice_grace_seconds: .inf}\n",
        "checkpoint.notice_grace_seconds (line 3): Input should be a finite number. "
        "To fix: use a finite number (.inf and .nan are not allowed)",
    ),
    (
        "nan cpus",
        OK + b"resources: {cpus_per_node: .nan}\n",
        "resources.cpus_per_node (line 3): Input should be a finite number. "
        "To fix: use a finite number (.inf and .nan are not allowed)",
    ),
    (
        "a billion nodes",
        OK + b"resources: {nodes: 1000000000}\n",
        "resources.nodes (line 3): nodes (1000000000) is above 4096. To fix: ask for at most 4096 nodes",
    ),
    (
        "elastic max too big",
        OK + b"resources: {nodes: {min: 1, max: 100000}}\n",
        "resources.nodes.max (line 3): Input should be less than or equal to 4096. To fix: use a value <= 4096",
    ),
    (
        "huge budget",
        OK + b"goals: {budget_usd: 1.0e+300}\n",
        "goals.budget_usd (line 3): Input should be less than or equal to 1000000000. "
        "To fix: use a value <= 1000000000.0",
    ),
    (
        "huge duration",
        OK + b"goals: {deadline: 99999999999d}\n",
        "goals.deadline (line 3): '99999999999d' is longer than 10 years. "
        "To fix: give a shorter duration such as '36h'",
    ),
    (
        "huge changeover",
        OK + b"market: {changeover: 99999999999d}\n",
        "market.changeover (line 3): '99999999999d' is longer than 10 years. "
        "To fix: give a shorter duration such as '36h'",
    ),
    (
        "far deadline",
        OK + b"goals: {deadline: '9999-12-31T00:00:00Z'}\n",
        "goals.deadline (line 3): '9999-12-31T00:00:00Z' is more than 10 years away. "
        "To fix: give a nearer time or a duration such as '36h'",
    ),
    (
        "alias bomb",
        _alias_bomb(),
        "YAML alias *a (line 4): aliases are not allowed in gpuctl's files. "
        "To fix: write the value out instead of '&anchor' and '*alias'",
    ),
    (
        "deep nesting",
        OK + b"labels: " + b"[" * 100_000 + b"]" * 100_000 + b"\n",
        "nesting deeper than 32 levels (line 3). "
        "To fix: check the brackets and indentation (gpuctl's files need only a few levels)",
    ),
    (
        "not UTF-8",
        OK + b"team: caf\xe9\n",
        "the file is not UTF-8 text (byte 0xe9 on line 3). To fix: save it as UTF-8",
    ),
    (
        "oversized file",
        OK + b"setup: '" + b"x" * (1 << 20) + b"'\n",
        "the file is 1048612 bytes, more than the 1048576 bytes (1 MiB) allowed. "
        "To fix: keep data out of the job file (read it from a file in workdir)",
    ),
    (
        "too many values",
        OK + b"labels: {" + b", ".join(b"k%d: v" % i for i in range(10_001)) + b"}\n",
        "more than 20000 keys, values and list items (line 3). "
        "To fix: keep data out of the job file (read it from a file in workdir)",
    ),
    (
        "NUL in command",
        b'name: a\ncommand: "train.py\\0 --x"\n',
        "command (line 2): contains the control character U+0000 at position 8 (only tab and newline may "
        "appear here). To fix: remove it (escapes such as \\0 or \\e in double-quoted YAML make control characters)",
    ),
    (
        "NUL in env value",
        OK + b'env: {TOKEN: "a\\0b"}\n',
        "env.TOKEN (line 3): contains the control character U+0000 at position 1",
    ),
    (
        "NUL in env name",
        OK + b'env: {"A\\0B": x}\n',
        "env (line 3): 'A\\x00B' is not a valid environment variable name. "
        "To fix: use letters, digits and '_', not starting with a digit",
    ),
    (
        "escape in team",
        OK + b'team: "ml\\e[2J"\n',
        "team (line 3): contains the control character U+001B at position 2. To fix: remove it",
    ),
    (
        "newline in a path",
        OK + b'checkpoint: {path: "/ckpt\\nrm -rf"}\n',
        "checkpoint.path (line 3): contains the control character U+000A at position 5. To fix: remove it",
    ),
    (
        "exit code out of range",
        OK + b"recovery: {retry_exit_codes: [1, 999]}\n",
        "recovery.retry_exit_codes.1 (line 3): Input should be less than or equal to 255. To fix: use a value <= 255",
    ),
    (
        "integer of 5000 digits",
        OK + b"resources: {nodes: " + b"9" * 5000 + b"}\n",
        "a value cannot be read (Exceeds the limit (4300 digits) for integer string conversion",
    ),
]


@pytest.mark.parametrize(("case", "content", "expected"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_file_gets_one_short_clear_error(
    case: str, content: bytes, expected: str, tmp_path: Path
) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(content)
    started = time.monotonic()
    with pytest.raises(SpecError) as err:
        load_spec_file(path)
    assert time.monotonic() - started < 2.0
    assert len(err.value.problems) == 1, err.value.problems
    (problem,) = err.value.problems
    assert problem.startswith(expected), problem
    assert "To fix: " in problem and len(str(err.value)) < 600, str(err.value)


def test_many_problems_are_listed_twenty_at_a_time() -> None:
    from orchestrator.spec import load_spec_text

    with pytest.raises(SpecError) as err:
        load_spec_text("name: a\ncommand: x\n" + "".join(f"unknown{i}: 1\n" for i in range(500)))
    assert len(err.value.problems) == 21 and err.value.problems[-1].startswith("... and about 480 more")


@pytest.mark.parametrize("case", ["alias bomb", "not UTF-8", "deep nesting"])
def test_gpuctl_validate_refuses_without_traceback(case: str, tmp_path: Path) -> None:
    content, expected = next((c, e) for name, c, e in HOSTILE if name == case)
    path = tmp_path / "job.yaml"
    path.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "validate", str(path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr) < 1000
