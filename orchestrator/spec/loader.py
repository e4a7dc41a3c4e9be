"""Load job.yaml into a :class:`JobSpec`, turning every problem into a :class:`SpecError`.

Each problem names the field path (``resources.nodes.min``), the YAML line where known, what is
wrong and how to fix it. No traceback reaches the user for bad input, and no input makes loading
slow or its message long: the file is read and parsed by :mod:`orchestrator.userfiles`, the one
reader of gpuctl's input files (at most :data:`MAX_FILE_BYTES`, UTF-8, a regular file, without YAML
aliases, with bounded depth and number of values, no key twice); quoted
values are cut short and at most :data:`MAX_PROBLEMS` problems are listed.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.errors import SpecError
from orchestrator.spec.env import REFERENCE_MODELS
from orchestrator.spec.limits import shown
from orchestrator.spec.model import NAME_PATTERN, JobSpec
from orchestrator.userfiles import (
    MAX_YAML_BYTES,
    ContentError,
    compose_yaml_documents,
    read_text,
)

Path_ = tuple[str | int, ...]

MAX_FILE_BYTES = MAX_YAML_BYTES
"""A job file is a few hundred bytes; 1 MiB leaves room for long commands and many env values."""
MAX_PROBLEMS = 20
_MAX_ERRORS_READ = 200

_GIVE_A_JOB_FILE = "give the path of a job file, e.g. examples/quickstart/job.yaml"
_KEEP_DATA_OUT = "keep data out of the job file (read it from a file in workdir)"


def load_spec_file(path: str | Path, now: datetime | None = None) -> JobSpec:
    """Read and validate a job file. ``workdir`` is resolved relative to the file's folder."""
    return _job_file_spec(_read_job_file(path), path, now)


def _read_job_file(path: str | Path) -> str:
    try:
        return read_text(path, "job file", _GIVE_A_JOB_FILE, MAX_FILE_BYTES, _KEEP_DATA_OUT)
    except ContentError as exc:  # too large, not UTF-8: a problem of the spec, listed as one
        raise SpecError(str(path), [exc.detail]) from None


def _job_file_spec(text: str, path: str | Path, now: datetime | None) -> JobSpec:
    file = Path(path)
    spec = load_spec_text(text, source=str(path), now=now)
    workdir = Path(spec.workdir)
    if not workdir.is_absolute():
        workdir = (file.resolve().parent / workdir).resolve()
    if not workdir.is_dir():
        raise SpecError(
            str(path), [f"workdir: folder '{workdir}' does not exist. To fix: point it at your code"]
        )
    return spec.model_copy(update={"workdir": str(workdir)})


def load_spec_text(text: str, source: str = "<job spec>", now: datetime | None = None) -> JobSpec:
    """A job file's text: one YAML mapping (a Kubernetes manifest is refused, naming what to do)."""
    documents = _documents(text, source)
    manifest = next((d for d in documents if _is_manifest(d.data)), None)
    if manifest is not None:
        raise SpecError(source, [_not_a_job_file(manifest)])
    if len(documents) > 1:
        raise SpecError(source, [f"{documents[1].where}: {_ONE_JOB}"])
    root, data = (documents[0].root, documents[0].data) if documents else (None, None)
    if not isinstance(data, dict):
        raise SpecError(
            source,
            [
                "the file must be one YAML mapping. To fix: start from examples/quickstart/job.yaml (at least 'name' and 'command')"
            ],
        )
    lines = _line_index(root)
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(source, _problems(exc, lines)) from None
    _check_against_now(spec, source, lines, now or datetime.now(UTC))
    return spec


# --- Kubernetes manifests: GPUJobs ------------------------------------------------------------

GPUJOB_API_VERSION = "gpuctl.dev/v1alpha1"
GPUJOB_KIND = "GPUJob"
GPUJOB_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
OBJECT_NAME_MAX = 253
OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""A DNS-1123 subdomain: what the API server takes as a GPUJob's ``metadata.name``."""

_ONE_JOB = (
    "a second YAML document: a job file holds one job. To fix: keep one job per file, or write each "
    "job as a GPUJob (its fields under spec:, as in examples/kubernetes/gpujob.yaml)"
)


@dataclass(frozen=True)
class _Document:
    index: int
    """1-based, counting every document of the file (empty ones too)."""
    root: Any
    """The YAML node (its marks give line numbers)."""
    data: Any

    @property
    def where(self) -> str:
        return f"document {self.index} (line {self.root.start_mark.line + 1})"


