"""`gpuctl logs` of a local job (issue 32, item 4): each line with its time, a torchrun agent's
traceback for the notice signal folded into one line (any other traceback shown whole; `--raw` shows
everything as written), and `--attempt`, `--node` and `--tail` choosing what is shown."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.backends.output_log import time_head
from orchestrator.cli.main import main
from orchestrator.state.store import JobStore

T0 = datetime(2026, 11, 26, 7, 29, 11, 859_000, tzinfo=UTC)

AGENT_TRACEBACK = """\
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/usr/lib/python3.11/site-packages/torch/distributed/run.py", line 1028, in main
    run(args)
  File "/usr/lib/python3.11/site-packages/torch/distributed/elastic/agent/server/api.py", line 923, in _invoke_run
    time.sleep(monitor_interval)
  File "/usr/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 86, in _terminate_process_handler
    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)
torch.distributed.elastic.multiprocessing.api.SignalException: Process 1713 got signal: 15
"""
CRASH = """\
Traceback (most recent call last):
  File "train.py", line 12, in <module>
    loss = model(x)
ValueError: shapes do not match
"""
NOTICE = "gpuctl: preemption notice (SIGTERM): checkpoint of step 22 saved; rank 0 exiting 75 to be resumed"


@pytest.fixture
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    store = JobStore(tmp_path)
    job = store.create_job(name="j", user="u", team="t", backend="local", spec_json="{}", deadline=None,
                           now=datetime.now(UTC))  # fmt: skip
    return store.job_dir(job.id)


def _write(job_dir: Path, attempt: int, node: str, text: str, timed: bool = True) -> None:
    path = job_dir / f"attempt-{attempt}" / f"{job_dir.name}-a{attempt}-{node}" / "output.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    head = time_head(T0).decode() if timed else ""
    path.write_text("".join(head + line + "\n" for line in text.splitlines()))


def _logs(job_dir: Path, capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["logs", job_dir.name, *args]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_preempted_node_shows_the_notice_and_one_line_for_the_agents_traceback(
    job_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(job_dir, 1, "n0", f"world size 2\n{NOTICE}\n{AGENT_TRACEBACK}")
    lines = _logs(job_dir, capsys)
    assert lines == [
        "[attempt-1/n0] 2026-11-26T07:29:11Z world size 2",
        f"[attempt-1/n0] 2026-11-26T07:29:11Z {NOTICE}",
        "[attempt-1/n0] 2026-11-26T07:29:11Z gpuctl: torchrun agent (pid 1713) stopped by SIGTERM (a notice, "
        "a cancel or a stop); its traceback hidden, `gpuctl logs --raw` shows it",
    ]
    raw = _logs(job_dir, capsys, "--raw")
    assert len(raw) == 2 + len(AGENT_TRACEBACK.splitlines())
    assert raw[-1].endswith("SignalException: Process 1713 got signal: 15")
    assert raw[0] == "[attempt-1/n0] 2026-11-26T07:29:11.859Z\tworld size 2"


def test_a_real_crash_keeps_its_whole_traceback(job_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(job_dir, 1, "n0", CRASH + AGENT_TRACEBACK.splitlines()[0] + '\n  File "x"\n')  # cut short
    lines = _logs(job_dir, capsys, "--no-timestamps")
    assert lines == [f"[attempt-1/n0] {line}" for line in CRASH.splitlines()] + [
        "[attempt-1/n0] Traceback (most recent call last):",  # an unfinished traceback is shown at the end
        '[attempt-1/n0]   File "x"',
    ]


def test_lines_without_a_time_are_shown_without_one(
    job_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(job_dir, 1, "n0", "an older runner's line", timed=False)
    assert _logs(job_dir, capsys) == ["[attempt-1/n0] an older runner's line"]


def test_attempt_node_and_tail_choose_what_is_shown(
    job_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(job_dir, 1, "n0", "a1 n0 first\na1 n0 last")
    _write(job_dir, 1, "n1", "a1 n1")
    _write(job_dir, 2, "n0", "a2 n0")
    assert _logs(job_dir, capsys, "--no-timestamps") == [  # attempts in order, then nodes
        "[attempt-1/n0] a1 n0 first", "[attempt-1/n0] a1 n0 last", "[attempt-1/n1] a1 n1", "[attempt-2/n0] a2 n0"
    ]  # fmt: skip
    assert _logs(job_dir, capsys, "--no-timestamps", "--attempt", "1", "--node", "n0", "--tail", "1") == [
        "[attempt-1/n0] a1 n0 last"
    ]
    assert _logs(job_dir, capsys, "--no-timestamps", "--node", f"{job_dir.name}-a2-n0") == [
        "[attempt-2/n0] a2 n0"
    ]
    assert _logs(job_dir, capsys, "--no-timestamps", "--attempt", "2") == ["[attempt-2/n0] a2 n0"]


def test_a_choice_that_matches_nothing_names_what_there_is(
    job_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(job_dir, 1, "n0", "x")
    assert main(["logs", job_dir.name, "--node", "n7"]) == 2
    err = capsys.readouterr().err
    assert "no output of the job matches --node n7; it has: attempt-1/n0" in err and "To fix:" in err
