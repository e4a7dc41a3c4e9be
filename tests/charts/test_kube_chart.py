"""The Helm chart rendered by real Helm (helm-python-sdk), every manifest validated against Kubernetes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from orchestrator.backends.kubernetes.config import RESTRICTED_SECURITY_CONTEXT, KubeConfig
from orchestrator.costs.budgets import parse_cost_config, team_budget
from orchestrator.errors import UserError
from orchestrator.notify.config import parse_notify_config

CHART = Path(__file__).resolve().parents[2] / "charts/gpuctl"
KUBE_VERSION = "1.33"
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "everything": {
        "watchNamespaces": ["ml", "research"],
        "capacityProvider": "gke",
        "cloud": "gcp",
        "region": "us-central1",
        "gpuProducts": {"B200": ["NVIDIA-B200"]},
        "checkpoints": {"pvc": {"create": True, "storageClassName": "filestore"}},
        "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
        "priceCatalog": {"csv": "cloud,instance_type\n"},
        "budgets": {
            "teams": {"ml-research": 1000, "vision": 250.5},
            "namespaceTeams": {"ml": ["ml-research"], "research": ["ml-research", "vision"]},
        },
        "imagePullSecrets": [{"name": "regcred"}],
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "trainerSecurityContext": {"runAsUser": 1000},
        "kueueQueue": "team-a",
        "karpenterDoNotDisrupt": False,
        "notifications": {
            "teams": {
                "ml": [{"webhook": "https://hooks.example.com/ml", "format": "json", "events": ["failed"]}]
            },
            "readSecrets": True,
            "outboxClaim": "gpuctl-outbox",
        },
    },
    "no-rbac": {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "existing"}},
}


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    chart = helm_python.Chart.load(CHART)
    files = chart.render(values, name="gpuctl", namespace="gpuctl", is_install=True)
    return [doc for text in files.values() for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: render(values) for name, values in VARIANTS.items()}


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_manifest_is_valid_for_kubernetes(
    rendered: dict[str, list[dict[str, Any]]], variant: str
) -> None:
    docs = rendered[variant]
    assert docs
    for doc in docs:
        if doc["apiVersion"] == "monitoring.coreos.com/v1":
            continue  # the Prometheus Operator's CRD: no official schema; checked below
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_chart_crds_are_valid() -> None:
    chart = helm_python.Chart.load(CHART)
    crds = chart.crds
    assert [Path(c["name"]).name for c in crds] == ["gpujob.yaml"]
    kubernetes_validate.validate(
        yaml.safe_load((CHART / "crds/gpujob.yaml").read_text()), KUBE_VERSION, strict=True
    )


def test_lint_is_clean() -> None:
    for values in VARIANTS.values():
        report = helm_python.lint(CHART, values, strict=True, kube_version="v1.33.0")
        assert report["errors"] == []
        assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_rbac_is_least_privilege(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["everything"]
    roles = by_kind(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["ml", "research"]
    assert len(by_kind(docs, "RoleBinding")) == 2
    for role in roles:  # the operator reads the monitor sidecars' logs for GPU use
        log_verbs = {v for rule in role["rules"] if "pods/log" in rule["resources"] for v in rule["verbs"]}
        assert log_verbs == {"get"}
    for role in [*roles, *by_kind(docs, "ClusterRole")]:
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
    (cluster_role,) = by_kind(docs, "ClusterRole")
    cluster_verbs = {v for rule in cluster_role["rules"] for v in rule["verbs"]}
    assert cluster_verbs <= {"get", "list", "watch"}
    assert {r for rule in cluster_role["rules"] for r in rule["resources"]} == {
        "nodes",
        "nodepools",
        "namespaces",
        "customresourcedefinitions",
    }
    pools = [rule for rule in cluster_role["rules"] if "nodepools" in rule["resources"]]
    assert pools == [{"apiGroups": ["karpenter.sh"], "resources": ["nodepools"], "verbs": ["list"]}]
    none = rendered["no-rbac"]
    assert (
        not by_kind(none, "Role") and not by_kind(none, "ClusterRole") and not by_kind(none, "ServiceAccount")
    )
    (deploy,) = by_kind(none, "Deployment")
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == "existing"


def test_operator_pod_is_locked_down(rendered: dict[str, list[dict[str, Any]]]) -> None:
    (deploy,) = by_kind(rendered["default"], "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert "--namespace=gpuctl" in container["args"]


def test_config_map_feeds_the_backend_settings(rendered: dict[str, list[dict[str, Any]]]) -> None:
    (cm,) = by_kind(rendered["everything"], "ConfigMap")
    config = KubeConfig.from_dict(json.loads(cm["data"]["operator.json"]))
    assert config.capacity_provider == "gke"
    assert (config.cloud, config.region) == ("gcp", "us-central1")
    assert config.products_for("B200") == ["NVIDIA-B200"]
    assert config.regrow_after_s == 600 and config.spot_shortage_after_s == 600
    assert cm["data"]["prices.csv"].startswith("cloud,instance_type")
    (deploy,) = by_kind(rendered["everything"], "Deployment")
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "GPUCTL_PRICE_CATALOG" in env
    assert parse_cost_config(cm["data"]["costs.yaml"]).team_budgets_usd == {
        "ml-research": 1000,
        "vision": 250.5,
    }
    assert env["GPUCTL_COST_CONFIG"] == "/etc/gpuctl/costs.yaml"
    (default_deploy,) = by_kind(rendered["default"], "Deployment")
    default_env = {e["name"] for e in default_deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "GPUCTL_COST_CONFIG" not in default_env  # no team budgets: no cost config
    # The trainer's securityContext: restricted by default, the chart operator's additions merged in.
    assert config.trainer_security_context == {**RESTRICTED_SECURITY_CONTEXT, "runAsUser": 1000}
    (cm,) = by_kind(rendered["default"], "ConfigMap")
    default = KubeConfig.from_dict(json.loads(cm["data"]["operator.json"]))
    assert default.trainer_security_context == RESTRICTED_SECURITY_CONTEXT
    # Kueue only when the chart names a queue; Karpenter's do-not-disrupt unless turned off.
    assert (default.kueue_queue, default.karpenter_do_not_disrupt) == (None, True)
    assert (default.cloud, default.region) == (None, None)  # no pin: the cluster's zones alone
    assert (config.kueue_queue, config.karpenter_do_not_disrupt) == ("team-a", False)


def test_optional_service_monitor_and_pvcs(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert not by_kind(rendered["default"], "ServiceMonitor")
    (monitor,) = by_kind(rendered["everything"], "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "interval": "30s"}]
    services = {s["metadata"]["name"]: s for s in by_kind(rendered["everything"], "Service")}
    assert services["gpuctl-metrics"]["spec"]["ports"][0]["name"] == "metrics"
    pvcs = by_kind(rendered["everything"], "PersistentVolumeClaim")
    assert sorted(p["metadata"]["namespace"] for p in pvcs) == ["ml", "research"]


@pytest.mark.parametrize(
    "bad",
    [
        {"capacityProvider": "ibm"},
        {"cloud": "ibm"},
        {"region": "us east 1"},
        {"metrics": {"port": 0}},
        {"unknownKey": 1},
        {"watchNamespaces": ["Not_A_Namespace"]},
        {"kueueQueue": "Team A"},
        {"kueueQueue": "q" * 64},
        {"karpenterDoNotDisrupt": "yes"},
        {"intake": {"port": 70000}},
        {"intake": {"existingSecret": "Not A Name"}},
    ],
)
def test_values_schema_rejects_bad_values(bad: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmError):
        render(bad)


def test_notifications_config_secrets_and_outbox(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Team targets reach the operator's config.yaml; reading Secrets and a kept outbox are opt-in."""

    def secret_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            rule for role in by_kind(docs, "Role") for rule in role["rules"] if "secrets" in rule["resources"]
        ]

    def pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
        (deploy,) = by_kind(docs, "Deployment")
        spec: dict[str, Any] = deploy["spec"]["template"]["spec"]
        return spec

    everything, default = rendered["everything"], rendered["default"]
    # the operator reads no Secret unless told to (it creates the GPUJobs' intake tokens, never reads them)
    assert {v for rule in secret_rules(everything) for v in rule["verbs"]} == {"get", "create"}
    assert {v for rule in secret_rules(default) for v in rule["verbs"]} == {"create"}
    (cm,) = by_kind(everything, "ConfigMap")
    targets = parse_notify_config(cm["data"]["config.yaml"]).targets_for("ml")
    assert [t.webhook for t in targets] == ["https://hooks.example.com/ml"]
    (default_cm,) = by_kind(default, "ConfigMap")
    assert "config.yaml" not in default_cm["data"]
    env = {e["name"]: e.get("value") for e in pod(everything)["containers"][0]["env"]}
    assert env["GPUCTL_HOME"] == "/etc/gpuctl"
    assert env["GPUCTL_NOTIFY_OUTBOX"].startswith("/var/lib/gpuctl/")
    outbox = {v["name"]: v for v in pod(everything)["volumes"]}["outbox"]
    assert outbox["persistentVolumeClaim"] == {"claimName": "gpuctl-outbox"}
    assert "emptyDir" in {v["name"]: v for v in pod(default)["volumes"]}["outbox"]


