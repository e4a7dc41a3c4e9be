"""The GPUJob examples run what they name (issue 32, item 8): each has an image, and the quickstart's
command passes only options its script takes, from the workdir the image puts it in."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.spec import JobSpec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kubernetes" / "gpujob.yaml"
IMAGE_FILE = ROOT / "examples" / "kubernetes" / "quickstart.Containerfile"


def _jobs() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d["spec"] for d in yaml.safe_load_all(EXAMPLE.read_text()) if d}


@pytest.mark.parametrize("name", sorted(_jobs()))
def test_every_example_names_its_image(name: str) -> None:
    assert _jobs()[name].get("image"), f"{name}: without an image it runs in the operator's (no torch)"


def test_the_quickstart_gpujob_runs_the_quickstart_script_with_options_it_takes() -> None:
    spec = JobSpec.model_validate({"name": "quickstart", **_jobs()["quickstart"]})
    local = yaml.safe_load((ROOT / "examples" / "quickstart" / "job.yaml").read_text())
    assert spec.command_argv[0] == local["command"].split()[0] == "train.py"
    image = IMAGE_FILE.read_text()
    assert "COPY examples/quickstart ./examples/quickstart" in image and "WORKDIR /app" in image
    assert spec.workdir == "/app/examples/quickstart"
    usage = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart" / "train.py"), "--help"],
                           capture_output=True, text=True, timeout=120, check=True).stdout  # fmt: skip
    taken = set(re.findall(r"--[a-z][a-z0-9-]*", usage))
    asked = {arg.split("=", 1)[0] for arg in spec.command_argv[1:] if arg.startswith("--")}
    assert asked and asked <= taken, f"train.py takes {sorted(taken)}, not {sorted(asked - taken)}"
