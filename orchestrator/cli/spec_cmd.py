"""`gpuctl validate FILE`, `gpuctl spec schema` and `gpuctl spec status-schema`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from orchestrator.cli.secret_checks import warn_plain_secrets
from orchestrator.controller.admission import policy_refusal
from orchestrator.spec import job_spec_json_schema, load_spec_file


def register(sub: Any) -> None:
    validate = sub.add_parser("validate", help="check a job file and print the normalized spec")
    validate.add_argument("file")
    validate.add_argument("-q", "--quiet", action="store_true", help="print nothing when the file is valid")
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
    spec = load_spec_file(args.file)
    refused = policy_refusal(spec)  # the spec alone: prices and budgets are checked at submission
    if refused is not None:
        raise refused.error()
    if not args.quiet:
        warn_plain_secrets(spec)  # references print as references: validate never shows a secret
        print(f"{args.file}: valid job spec '{spec.name}'")
        print(json.dumps(spec.to_dict(), indent=2))
    return 0


def run_schema(args: argparse.Namespace) -> int:
    print(json.dumps(job_spec_json_schema(), indent=2))
    return 0


def run_status_schema(args: argparse.Namespace) -> int:
    from orchestrator.cli.status_document import status_json_schema

    print(json.dumps(status_json_schema(), indent=2))
    return 0