@dataclass(frozen=True)
class SpecDocument:
    """One document of a file ``gpuctl validate`` reads: a job file's job, a GPUJob's spec, or another
    Kubernetes object, passed over (``spec`` is ``None``)."""

    index: int
    """1-based, counting every document of the file."""
    kind: str
    """``job file``, ``GPUJob``, or another object's ``apiVersion/kind``."""
    spec: JobSpec | None
    object_name: str | None = None
    """``metadata.name`` of a Kubernetes object."""
    namespace: str | None = None
    """``metadata.namespace`` of a Kubernetes object, when it gives one."""


def load_spec_documents(
    path: str | Path, now: datetime | None = None, derive_name: Callable[[str], str] | None = None
) -> list[SpecDocument]:
    """A job file, or a Kubernetes manifest of one or more documents (``---`` between them).

    A job file is read as :func:`load_spec_file` reads it. In a manifest each GPUJob's ``spec`` is
    validated as a job spec, as the operator reads it: its ``name`` defaults to ``metadata.name``
    (``derive_name`` of it when that is no job name), its ``user`` is ``metadata.namespace`` when
    given; other objects are returned with no spec. Raises :class:`SpecError` listing every
    problem, each naming its document.
    """
    source = str(path)
    text = _read_job_file(path)
    documents = _documents(text, source)
    if not any(_is_manifest(d.data) for d in documents):
        return [SpecDocument(1, "job file", _job_file_spec(text, path, now))]
    found: list[SpecDocument] = []
    problems: list[str] = []
    for document in documents:
        try:
            found.append(_manifest_document(document, now or datetime.now(UTC), derive_name))
        except SpecError as err:
            problems.extend(err.problems)
    if problems:
        raise SpecError(source, _capped(problems))
    return found


def _documents(text: str, source: str) -> list[_Document]:
    """The file's documents that are not empty."""
    try:
        read = compose_yaml_documents(text, source, data_fix=_KEEP_DATA_OUT)
    except ContentError as exc:
        raise SpecError(source, [exc.detail]) from None
    return [_Document(i, root, data) for i, (root, data) in enumerate(read, 1) if data is not None]


def _is_manifest(data: Any) -> bool:
    return isinstance(data, dict) and ("apiVersion" in data or "kind" in data)


def _not_a_job_file(document: _Document) -> str:
    kind = shown(document.data.get("kind", "?"))
    return (
        f"{document.where}: a Kubernetes object (kind {kind}), not a job file. To fix: apply it with "
        "`kubectl apply -f FILE` (`gpuctl validate FILE` checks it), or give a job file: the fields "
        "under a GPUJob's spec:, with a name (see examples/quickstart/job.yaml)"
    )


def _capped(problems: list[str]) -> list[str]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    rest = len(problems) - MAX_PROBLEMS
    return [*problems[:MAX_PROBLEMS], f"... and {rest} more problem(s). To fix: correct the ones above first"]


def _manifest_document(
    document: _Document, now: datetime, derive_name: Callable[[str], str] | None
) -> SpecDocument:
    data = document.data
    if not _is_manifest(data):
        raise SpecError("", [f"{document.where}: not a Kubernetes object (no apiVersion and kind) in a "
                             "manifest. To fix: give each document apiVersion, kind, metadata and spec, "
                             "as in examples/kubernetes/gpujob.yaml; a job file holds one job alone"])  # fmt: skip
    api, kind = data.get("apiVersion"), data.get("kind")
    if kind != GPUJOB_KIND and not str(api).startswith(GPUJOB_API_VERSION.split("/")[0] + "/"):
        meta = data.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        kind_shown = f"{shown(api)[1:-1]}/{shown(kind)[1:-1]}"
        return SpecDocument(
            document.index, kind_shown, None, shown(name)[1:-1] if isinstance(name, str) else None
        )
    problems = _gpujob_shape_problems(data)
    if problems:
        raise SpecError("", [f"{document.where}, GPUJob: {p}" for p in problems])
    name = data["metadata"]["name"]
    namespace = _text_or_none(data["metadata"].get("namespace"))
    spec = _gpujob_spec(document, name, namespace, now, derive_name)
    return SpecDocument(document.index, GPUJOB_KIND, spec, name, namespace)


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _gpujob_shape_problems(data: Mapping[str, Any]) -> list[str]:
    """What a GPUJob needs around its spec: the API version and kind, a name, a spec mapping."""
    problems = [_unknown_field(str(key), GPUJOB_FIELDS) for key in data if key not in GPUJOB_FIELDS]
    if data.get("apiVersion") != GPUJOB_API_VERSION:
        problems.append(
            f"apiVersion is {shown(data.get('apiVersion'))}. To fix: write apiVersion: {GPUJOB_API_VERSION}"
        )
    if data.get("kind") != GPUJOB_KIND:
        problems.append(f"kind is {shown(data.get('kind'))}. To fix: write kind: {GPUJOB_KIND}")
    meta = data.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or len(name) > OBJECT_NAME_MAX or not OBJECT_NAME.fullmatch(name):
        said = "is missing" if name is None else f"is {shown(name)}, not a Kubernetes object name"
        problems.append(
            f"metadata.name {said}. To fix: give metadata a name of "
            f"lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most "
            f"{OBJECT_NAME_MAX} characters"
        )
    if not isinstance(data.get("spec"), dict):
        problems.append("spec is missing or not a mapping. To fix: put the job's fields under spec:")
    return problems


