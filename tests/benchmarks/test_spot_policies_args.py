"""The two market-policy benchmarks share their options and how they find the traces."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _script(name: str) -> ModuleType:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


@pytest.mark.parametrize("name", ["spot_policies", "spot_policies_real"])
def test_both_benchmarks_take_the_shared_options(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script(name)
    shared = ["--traces", str(tmp_path), "--starts", "3", "--seed", "1", "--market-log-hours", "0"]
    assert script.main([*shared, "--markdown"]) == 2  # parsed; no traces in the folder
    assert f"no traces under {tmp_path}" in capsys.readouterr().err


def test_the_shared_parser_defaults() -> None:
    args = _script("spot_policies_args").parser("x", "default 1").parse_args([])
    assert args.starts is None and args.seed == 0 and not args.markdown
    assert args.market_log_hours == 168.0
    assert args.traces.name == "spot-traces"
