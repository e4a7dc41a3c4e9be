"""Load job.yaml into a :class:`JobSpec`, turning every problem into a :class:`SpecError`.

Each problem names the field path (``resources.nodes.min``), the YAML line where known, what is
wrong and how to fix it. No traceback reaches the user for bad input.
"""

from __future__ import annotations

import difflib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.errors import NotFoundError, SpecError
from orchestrator.spec.durations import parse_deadline
from orchestrator.spec.model import JobSpec

Path_ = tuple[str | int, ...]


def load_spec_file(path: str | Path, now: datetime | None = None) -> JobSpec:
    """Read and validate a job file. ``workdir`` is resolved relative to the file's folder."""
    file = Path(path)
    if not file.is_file():
        raise NotFoundError(
            f"job file '{path}' does not exist", "check the path, e.g. examples/quickstart/job.yaml"
        )
    spec = load_spec_text(file.read_text(encoding="utf-8"), source=str(path), now=now)
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
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(
            source, [f"malformed YAML{where}: {problem}. To fix: check indentation and quoting"]
        ) from exc
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
        raise SpecError(source, [_describe(err, lines) for err in _most_specific(exc.errors())]) from None
    _check_against_now(spec, source, lines, now or datetime.now(UTC))
    return spec


def spec_from_json(text: str) -> JobSpec:
    """Specs stored by gpuctl itself (already validated once)."""
    return JobSpec.model_validate(json.loads(text))


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
    loc: Path_ = tuple(p for p in err["loc"] if not _is_union_tag(p))
    field = ".".join(str(p) for p in loc) or "(top level)"
    line = _nearest_line(loc, lines)
    where = f" (line {line})" if line else ""
    kind = err["type"]
    if kind == "extra_forbidden":
        name = str(loc[-1])
        parent = _model_at(loc[:-1])
        valid = sorted(parent.model_fields) if parent else []
        close = difflib.get_close_matches(name, valid, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"{field}{where}: unknown field. To fix: {hint}valid fields here are {', '.join(valid)}"
    if kind == "missing":
        return f"{field}{where}: required field is missing. To fix: add '{loc[-1]}:' to the spec"
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{field}{where}: {msg}. To fix: {_fix_for(kind, err)}"


def _fix_for(kind: str, err: Any) -> str:
    ctx = err.get("ctx") or {}
    if kind.endswith("_parsing") or kind.endswith("_type"):
        return f"use a value of the right type (got {json.dumps(err.get('input'), default=str)})"
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
    return "correct the value as described"


def _is_union_tag(part: str | int) -> bool:
    # pydantic adds the union member's type name ("int", "NodeRange", "list[str]") to error paths.
    return isinstance(part, str) and (part in {"int", "str", "float"} or part[:1].isupper() or "[" in part)


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
