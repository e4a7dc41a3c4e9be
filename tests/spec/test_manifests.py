"""GPUJob manifests: several YAML documents, each GPUJob's `spec` read as a job spec, as the operator
reads it; errors name the document. A job file stays one document, and says so when it is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.backends.kubernetes import crd
from orchestrator.backends.kubernetes.manifests import derived_name
from orchestrator.errors import SpecError
from orchestrator.spec import load_spec_file
from orchestrator.spec.loader import (
    GPUJOB_API_VERSION,
    GPUJOB_KIND,
    OBJECT_NAME,
    SpecDocument,
    load_spec_documents,
)
from orchestrator.userfiles import MAX_VALUES, ContentError, compose_yaml_documents, load_yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kubernetes" / "gpujob.yaml"

GPUJOB = """apiVersion: gpuctl.dev/v1alpha1
kind: GPUJob
metadata:
  name: {name}
spec:
  command: train.py
  resources: {{gpu_types: [L4], nodes: {nodes}}}
"""


def write(tmp_path: Path, *documents: str) -> Path:
    path = tmp_path / "manifest.yaml"
    path.write_text("---\n".join(documents))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_spec_documents(path, derive_name=derived_name)
    return caught.value.problems


def test_the_shipped_example_reads_as_two_gpujobs() -> None:
    found = load_spec_documents(EXAMPLE, derive_name=derived_name)
    assert [(d.index, d.kind, d.object_name) for d in found] == [
        (1, "GPUJob", "llama-finetune"),
        (2, "GPUJob", "quickstart"),
    ]
    assert [d.spec.name for d in found if d.spec] == ["llama-finetune", "quickstart"]


def test_a_gpujob_spec_is_read_as_the_operator_reads_it() -> None:
    from orchestrator.backends.kubernetes.gpujob import job_spec  # the operator's reading of a GPUJob

    for document in load_spec_documents(EXAMPLE, derive_name=derived_name):
        assert document.spec is not None and document.object_name is not None
        operator = job_spec(document.object_name, "ml", {**_raw_spec(document), "user": "x"})
        assert document.spec.model_copy(update={"user": "ml"}) == operator


def _raw_spec(document: SpecDocument) -> dict[str, object]:
    import yaml

    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    raw: dict[str, object] = docs[document.index - 1]["spec"]
    return raw


def test_the_shape_constants_are_the_crds_and_the_operators() -> None:
    from orchestrator.backends.kubernetes import gpujob

    assert (GPUJOB_API_VERSION, GPUJOB_KIND) == (crd.API_VERSION, crd.KIND)
    assert OBJECT_NAME.pattern == gpujob.OBJECT_NAME.pattern


def test_gpujob_fields_are_not_unknown_fields_and_spec_errors_name_document_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, GPUJOB.format(name="good", nodes=1), GPUJOB.format(name="bad", nodes=0))
    found = problems(path)
    assert len(found) == 1, found
    assert found[0].startswith("document 2 (line 9), GPUJob 'bad': spec.resources.nodes (line 15): ")
    assert "unknown field" not in found[0]


def test_a_metadata_name_that_is_no_job_name_gets_the_operators_derived_name(tmp_path: Path) -> None:
    (document,) = load_spec_documents(write(tmp_path, GPUJOB.format(name="team.run-1", nodes=1)),
                                      derive_name=derived_name)  # fmt: skip
    assert document.object_name == "team.run-1"
    assert document.spec is not None and document.spec.name == derived_name("team.run-1")


def test_other_kinds_are_passed_over_and_gpujob_shape_errors_are_listed(tmp_path: Path) -> None:
    config_map = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: b}\n"
    assert [(d.kind, d.spec) for d in load_spec_documents(write(tmp_path, config_map))] == [
        ("v1/ConfigMap", None)
    ]
    broken = "apiVersion: gpuctl.dev/v1\nkind: GPUJob\nmetdata: {name: x}\nspec: {command: x}\n"
    plain_job = "name: a\ncommand: x\n"
    found = problems(write(tmp_path, config_map, broken, plain_job))
    assert any(p.startswith("document 2 (line 6), GPUJob: 'metdata': unknown field. To fix: did you mean 'metadata'?")
               for p in found), found  # fmt: skip
    assert any(
        "apiVersion is 'gpuctl.dev/v1'. To fix: write apiVersion: gpuctl.dev/v1alpha1" in p for p in found
    )
    assert any(p.startswith("document 2") and "metadata.name is missing" in p for p in found)
    assert any(p.startswith("document 3 (line 11): not a Kubernetes object") for p in found), found


def test_a_job_file_is_one_document_and_a_manifest_is_no_job_file(tmp_path: Path) -> None:
    two_jobs = write(tmp_path, "name: a\ncommand: x\n", "name: b\ncommand: y\n")
    for load in (load_spec_file, load_spec_documents):
        with pytest.raises(SpecError) as caught:
            load(two_jobs)
        assert caught.value.problems[0].startswith(
            "document 2 (line 4): a second YAML document: a job file holds one job"
        )
    with pytest.raises(SpecError) as caught:
        load_spec_file(EXAMPLE)  # what `gpuctl submit` reads
    (problem,) = caught.value.problems
    assert (
        "a Kubernetes object (kind 'GPUJob'), not a job file. To fix: apply it with `kubectl apply -f FILE`"
        in problem
    )
    assert "unknown field" not in problem


def test_a_second_document_in_a_one_document_file_is_named_as_such() -> None:
    with pytest.raises(ContentError) as caught:
        load_yaml("budgets: {}\n---\nreports: {}\n", "controller config")
    assert caught.value.problem == "more than one YAML document: another starts (line 2)"
    assert "indentation" not in str(caught.value) and "'---'" in (caught.value.fix or "")


def test_every_document_has_the_one_document_limits() -> None:
    assert [data for _, data in compose_yaml_documents("a: 1\n---\nb: 2\n", "f")] == [{"a": 1}, {"b": 2}]
    with pytest.raises(ContentError, match="YAML alias"):
        compose_yaml_documents("a: 1\n---\nb: &x 1\nc: *x\n", "f")
    with pytest.raises(ContentError, match="given twice"):
        compose_yaml_documents("a: 1\n---\nb: 1\nb: 2\n", "f")
    many = "---\n".join("[" + ", ".join(["0"] * 1000) + "]\n" for _ in range(MAX_VALUES // 1000 + 1))
    with pytest.raises(ContentError, match=f"more than {MAX_VALUES}"):  # counted over the whole file
        compose_yaml_documents(many, "f")