@pytest.mark.parametrize("team", ["ml-research2", "default", "ML-Research", "vision"])
def test_the_teams_a_namespace_may_charge_reach_the_operator(
    rendered: dict[str, list[dict[str, Any]]], team: str
) -> None:
    (cm,) = by_kind(rendered["everything"], "ConfigMap")
    config = parse_cost_config(cm["data"]["costs.yaml"])  # what the operator's admission reads
    assert team_budget(config, "ml-research", "ml").monthly_usd == 1000
    with pytest.raises(UserError, match=f"team '{team}'"):
        team_budget(config, team, "ml")  # not ml's team, or no budget of its own: never unlimited
    assert config.namespaces_charging(team_budget(config, "ml-research", "ml")) == ("ml", "research")


def test_per_user_limits_and_the_watched_namespaces_reach_the_operator() -> None:
    budgets = {"users": {"alice": {"monthlyUsd": 300, "hourlyUsd": 40.5, "maxJobs": 3}, "bob": {"maxJobs": None}},
               "defaultUser": {"maxJobs": 2}}  # fmt: skip
    (cm,) = by_kind(render({"watchNamespaces": ["ml", "cv"], "budgets": budgets}), "ConfigMap")
    config = parse_cost_config(cm["data"]["costs.yaml"])  # what the operator reads
    alice, bob, carol = (config.users.of(u) for u in ("alice", "bob", "carol"))
    assert (alice.monthly_usd, alice.hourly_usd, alice.max_jobs) == (300.0, 40.5, 3)
    assert bob.max_jobs is None and carol.max_jobs == 2
    assert config.spend_namespaces == ("ml", "cv")
    (default_cm,) = by_kind(render({}), "ConfigMap")
    assert "costs.yaml" not in default_cm["data"], "no budgets: nothing summed, no cost config"


