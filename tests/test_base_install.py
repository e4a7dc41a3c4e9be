"""The base install (``pip install gpuctl``, no extras) runs every command that needs no optional part,
and a command that needs a missing extra says in one line which to install (exit 2, no traceback).

This builds a real virtual environment with only the base dependencies, so it is slow (pip resolves
and installs them) and catches what a `[dev]` install hides: a module-level import of an extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart" / "job.yaml"
OPTIONAL_MODULES = ("torch", "kubernetes", "kopf", "pynvml", "sklearn", "starlette", "uvicorn")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("base-install")
    venv.create(root / "venv", with_pip=True)
    python = root / "venv" / "bin" / "python"
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e", str(REPO)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(
        PATH=f"{root / 'venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        GPUCTL_HOME=str(root / "home"),
        COLUMNS="120",
    )
    return env


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


def gpuctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run(env, "gpuctl", *args)


def test_the_base_install_has_no_optional_part(base_env: dict[str, str]) -> None:
    """Guards the other tests: they mean nothing if an extra slipped into the base dependencies."""
    probe = "import importlib.util as u, json, sys; print(json.dumps({m: bool(u.find_spec(m)) for m in sys.argv[1:]}))"
    proc = run(base_env, "python", "-c", probe, *OPTIONAL_MODULES)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == dict.fromkeys(OPTIONAL_MODULES, False)


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["validate", str(QUICKSTART)],
        ["spec", "schema"],
        ["gpus"],
        ["gpus", "-o", "json"],
        ["list"],
        ["cost", "report"],
        ["sbatch", str(QUICKSTART), "--dry-run"],
        ["completion", "bash"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_commands_without_extras_work(base_env: dict[str, str], args: list[str]) -> None:
    proc = gpuctl(base_env, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_simulate_works_without_extras(base_env: dict[str, str], tmp_path: Path) -> None:
    trace = tmp_path / "us-x-1a_v100_1.json"
    available = (np.random.default_rng(0).random(200) < 0.6).astype(int).tolist()
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": available}))
    proc = gpuctl(
        base_env, "simulate", "--trace", str(trace), "--compute-hours", "6", "--deadline-hours", "8",
        "--changeover-hours", "0.2", "--on-demand-price", "3.06", "--spot-price", "0.918", "--starts", "3",
        "-o", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["status", "some-job", "--backend", "kubernetes"], "kubernetes"),
        (["list", "--backend", "kubernetes"], "kubernetes"),
        (["logs", "some-job", "--backend", "kubernetes"], "kubernetes"),
        (["cancel", "some-job", "--backend", "kubernetes"], "kubernetes"),
        (["submit", str(QUICKSTART), "--backend", "kubernetes", "--detach"], "kubernetes"),
        (["submit", str(QUICKSTART)], "train"),
        (["controller", "run", "--exit-when-idle"], "train"),
        (["dashboard", "--port", "0"], "dashboard"),
    ],
    ids=lambda a: " ".join(a[:3]) if isinstance(a, list) else a,
)
def test_a_command_needing_a_missing_extra_names_it(
    base_env: dict[str, str], args: list[str], extra: str
) -> None:
    proc = gpuctl(base_env, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"To fix: pip install 'gpuctl[{extra}]'" in proc.stderr
    assert gpuctl(base_env, "list", "-o", "json").stdout.strip() == "[]", "nothing may be stored"


def test_the_monitor_without_nvml_bindings_names_the_extra(base_env: dict[str, str]) -> None:
    proc = gpuctl(base_env, "monitor", "--source", "nvml", "--port", "-1", "--once")
    assert proc.returncode == 3, proc.stdout + proc.stderr  # 3: the machine lacks something (no NVML)
    assert "Traceback" not in proc.stderr
    assert "pip install 'gpuctl[monitor]'" in proc.stderr


def test_the_training_runtime_without_torch_names_the_extra(base_env: dict[str, str]) -> None:
    proc = run(base_env, "python", "-c", "from orchestrator import runtime")
    assert proc.returncode != 0
    assert "pip install 'gpuctl[train]'" in proc.stderr.splitlines()[-1]


def test_the_gpuctl_script_runs_from_outside_the_checkout(base_env: dict[str, str], tmp_path: Path) -> None:
    """The console script (not ``python -m``) is what users run; cwd must not matter."""
    proc = subprocess.run(
        ["gpuctl", "--version"], env=base_env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("gpuctl ")
