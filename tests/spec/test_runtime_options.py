"""``runtime: {tune: off|auto}``: off by default, YAML's bare ``off`` read as off, anything else refused
with the field's path; every backend hands the setting to the training processes (GPUCTL_TUNE)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import contract
from orchestrator.backends.slurm.placements import request_for
from orchestrator.backends.slurm.script import contract_env
from orchestrator.errors import UserError
from orchestrator.spec import job_spec_json_schema, load_spec_text
from orchestrator.spec.model import Tune
from tests.backends.kubernetes.test_kube_manifests import pod, spec
from tests.backends.slurm.test_slurm_script import CONFIG, spec_text


def test_tune_is_off_unless_asked() -> None:
    assert load_spec_text("name: a\ncommand: train.py\n").runtime.tune is Tune.OFF
    assert load_spec_text("name: a\ncommand: train.py\nruntime: {tune: off}\n").runtime.tune is Tune.OFF
    assert load_spec_text("name: a\ncommand: train.py\nruntime: {tune: auto}\n").runtime.tune is Tune.AUTO
    assert job_spec_json_schema()["properties"]["runtime"]


@pytest.mark.parametrize("body", ["runtime: {tune: on}", "runtime: {tune: fast}", "runtime: {tuning: auto}"])
def test_a_bad_runtime_option_names_its_path(body: str) -> None:
    with pytest.raises(UserError, match=r"runtime\.tun"):
        load_spec_text(f"name: a\ncommand: train.py\n{body}\n")


def test_every_backend_passes_tune_to_the_training_processes(tmp_path: Path) -> None:
    kube = {
        e["name"]: e.get("value") for e in pod(spec(runtime={"tune": "auto"}))["spec"]["containers"][0]["env"]
    }
    assert kube[contract.ENV_TUNE] == "auto"
    assert {e["name"]: e.get("value") for e in pod(spec())["spec"]["containers"][0]["env"]}[
        contract.ENV_TUNE
    ] == "off"
    request = request_for(load_spec_text(spec_text(runtime={"tune": "auto"})), "train-1", tmp_path, CONFIG)
    assert contract_env(request)[contract.ENV_TUNE] == "auto"
