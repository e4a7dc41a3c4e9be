"""The job folder's layout is named in one module (orchestrator/state/job_dir.py), used everywhere."""

from __future__ import annotations

import ast
from pathlib import Path

from orchestrator.backends.local.backend import attempt_folders
from orchestrator.backends.slurm.script import output_path, progress_path, runs_path
from orchestrator.cli.log_files import LogSource
from orchestrator.state.job_dir import JobDir, job_dir_path
from orchestrator.state.store import JobStore

REPO = Path(__file__).resolve().parents[2]
LAYOUT_NAMES = ("progress.jsonl", "output.log", "monitor-summary", "slurm-attempt-", "slurm-runs.log")


def test_every_path_of_a_job_folder(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    folder = JobDir(store.job_dir("j-1"))
    assert (
        folder.path
        == job_dir_path(tmp_path, "j-1")
        == tmp_path / "jobs" / "j-1"
        == JobDir.of(tmp_path, "j-1").path
    )
    assert folder.progress == progress_path(folder.path) == folder.path / "progress.jsonl"
    assert folder.output_log(2, "j-1-a2-n0") == folder.path / "attempt-2" / "j-1-a2-n0" / "output.log"
    assert folder.monitor_summary("n0") == folder.path / "monitor-summary-n0.jsonl"
    assert output_path(folder.path, 3) == folder.slurm_output(3) == folder.path / "slurm-attempt-3.out"
    assert runs_path(folder.path) == folder.slurm_runs
    assert folder.checkpoints == folder.path / "checkpoints"


def test_readers_understand_what_the_layout_names(tmp_path: Path) -> None:
    folder = JobDir(tmp_path)
    log = folder.output_log(2, "j-1-a2-n0")
    log.parent.mkdir(parents=True)
    (tmp_path / "attempt-x").mkdir()
    assert attempt_folders(tmp_path) == ([folder.attempt(2)], [tmp_path / "attempt-x"])
    assert LogSource.of(log) == LogSource(2, "j-1-a2-n0", "attempt-2/n0")
    assert LogSource.of(folder.slurm_output(4)) == LogSource(4, None, "attempt-4")
    folder.monitor_summary("n1").write_text("")
    assert folder.monitor_summaries() == [folder.monitor_summary("n1")]


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def test_no_module_but_the_layout_spells_its_file_names() -> None:
    found = []
    for path in sorted([*(REPO / "orchestrator").rglob("*.py"), *(REPO / "operators").rglob("*.py")]):
        if path == REPO / "orchestrator" / "state" / "job_dir.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                found += [
                    f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in LAYOUT_NAMES if n in node.value
                ]
    assert found == [], "name the job folder's files with orchestrator.state.job_dir"