def test_unlisted_teams_share_the_other_teams_budget() -> None:
    (cm,) = by_kind(render({"budgets": {"otherTeamsMonthlyUsd": 0}}), "ConfigMap")
    config = parse_cost_config(cm["data"]["costs.yaml"])
    assert team_budget(config, "anyone").monthly_usd == 0.0


@pytest.mark.parametrize(
    ("budgets", "error"),
    [
        ({"teams": {"a": -98}}, "/budgets/teams/a"),
        ({"otherTeamsMonthlyUsd": -1}, "/budgets/otherTeamsMonthlyUsd"),
        ({"users": {"alice": {"maxJobs": 0}}}, "/budgets/users/alice/maxJobs"),
        ({"defaultUser": {"monthly_usd": 5}}, "/budgets/defaultUser"),
        ({"teams": {"a": "lots"}}, "/budgets/teams/a"),
        (
            {"namespaceTeams": {"elsewhere": ["a"]}},
            "budgets.namespaceTeams.elsewhere: namespace elsewhere is not watched",
        ),
    ],
)
def test_bad_budgets_fail_the_install(budgets: dict[str, Any], error: str) -> None:
    with pytest.raises(Exception, match=error):
        render({"budgets": budgets})


def test_intake_reaches_the_operator_and_the_job_pods(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """On by default: a Service for the monitors' pushes, the key from a Secret the chart keeps, the
    URL in the backend's config (job pods get it), and Secrets created (never read) in job namespaces."""
    docs = rendered["default"]
    (cm,) = by_kind(docs, "ConfigMap")
    config = KubeConfig.from_dict(json.loads(cm["data"]["operator.json"]))
    assert config.intake_url == "http://gpuctl-intake.gpuctl.svc:8081"
    services = {s["metadata"]["name"]: s for s in by_kind(docs, "Service")}
    assert services["gpuctl-intake"]["spec"]["ports"][0]["targetPort"] == "intake"
    (secret,) = by_kind(docs, "Secret")
    assert len(secret["data"]["intake-key"]) >= 16
    (deploy,) = by_kind(docs, "Deployment")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["GPUCTL_INTAKE_PORT"]["value"] == "8081"
    assert env["GPUCTL_INTAKE_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "gpuctl-intake",
        "key": "intake-key",
    }
    assert {"name": "intake", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    (role,) = by_kind(docs, "Role")
    secret_verbs = {v for rule in role["rules"] if "secrets" in rule["resources"] for v in rule["verbs"]}
    assert secret_verbs == {"create"}
    off = render({"intake": {"enabled": False}, "notifications": {"readSecrets": False}})
    (cm,) = by_kind(off, "ConfigMap")
    assert KubeConfig.from_dict(json.loads(cm["data"]["operator.json"])).intake_url is None
    assert not by_kind(off, "Secret") and len(by_kind(off, "Service")) == 1
    (role,) = by_kind(off, "Role")
    assert not [rule for rule in role["rules"] if "secrets" in rule["resources"]]
    kept = render({"intake": {"existingSecret": "my-key"}})
    assert not by_kind(kept, "Secret")
    (deploy,) = by_kind(kept, "Deployment")
    env = {e["name"]: e for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPUCTL_INTAKE_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "my-key"
