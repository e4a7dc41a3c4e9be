"""Bad job files get one clear message each: the field path, the YAML line, and how to fix it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import SpecError
from orchestrator.spec import job_spec_json_schema, load_spec_text

OK = "name: ok\ncommand: train.py\n"

BROKEN = [
    (
        "unknown field",
        "name: a\ncommand: x\ncomand: y\n",
        "comand (line 3): unknown field. To fix: did you mean 'command'?",
    ),
    ("missing command", "name: a\n", "command: required field is missing. To fix: add 'command:'"),
    ("bad name", "name: My Job\ncommand: x\n", "name (line 1): String should match pattern"),
    (
        "wrong type",
        "name: a\ncommand: x\nresources:\n  gpus_per_node: two\n",
        "resources.gpus_per_node (line 4): Input should be a valid integer",
    ),
    (
        "min above max",
        "name: a\ncommand: x\nresources:\n  nodes: {min: 3, max: 2}\n",
        "resources.nodes (line 4): min (3) is above max (2)",
    ),
    (
        "zero nodes",
        "name: a\ncommand: x\nresources: {nodes: 0}\n",
        "resources.nodes (line 3): nodes must be at least 1",
    ),
    (
        "min zero",
        "name: a\ncommand: x\nresources:\n  nodes: {min: 0, max: 2}\n",
        "resources.nodes.min (line 4): Input should be greater than or equal to 1. To fix: use a value >= 1",
    ),
    (
        "deadline in the past",
        "name: a\ncommand: x\ngoals:\n  deadline: '2020-01-01T00:00:00Z'\n",
        "goals.deadline (line 4): '2020-01-01T00:00:00Z' is in the past",
    ),
    (
        "deadline gibberish",
        "name: a\ncommand: x\ngoals: {deadline: soon}\n",
        "goals.deadline (line 3): 'soon' is neither a duration",
    ),
    (
        "bad market mode",
        "name: a\ncommand: x\nmarket: {mode: cheap}\n",
        "market.mode (line 3): Input should be 'spot', 'on-demand' or 'spot-with-fallback'",
    ),
    (
        "negative budget",
        "name: a\ncommand: x\ngoals: {budget_usd: -5}\n",
        "goals.budget_usd (line 3): Input should be greater than 0",
    ),
    (
        "bad checkpoint interval",
        "name: a\ncommand: x\ncheckpoint: {every: often}\n",
        "checkpoint.every (line 3): 'often' is not a duration",
    ),
    ("empty command", "name: a\ncommand: ''\n", "command (line 2): command is empty"),
    (
        "bad env name",
        "name: a\ncommand: x\nenv: {'1X': y}\n",
        "env (line 3): '1X' is not a valid environment variable name",
    ),
    ("malformed yaml", "name: a\n command: [\n", "malformed YAML (line 2, column 9)"),
    ("not a mapping", "- a\n- b\n", "the file must be one YAML mapping"),
]


@pytest.mark.parametrize(("case", "text", "expected"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_spec_is_explained(case: str, text: str, expected: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec_text(text, source="job.yaml")
    message = str(err.value)
    assert expected in message, message
    assert "To fix" in message, message


def test_valid_spec_fills_defaults() -> None:
    spec = load_spec_text(OK + "resources: {nodes: {min: 1, max: 4}}\n")
    assert spec.resources.min_nodes == 1 and spec.resources.max_nodes == 4 and spec.resources.elastic
    assert spec.command_argv == ["train.py"]
    assert spec.market.mode.value == "spot-with-fallback"


def test_cli_validate_exits_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text("name: a\ncommand: x\nresources: {nodes: {min: 3, max: 1}}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "validate", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "resources.nodes (line 3): min (3) is above max (1)" in proc.stderr
    assert "Traceback" not in proc.stderr
    missing = subprocess.run([sys.executable, "-m", "orchestrator.cli", "validate", str(tmp_path / "nope.yaml")],
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_schema_is_json_schema_of_the_model() -> None:
    schema = job_spec_json_schema()
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"name", "command"}
    json.dumps(schema)


def test_examples_validate() -> None:
    from orchestrator.spec import load_spec_file

    for path in Path(__file__).resolve().parents[2].glob("examples/*/job.yaml"):
        load_spec_file(path)


@pytest.mark.parametrize(
    "name",
    ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "CUDA_VISIBLE_DEVICES", "rocr_visible_devices"],
)
def test_device_selection_env_is_refused(name: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec_text(OK + f"env: {{{name}: all, FOO: bar}}\n", source="job.yaml")
    message = str(err.value)
    assert f"env (line 3): {name} would choose the GPUs the job sees" in message, message
    assert "remove them from env" in message and "To fix" in message and "FOO" not in message
    assert load_spec_text(OK + "env: {CUDA_LAUNCH_BLOCKING: '1', NVIDIAX: y}\n").env["NVIDIAX"] == "y"


@pytest.mark.parametrize(
    "field",
    [
        "notify: [{email: {to: [a@b.example], from: c@d.example, host: smtp.example.com, "
        "username: me, password: hunter2-plain}, events: [failed]}]",
        "notify: [{webhook: [hunter2-plain], events: [failed]}]",
        "env: {TOKEN: [hunter2-plain]}",
    ],
)
def test_errors_never_repeat_a_value_that_may_be_a_credential(field: str) -> None:
    text = "name: t\ncommand: [python, x.py]\nresources: {gpu_types: [V100]}\n" + field + "\n"
    with pytest.raises(SpecError) as raised:
        load_spec_text(text)
    assert "hunter2" not in str(raised.value)
