"""The chart's ledger database and cluster name, rendered by real Helm (helm-python-sdk) and validated
against the official Kubernetes schemas: the URL only from a Secret, the migrations as a hook Job."""

from __future__ import annotations

from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from tests.charts.test_kube_chart import CHART, KUBE_VERSION, by_kind, render

DATABASE = {"existingSecret": "gpuctl-ledger", "secretKey": "uri"}
HOOK_ANNOTATIONS = {
    "helm.sh/hook": "pre-install,pre-upgrade",
    "helm.sh/hook-weight": "0",
    "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
}


def _operator_env(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (deploy,) = by_kind(docs, "Deployment")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    env: list[dict[str, Any]] = container["env"]
    return env


def _named(env: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((e for e in env if e["name"] == name), None)


def test_without_database_values_nothing_of_it_renders() -> None:
    docs = render({})
    assert not by_kind(docs, "Job")
    env = _operator_env(docs)
    assert _named(env, "GPUCTL_DATABASE_URL") is None and _named(env, "GPUCTL_CLUSTER_NAME") is None
    assert "gpuctl-ledger" not in yaml.safe_dump_all(docs)


def test_the_operator_reads_the_database_url_from_the_secret() -> None:
    docs = render({"database": DATABASE, "clusterName": "prod-eu-1"})
    env = _operator_env(docs)
    assert _named(env, "GPUCTL_DATABASE_URL") == {
        "name": "GPUCTL_DATABASE_URL",
        "valueFrom": {"secretKeyRef": {"name": "gpuctl-ledger", "key": "uri"}},
    }
    assert _named(env, "GPUCTL_CLUSTER_NAME") == {"name": "GPUCTL_CLUSTER_NAME", "value": "prod-eu-1"}
    for cm in by_kind(docs, "ConfigMap"):  # no URL nor password in any ConfigMap
        assert "postgres" not in yaml.safe_dump(cm) and "gpuctl-ledger" not in yaml.safe_dump(cm)
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_the_migrations_run_as_a_hook_job_before_the_operator() -> None:
    docs = render({"database": DATABASE, "imagePullSecrets": [{"name": "regcred"}]})
    (job,) = by_kind(docs, "Job")
    kubernetes_validate.validate(job, KUBE_VERSION, strict=True)
    assert job["metadata"]["annotations"] == HOOK_ANNOTATIONS
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (deploy,) = by_kind(docs, "Deployment")
    assert container["image"] == deploy["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["command"] == ["gpuctl", "db", "upgrade"]
    assert _named(container["env"], "GPUCTL_DATABASE_URL") == _named(
        _operator_env(docs), "GPUCTL_DATABASE_URL"
    )
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod  # a pre-install hook runs before the chart's ServiceAccount exists
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    selector = deploy["spec"]["selector"]["matchLabels"]
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert not selector.items() <= labels.items(), "the operator's Deployment and Service must not select it"


def test_the_hook_can_be_left_off() -> None:
    docs = render({"database": {**DATABASE, "migrate": False}})
    assert not by_kind(docs, "Job") and _named(_operator_env(docs), "GPUCTL_DATABASE_URL") is not None


def test_lint_is_clean_with_a_database() -> None:
    report = helm_python.lint(CHART, {"database": DATABASE, "clusterName": "prod-eu-1"}, strict=True,
                              kube_version="v1.33.0")  # fmt: skip
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize(
    "bad",
    [
        {"database": {"url": "postgresql://u:secret@db/gpuctl"}},  # no URL (nor password) in values
        {"database": {"existingSecret": "Not_A_Name"}},
        {"database": {"existingSecret": "ok", "secretKey": ""}},
        {"clusterName": "Prod EU"},
    ],
)
def test_values_schema_rejects_bad_database_values(bad: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmError):
        render(bad)
