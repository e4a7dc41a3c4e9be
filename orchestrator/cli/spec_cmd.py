"""`gpuctl validate FILE`, `gpuctl spec schema` and `gpuctl spec status-schema`.

``validate`` reads a job file, or a Kubernetes manifest of GPUJobs (several documents, ``---`` between
them), and refuses what ``submit`` (or the operator) would refuse before anything is created, as far as
that is known without the backend: each spec goes through :func:`~orchestrator.controller.admission.admit`,
the one admission ``submit`` uses (market policy, team, GPU types and offers in the allowed zones, price
against ``market.max_hourly_usd``, ``goals.budget_usd`` and, when ``$GPUCTL_HOME/config.yaml`` has
budgets, the team's monthly budget). Left to ``submit`` (see :data:`CHECKED_AT_SUBMISSION`): what
needs the backend or this moment.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from orchestrator.backends.kubernetes.config import PRICE_CATALOG_ENV
from orchestrator.backends.kubernetes.manifests import check_kube_env, derived_name
from orchestrator.backends.slurm import load_cluster_config
from orchestrator.backends.slurm.placements import own_placements
from orchestrator.cli.output import print_json
from orchestrator.cli.secret_checks import warn_plain_secrets
from orchestrator.controller.admission import PlacementSearch, Refused, admit
from orchestrator.controller.placement import candidates_for, catalog_candidates
from orchestrator.costs.budgets import CostConfig, load_cost_config, with_namespace_team
from orchestrator.errors import UserError
from orchestrator.home import home_dir
from orchestrator.spec import JobSpec, job_spec_json_schema
from orchestrator.spec.loader import GPUJOB_KIND, SpecDocument, load_spec_documents
from orchestrator.terminal import terminal_text

VALIDATE_BACKENDS = ("local", "slurm", "kubernetes")
CHECKED_AT_SUBMISSION = (
    "the team's spend so far this month (the job store, or the GPUJobs' status), secret references "
    "(secrets files, from_env variables), SLURM partitions and GRES types (sinfo)"
)
"""What ``validate`` leaves to ``submit``: it needs the backend, or holds only at that moment."""


def register(sub: Any) -> None:
    validate = sub.add_parser(
        "validate",
        help="check a job file or GPUJob manifest as submit would, and print the normalized spec",
        description=(
            "Check a job file, or a Kubernetes manifest with GPUJobs (several documents allowed; "
            "other objects are passed over), and refuse what submission would refuse without asking "
            f"the backend: market policy, team, GPU types and offers, prices and budgets. Checked at "
            f"submission only: {CHECKED_AT_SUBMISSION}."
        ),
    )
    validate.add_argument("file", help="job file (YAML), or a manifest of GPUJobs")
    validate.add_argument("-q", "--quiet", action="store_true", help="print nothing when the file is valid")
    validate.add_argument(
        "--backend",
        choices=VALIDATE_BACKENDS,
        help="price and admit as this backend would (default local; GPUJobs: kubernetes)",
    )
    validate.add_argument(
        "--namespace",
        help="Kubernetes namespace the GPUJobs go to, for budgets.namespace_teams "
        "(default metadata.namespace, $GPUCTL_NAMESPACE or 'default')",
    )
    validate.add_argument(
        "--cluster-config",
        metavar="FILE",
        help="SLURM cluster config for --backend slurm (default $GPUCTL_SLURM_CONFIG or $GPUCTL_HOME/slurm.yaml)",
    )
    validate.set_defaults(run=run_validate)

    spec = sub.add_parser("spec", help="job spec tools")
    spec_sub = spec.add_subparsers(dest="spec_command", metavar="SUBCOMMAND", required=True)
    schema = spec_sub.add_parser("schema", help="print the job spec's JSON Schema")
    schema.set_defaults(run=run_schema)
    status_schema = spec_sub.add_parser(
        "status-schema", help="print the JSON Schema of the status document (`gpuctl status -o json`)"
    )
    status_schema.set_defaults(run=run_status_schema)


def run_validate(args: argparse.Namespace) -> int:
    documents = load_spec_documents(args.file, derive_name=derived_name)
    costs = load_cost_config(home_dir() / "config.yaml")
    for document in documents:
        if document.spec is not None:
            admit_offline(document, args, costs)
    if args.quiet:
        return 0
    for document in documents:
        _print_document(args.file, document, several=len(documents) > 1)
    print(
        terminal_text(f"gpuctl: note: checked at submission only: {CHECKED_AT_SUBMISSION}"), file=sys.stderr
    )
    return 0


def admit_offline(document: SpecDocument, args: argparse.Namespace, costs: CostConfig) -> None:
    """Raise what ``submit`` (or the operator, for a GPUJob) would refuse ``document``'s spec with,
    from the spec, the controller config and the prices alone: the team's spend this month is taken
    as nothing (``submit`` adds it)."""
    spec = document.spec
    assert spec is not None
    backend = _backend_of(document, args.backend)
    namespace = None
    if backend == "kubernetes":
        namespace = document.namespace or args.namespace or os.environ.get("GPUCTL_NAMESPACE") or "default"
        check_kube_env(spec, _name(args.file, document))  # from_env cannot reach pods
        if document.kind != GPUJOB_KIND:  # a job file without a team: as `submit` charges it
            spec = with_namespace_team(spec, costs, namespace)
    decision = admit(spec, _search(backend, args.cluster_config), costs, namespace=namespace)
    if isinstance(decision, Refused):
        if document.kind == GPUJOB_KIND:  # name the document: a manifest may hold several
            raise UserError(f"{_name(args.file, document)}: {decision.message}", decision.how_to_fix)
        raise decision.error()


def _backend_of(document: SpecDocument, asked: str | None) -> str:
    if document.kind != GPUJOB_KIND:
        return asked or "local"
    if asked not in (None, "kubernetes"):
        raise UserError(
            f"--backend {asked}: document {document.index} is a GPUJob, which runs on Kubernetes",
            "leave out --backend (or give --backend kubernetes) for a manifest of GPUJobs",
        )
    return "kubernetes"


def _search(backend: str, cluster_config: str | None) -> PlacementSearch:
    """Where a spec may run by this backend's prices, as ``submit`` searches: a SLURM cluster config's
    partitions (the config only: ``submit``'s preflight asks the cluster), the chart's price catalog
    (``$GPUCTL_PRICE_CATALOG``) on Kubernetes, else the catalog."""
    if backend == "slurm":
        config = load_cluster_config(cluster_config)

        def slurm(spec: JobSpec) -> Any:
            return candidates_for(spec, own_placements(spec, config))

        return slurm
    if backend == "kubernetes":
        catalog = os.environ.get(PRICE_CATALOG_ENV)
        return lambda spec: catalog_candidates(spec, catalog)
    return lambda spec: candidates_for(spec, None)


def _name(file: str, document: SpecDocument) -> str:
    if document.kind == GPUJOB_KIND:
        return f"{file} document {document.index} (GPUJob {document.object_name})"
    return file


def _print_document(file: str, document: SpecDocument, several: bool) -> None:
    where = f"{file}: document {document.index}" if several or document.kind == GPUJOB_KIND else file
    if document.spec is None:
        named = f" '{document.object_name}'" if document.object_name else ""
        print(terminal_text(f"{where}: {document.kind}{named} passed over (not a gpuctl object)"))
        return
    warn_plain_secrets(document.spec)  # references print as references: validate never shows a secret
    what = f"valid job spec '{document.spec.name}'"
    if document.kind == GPUJOB_KIND:
        what = f"valid GPUJob '{document.object_name}' (job spec '{document.spec.name}')"
    print(terminal_text(f"{where}: {what}"))
    print_json(document.spec.to_dict())


def run_schema(args: argparse.Namespace) -> int:
    print_json(job_spec_json_schema())
    return 0


def run_status_schema(args: argparse.Namespace) -> int:
    from orchestrator.cli.status_document import status_json_schema

    print_json(status_json_schema())
    return 0
