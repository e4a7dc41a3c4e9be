"""Every change of a job's state goes through the one engine, and one host builds the job's view.

AST checks over the product code (orchestrator/ and operators/): a module other than the engine that
sets a job's state, or a second place that builds a ``JobView``, fails here with its file and line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENGINE = "orchestrator/controller/engine.py"
STATE_WRITERS = {
    ENGINE: "applies reconcile's actions, checked against the transitions table",
    "orchestrator/state/state_rows.py": "saves the state the engine applied (its UPDATE of the jobs row)",
}
"""The modules that may set a job's state, and why."""

_STATE_KEYS = frozenset({"status", "state"})
_STATE_SQL = re.compile(r"UPDATE\s+jobs\s+SET\b[^;]*\bstatus\s*=", re.IGNORECASE | re.DOTALL)


def _product_modules() -> list[tuple[str, ast.Module]]:
    paths = sorted([*(REPO / "orchestrator").rglob("*.py"), *(REPO / "operators").rglob("*.py")])
    return [(p.relative_to(REPO).as_posix(), ast.parse(p.read_text(encoding="utf-8"))) for p in paths]


def _names_a_status(node: ast.AST) -> bool:
    """``node`` holds a member of ``JobStatus`` (``JobStatus.FAILED``, ``str(JobStatus.FAILED)``)."""
    return any(
        isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "JobStatus"
        for n in ast.walk(node)
    )


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def state_writes(tree: ast.Module) -> list[int]:
    """Lines of ``tree`` that set a job's state: ``JobState(status=...)``, ``model_copy(update={"status":
    ...})``, a status mapping whose ``state``/``status`` is a ``JobStatus`` member (a GPUJob status
    patch), or SQL that updates the ``status`` of the ``jobs`` table."""
    lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) == "JobState":
            lines += [node.lineno for k in node.keywords if k.arg in _STATE_KEYS]
        elif isinstance(node, ast.Call) and _call_name(node) == "model_copy":
            for k in node.keywords:
                if k.arg == "update" and isinstance(k.value, ast.Dict):
                    keys = [key.value for key in k.value.keys if isinstance(key, ast.Constant)]
                    lines += [node.lineno for key in keys if key in _STATE_KEYS]
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in _STATE_KEYS and _names_a_status(value):
                    lines.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _STATE_SQL.search(node.value):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and _call_name(node) == "values" and _updates_jobs(node):
            keys = [k.arg for k in node.keywords] + [
                key.value for arg in node.args if isinstance(arg, ast.Dict)
                for key in arg.keys if isinstance(key, ast.Constant)
            ]  # fmt: skip
            lines += [node.lineno for key in keys if key in _STATE_KEYS]
    return sorted(set(lines))


def _updates_jobs(values: ast.Call) -> bool:
    """``values`` is the SET of a SQLAlchemy ``update(jobs)`` (``update(jobs).where(...).values(...)``)."""
    return any(
        isinstance(n, ast.Call) and _call_name(n) == "update" and any(
            isinstance(a, ast.Name) and a.id == "jobs" for a in n.args)
        for n in ast.walk(values.func)
    )  # fmt: skip


def view_constructions(tree: ast.Module) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and _call_name(n) == "JobView"]


def test_only_the_engine_sets_a_jobs_state() -> None:
    found = {
        path: lines
        for path, tree in _product_modules()
        if path not in STATE_WRITERS
        for lines in [state_writes(tree)]
        if lines
    }
    assert found == {}, f"a job's state set outside {ENGINE} (path: lines): {found}"


def test_one_place_builds_the_job_view() -> None:
    found = {
        path: lines for path, tree in _product_modules() for lines in [view_constructions(tree)] if lines
    }
    assert sum(len(lines) for lines in found.values()) <= 1, f"JobView built in several places: {found}"


def test_the_checks_find_each_kind_of_write() -> None:
    writes = [
        'failed = {**status, "state": str(JobStatus.FAILED), "message": m}',
        "state = JobState(status=target)",
        'state = state.model_copy(update={"status": JobStatus.CANCELLED})',
        'conn.execute("UPDATE jobs SET message = ?, status = ? WHERE id = ?", args)',
        "conn.execute(update(jobs).where(jobs.c.id == job_id).values(message=m, status=s))",
        'conn.execute(update(jobs).values({"status": s}))',
    ]
    for source in writes:
        assert state_writes(ast.parse(source)) == [1], source
    reads = [
        'shown = {"state": str(job.status)}',
        'done = status.get("state") in (None, str(JobStatus.PENDING))',
        'conn.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", args)',
        "conn.execute(update(jobs).where(jobs.c.id == job_id).values(cancel_requested=1))",
        "conn.execute(update(nodes).values(status=s))",
        "record = JobRecord(status=JobStatus.PENDING)",
    ]
    for source in reads:
        assert state_writes(ast.parse(source)) == [], source
    assert view_constructions(ast.parse("v = JobView(spec=s)\nw = reconcile.JobView(spec=s)")) == [1, 2]
