"""The Containerfile of the gpuctl image agrees with the chart that runs it (fast checks; the build
itself is tests/charts/test_operator_image_build.py)."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

import pytest
import yaml

import orchestrator
from orchestrator.backends.kubernetes.config import GPUCTL_IMAGE, IMAGE_REPOSITORY, KubeConfig
from orchestrator.backends.kubernetes.manifests import _monitor_container
from tests.charts.containerfile import CONTAINERFILE, REPO, Stage, ignore_patterns, stages
from tests.charts.test_kube_chart import CHART, by_kind, render

BUILD_TOOLS = re.compile(r"\b(apt-get|apt|apk|dnf|yum|pip|gcc|g\+\+|cc|make|build-essential)\b")


@pytest.fixture(scope="module")
def chart_defaults() -> list[dict[str, Any]]:
    return render({})


@pytest.fixture(scope="module")
def final_stage() -> Stage:
    return stages(CONTAINERFILE.read_text())[1][-1]


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = by_kind(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_multi_stage_with_nothing_to_build_with_in_the_final_stage(final_stage: Stage) -> None:
    global_args, found = stages(CONTAINERFILE.read_text())
    assert len(found) == 2
    builder = found[0]
    assert builder.name and final_stage.name is None
    assert builder.base == final_stage.base == "${BASE_IMAGE}"
    assert re.fullmatch(r"docker\.io/library/python:3\.11-slim-\w+", global_args["BASE_IMAGE"])
    assert final_stage.args_of("COPY") == [f"--from={builder.name} /opt/gpuctl /opt/gpuctl"]
    for run in final_stage.args_of("RUN"):
        assert not BUILD_TOOLS.search(run), f"the final stage installs or builds: {run}"


def test_runs_as_the_charts_numeric_non_root_user(
    final_stage: Stage, chart_defaults: list[dict[str, Any]]
) -> None:
    (user,) = final_stage.args_of("USER")
    uid, gid = (int(part) for part in user.split(":"))  # numeric: runAsNonRoot can check it
    assert uid != 0 and gid != 0
    (deployment,) = by_kind(chart_defaults, "Deployment")
    pod_security = deployment["spec"]["template"]["spec"]["securityContext"]
    assert (pod_security["runAsUser"], pod_security["runAsGroup"]) == (uid, gid)
    passwd = " ".join(final_stage.args_of("RUN"))
    assert f":x:{uid}:{gid}:" in passwd, "the user has a passwd entry (getpass, ~ expansion)"


def test_installs_the_extras_the_chart_runs_and_no_torch(
    final_stage: Stage, chart_defaults: list[dict[str, Any]]
) -> None:
    builder = stages(CONTAINERFILE.read_text())[1][0]
    (install,) = [run for run in builder.args_of("RUN") if "pip install" in run]
    (extras,) = re.findall(r'"\.\[([a-z,]+)\]"', install)
    assert set(extras.split(",")) == {"kubernetes", "monitor"}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [
        r for extra in extras.split(",") for r in project["optional-dependencies"][extra]
    ]
    assert not [r for r in requirements if r.startswith(("torch", "gpuctl["))]
    # What the chart and the job pods run is on the image's PATH, from the virtual environment.
    env = " ".join(final_stage.args_of("ENV"))
    assert re.search(r"\bPATH=/opt/gpuctl/bin:", env)
    assert operator_container(chart_defaults)["command"][:2] == ["kopf", "run"]
    sidecar = _monitor_container("job", "job-n0", KubeConfig())
    assert sidecar["image"] == GPUCTL_IMAGE
    assert sidecar["command"][:3] == ["python", "-m", "orchestrator.monitor"]


def test_image_name_is_the_same_everywhere(chart_defaults: list[dict[str, Any]]) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert values["image"]["repository"] == IMAGE_REPOSITORY
    assert values["image"]["tag"] == ""  # the appVersion, which is the package version
    assert chart["appVersion"] == orchestrator.__version__
    assert f"{IMAGE_REPOSITORY}:{orchestrator.__version__}" == GPUCTL_IMAGE
    assert operator_container(chart_defaults)["image"] == GPUCTL_IMAGE
    (config_map,) = by_kind(chart_defaults, "ConfigMap")
    config = KubeConfig.from_dict(json.loads(config_map["data"]["operator.json"]))
    assert config.default_image == config.monitor_image == GPUCTL_IMAGE
    assert KubeConfig().default_image == KubeConfig().monitor_image == GPUCTL_IMAGE
    # The build commands written in the Containerfile and the chart's README tag that image.
    for doc in (CONTAINERFILE, CHART / "README.md"):
        tags = re.findall(rf"-t ({re.escape(IMAGE_REPOSITORY)}:\S+)", doc.read_text())
        assert tags and set(tags) == {GPUCTL_IMAGE}, doc


def test_build_context_holds_only_what_the_build_copies() -> None:
    patterns = ignore_patterns()
    assert patterns[0] == "*", "allow-list: .venv, .git, caches never reach the build"
    allowed = {p[1:] for p in patterns if p.startswith("!")}
    builder = stages(CONTAINERFILE.read_text())[1][0]
    copied = {src for args in builder.args_of("COPY") for src in args.split()[:-1]}
    assert allowed == copied
    assert "**/__pycache__" in patterns
