"""Property-based fuzzing of job files (issue 13).

For random YAML documents, random text, and mutations of the quickstart example:

- loading raises nothing but :class:`SpecError` (so `gpuctl validate` never prints a traceback), takes
  under 2 s and says so in a short message;
- every spec it accepts can be stored and read back (``model_dump_json`` round-trips through
  :func:`spec_from_json`, as the controller reads it) and rendered by the backends: the SLURM batch
  script and the Kubernetes pod.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.backends.base import LaunchRequest, Placement
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.manifests import build_pod, kube_env_problems
from orchestrator.backends.monitoring import MonitorSettings
from orchestrator.backends.slurm import SlurmClusterConfig, render_batch_job
from orchestrator.catalog.offers import MarketKind
from orchestrator.errors import SpecError
from orchestrator.spec import JobSpec, load_spec_text, spec_from_json

EXAMPLE = (Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "job.yaml").read_text()
SLURM = SlurmClusterConfig(
    gres_types={"A100-80GB": "a100"}, partitions={MarketKind.SPOT: "preempt", MarketKind.ON_DEMAND: "batch"}
)
PLACEMENT = Placement("A100-80GB", MarketKind.SPOT, "aws", "us-east-1", "a", "p4d", 8, 10.0, 30.0, "test")
FIELDS = sorted({*JobSpec.model_fields, *(k for m in ("resources", "market", "goals", "checkpoint",
                 "recovery", "policies") for k in JobSpec.model_fields[m].annotation.model_fields)})  # type: ignore[union-attr]  # fmt: skip
EXAMPLES_CI = 2000

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(
        [
            "1h",
            "90s",
            "0",
            "-5m",
            "99999999999d",
            "2026-12-01T18:00:00Z",
            "9999-01-01",
            "spot",
            "on-demand",
            "V100",
            "train.py --x",
            "off",
            "auto",
            "",
            "\x00",
            "a\x1b[2Jb",
            "'\"",
            "1e400",
            ".inf",
            "-.nan",
            "4097",
            "16",
            "17",
            "0.0001",
        ]
    ),
)
durations = st.builds(
    lambda n, unit: f"{n}{unit}", st.integers(0, 10**12), st.sampled_from(["", "s", "m", "h", "d"])
)
env_references = st.fixed_dictionaries(
    {"secret": st.sampled_from(["hf", "a.b", "Bad_", "..", ""]), "key": st.sampled_from(["token", "a/b"])}
) | st.fixed_dictionaries({"from_env": st.sampled_from(["HF_TOKEN", "1x", ""])})
plausible = st.one_of(
    st.integers(0, 5000),
    st.floats(min_value=0, max_value=1e10),
    durations,
    st.text(st.characters(codec="utf-8"), max_size=12),
    st.lists(st.text(st.characters(codec="utf-8"), min_size=1, max_size=8), min_size=1, max_size=3),
    st.fixed_dictionaries({"min": st.integers(0, 5000), "max": st.integers(0, 5000)}),
    st.dictionaries(
        st.from_regex(r"[A-Z_][A-Z0-9_]{0,6}", fullmatch=True),
        st.text(max_size=8) | env_references,
        max_size=3,
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


@st.composite
def mutated_example(draw: st.DrawFn) -> str:
    """The quickstart spec with a few fields replaced, removed or added, at any depth."""
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE)
    for _ in range(draw(st.integers(1, 3))):
        section = draw(
            st.sampled_from(["", "resources", "market", "goals", "checkpoint", "recovery", "policies"])
        )
        target = doc if not section else doc.setdefault(section, {})
        if not isinstance(target, dict):
            continue
        model = JobSpec.model_fields[section].annotation if section else JobSpec
        own = sorted(model.model_fields)  # type: ignore[union-attr]
        key = draw(st.sampled_from(own) if draw(st.integers(0, 4)) else st.sampled_from(FIELDS))
        action = draw(st.sampled_from(["set", "set", "set", "drop"]))
        if action == "drop":
            target.pop(key, None)
        else:
            target[key] = draw(plausible if draw(st.integers(0, 9)) < 7 else values)
    text = yaml.safe_dump(doc, allow_unicode=draw(st.booleans()), sort_keys=False)
    if draw(st.integers(0, 3)) == 0:  # and a textual mutation: a character inserted or a span deleted
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(max_size=3)) + text[at + draw(st.integers(0, 3)) :]
    return text


yaml_documents = st.builds(lambda v: yaml.safe_dump(v, allow_unicode=True), values)
raw_text = st.text(alphabet=st.sampled_from(list("abn:-[]{}&*!|>'\"#\n ,.0123456789\\\t")), max_size=80)


def check(text: str) -> None:
    started = time.monotonic()
    try:
        spec = load_spec_text(text, source="job.yaml")
    except SpecError as err:
        assert "To fix" in str(err) and len(str(err)) < 5000, str(err)[:2000]
        return
    finally:
        assert time.monotonic() - started < 2.0
    assert spec_from_json(spec.model_dump_json()) == spec
    request = LaunchRequest(
        job_id="fuzz-1", attempt=1, spec=spec, placement=PLACEMENT,
        node_ids=[f"fuzz-1-a1-n{i}" for i in range(spec.resources.max_nodes)],
        min_nodes=spec.resources.min_nodes, max_nodes=spec.resources.max_nodes,
        checkpoint_dir=spec.checkpoint.path or "/tmp/ckpt", job_dir=Path("/tmp/job dir"),
    )  # fmt: skip
    render_batch_job(request, SLURM, MonitorSettings(), requeue_on_notice=False).script.encode("utf-8")
    kube = KubeConfig(
        gpu_products={t: ["NVIDIA-TEST"] for t in (*spec.resources.gpu_types, PLACEMENT.gpu_type)}
    )
    pod_of_node_0 = partial(build_pod, spec, PLACEMENT, job="fuzz-1", namespace="ns", attempt=1, node_index=0,
                            config=kube, attempt_nodes=spec.resources.max_nodes)  # fmt: skip
    if kube_env_problems(spec):  # from_env cannot reach a pod: refused clearly
        with pytest.raises(SpecError, match="To fix"):
            pod_of_node_0()
        return
    pod = pod_of_node_0()
    yaml.safe_dump(pod).encode("utf-8")


FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.slow  # about 20 s: CI runs it
@settings(FUZZ, max_examples=EXAMPLES_CI)
@given(mutated_example())
def test_mutations_of_the_example_are_refused_clearly_or_stored_and_rendered(text: str) -> None:
    check(text)


@pytest.mark.slow
@settings(FUZZ, max_examples=EXAMPLES_CI // 4)
@given(yaml_documents | raw_text)
def test_random_documents_are_refused_clearly_or_stored_and_rendered(text: str) -> None:
    check(text)


def test_the_example_itself_passes_the_checks() -> None:
    check(EXAMPLE)