def _unknown_field(name: str, valid: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name[:100], valid, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"{shown(name)}: unknown field. To fix: {hint}valid fields here are {', '.join(valid)}"


def _gpujob_spec(
    document: _Document,
    name: str,
    namespace: str | None,
    now: datetime,
    derive_name: Callable[[str], str] | None,
) -> JobSpec:
    """The GPUJob's ``spec`` as the operator reads it; problems named ``spec.FIELD (line N)``."""
    data = dict(document.data["spec"])
    if "name" not in data:
        plain = re.fullmatch(NAME_PATTERN, name) is not None
        data["name"] = name if plain or derive_name is None else derive_name(name)
    if namespace is not None:
        data["user"] = namespace  # the operator charges the namespace, whatever spec.user says
    lines = _line_index(next(value for key, value in document.root.value if key.value == "spec"))
    try:
        spec = JobSpec.model_validate(data)
        _check_against_now(spec, "", lines, now)
    except ValidationError as exc:
        problems = _problems(exc, lines)
    except SpecError as err:
        problems = err.problems
    else:
        return spec
    prefix = f"{document.where}, GPUJob {shown(name)}: spec."
    raise SpecError("", [prefix + p for p in problems])


def spec_from_json(text: str, source: str = "stored job spec") -> JobSpec:
    """Specs stored by gpuctl itself (validated once at submission; checked again, as data can rot).

    Raises :class:`SpecError` for anything that is not a valid spec, never another exception.
    """
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SpecError(
            source, [f"not valid JSON ({_brief(str(exc))}). To fix: submit the job again from its job file"]
        ) from None
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(source, _problems(exc, {})) from None


def _problems(exc: ValidationError, lines: dict[Path_, int]) -> list[str]:
    found = [_describe(err, lines) for err in _most_specific(exc.errors()[:_MAX_ERRORS_READ])]
    if exc.error_count() > _MAX_ERRORS_READ or len(found) > MAX_PROBLEMS:
        rest = max(exc.error_count(), len(found)) - MAX_PROBLEMS
        found = found[:MAX_PROBLEMS]
        found.append(f"... and about {rest} more problem(s). To fix: correct the ones above first")
    return found


def _brief(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _check_against_now(spec: JobSpec, source: str, lines: dict[Path_, int], now: datetime) -> None:
    if spec.goals.deadline is None:
        return
    if spec.goals.deadline.resolve(now) <= now:
        line = lines.get(("goals", "deadline"))
        where = f" (line {line})" if line else ""
        raise SpecError(
            source,
            [
                f"goals.deadline{where}: '{spec.goals.deadline}' is in the past. "
                "To fix: give a future time or a duration such as '6h'"
            ],
        )


def _most_specific(errors: list[Any]) -> list[Any]:
    """A union field (``nodes: int | {min, max}``) fails once per member: keep the telling error.

    Type mismatches against the other members are dropped when some member found a real problem.
    """
    groups: dict[Path_, list[Any]] = {}
    for err in errors:
        loc = tuple(p for p in err["loc"] if not _is_union_tag(p))
        groups.setdefault(loc, []).append(err)
    kept: list[Any] = []
    for loc, errs in groups.items():
        telling = [e for e in errs if not (e["type"].endswith("_type") or e["type"].endswith("_parsing"))]
        deeper = any(other[: len(loc)] == loc and len(other) > len(loc) for other in groups)
        if telling or not deeper:
            kept.extend(telling or errs[:1])
    return kept


def _describe(err: Any, lines: dict[Path_, int]) -> str:
    loc: Path_ = tuple(p for p in err["loc"] if not _is_union_tag(p)) or tuple(err["loc"])
    field = ".".join(shown(p)[1:-1] for p in loc) or "(top level)"
    line = _nearest_line(loc, lines)
    where = f" (line {line})" if line else ""
    kind = err["type"]
    if kind == "extra_forbidden":
        name = str(loc[-1])
        tags = [p for p in err["loc"] if p in REFERENCE_MODELS]  # env values' references
        parent = REFERENCE_MODELS[str(tags[-1])] if tags else _model_at(loc[:-1])
        valid = sorted(parent.model_fields) if parent else []
        close = difflib.get_close_matches(name[:100], valid, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"{field}{where}: unknown field. To fix: {hint}valid fields here are {', '.join(valid)}"
    if kind == "missing":
        return f"{field}{where}: required field is missing. To fix: add '{loc[-1]}:' to the spec"
    if loc[:1] == ("env",) and len(loc) == 2 and kind == "string_type":
        return (
            f"{field}{where}: an env value must be text, {{secret: NAME, key: KEY}} or {{from_env: VARIABLE}}. "
            "To fix: quote numbers and booleans ('1', 'true'), or write a reference"
        )
    msg = str(err["msg"]).removeprefix("Value error, ")
    if kind == "value_error" and "; " in msg:  # our validators say "what is wrong; how to fix it"
        what, fix = msg.rsplit("; ", 1)
        return f"{field}{where}: {what}. To fix: {fix}"
    return f"{field}{where}: {msg}. To fix: {_fix_for(kind, err, _may_hold_secret(loc))}"


_SECRET_FIELD_NAMES = frozenset({"password", "token", "secret", "url", "username"})
"""Fields whose values may be credentials (a webhook URL is one): an error never repeats them."""


def _may_hold_secret(loc: Path_) -> bool:
    names = {str(p) for p in loc}
    return bool(names & _SECRET_FIELD_NAMES) or "env" in names or "notify" in names


def _fix_for(kind: str, err: Any, secret: bool = False) -> str:
    ctx = err.get("ctx") or {}
    if secret and (kind.endswith("_parsing") or kind.endswith("_type") or kind.endswith("_type_error")):
        return (
            "use a value of the right type, or a reference {secret: NAME, key: KEY} (the value is not shown)"
        )
    if kind.endswith("_parsing") or kind.endswith("_type"):
        return f"use a value of the right type (got {_brief(json.dumps(err.get('input'), default=str), 60)})"
    if kind == "greater_than_equal":
        return f"use a value >= {ctx.get('ge')}"
    if kind == "greater_than":
        return f"use a value > {ctx.get('gt')}"
    if kind == "less_than_equal":
        return f"use a value <= {ctx.get('le')}"
    if kind == "enum":
        return f"use one of {ctx.get('expected')}"
    if kind == "string_pattern_mismatch":
        return "use lowercase letters, digits and '-', starting and ending with a letter or digit"
    if kind == "too_short":
        return "give at least one entry"
    if kind == "too_long":
        return f"give at most {ctx.get('max_length')} entries"
    if kind == "string_too_long":
        return f"shorten it to at most {ctx.get('max_length')} characters"
    if kind == "finite_number":
        return "use a finite number (.inf and .nan are not allowed)"
    if kind == "control_character":
        return "remove it (escapes such as \\0 or \\e in double-quoted YAML make control characters)"
    return "correct the value as described"


_TYPE_TAG = re.compile(r"[a-z][a-z-]*\[.+\]")
_MODEL_NAMES = {
    *REFERENCE_MODELS,
    "NodeRange",
    "Resources",
    "Market",
    "Goals",
    "Checkpoint",
    "Recovery",
    "Policies",
    "JobSpec",
}


def _is_union_tag(part: str | int) -> bool:
    # pydantic adds the union member's type ("int", "NodeRange", "list[constrained-str]") to error paths;
    # keys of env and labels (often upper case) are not tags.
    return isinstance(part, str) and (
        part in {"int", "str", "float", "bool"}
        or part in _MODEL_NAMES
        or _TYPE_TAG.fullmatch(part) is not None
    )


def _model_at(loc: Path_) -> type[BaseModel] | None:
    model: type[BaseModel] = JobSpec
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        candidates = [field.annotation, *getattr(field.annotation, "__args__", ())]
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return model


def _nearest_line(loc: Path_, lines: dict[Path_, int]) -> int | None:
    for cut in range(len(loc), -1, -1):
        if loc[:cut] in lines:
            return lines[loc[:cut]]
    return None


def _line_index(node: yaml.Node | None, path: Path_ = ()) -> dict[Path_, int]:
    """Map each field path to the 1-based line where its key (or item) starts."""
    out: dict[Path_, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = (*path, str(key.value))
            out[child] = key.start_mark.line + 1
            out.update(_line_index(value, child))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = (*path, i)
            out[child] = item.start_mark.line + 1
            out.update(_line_index(item, child))
    return out
