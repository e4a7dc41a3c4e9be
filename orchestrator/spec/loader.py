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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.errors import SpecError
from orchestrator.spec.durations import parse_deadline
from orchestrator.spec.env import REFERENCE_MODELS
from orchestrator.spec.limits import shown
from orchestrator.spec.model import JobSpec
from orchestrator.userfiles import (
    MAX_YAML_BYTES,
    ContentError,
    compose_yaml,
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
    file = Path(path)
    try:
        text = read_text(path, "job file", _GIVE_A_JOB_FILE, MAX_FILE_BYTES, _KEEP_DATA_OUT)
    except ContentError as exc:  # too large, not UTF-8: a problem of the spec, listed as one
        raise SpecError(str(path), [exc.detail]) from None
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
    try:
        root, data = compose_yaml(text, source, data_fix=_KEEP_DATA_OUT)
    except ContentError as exc:
        raise SpecError(source, [exc.detail]) from None
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
    if parse_deadline(spec.goals.deadline, now) <= now:
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
