"""Durations and deadlines are typed when the spec is loaded, and written back as the text they came as."""

from __future__ import annotations

import copy
import json
import pickle
import re
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from orchestrator.errors import SpecError
from orchestrator.spec import (
    Deadline,
    Duration,
    job_spec_json_schema,
    load_spec_text,
    parse_deadline,
    parse_duration,
    spec_from_json,
)

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def spec_with(**fields: object) -> str:
    return yaml.safe_dump({"name": "train", "command": "train.py", **fields})


def test_durations_are_timedeltas_parsed_once_and_written_back_as_given() -> None:
    spec = load_spec_text(
        spec_with(
            market={"changeover": "1h30m"},
            checkpoint={"every": "90s"},
            watchdog={"stall_after": "2.5h", "idle_after": "10m"},
        )
    )
    assert isinstance(spec.market.changeover, Duration)
    assert spec.market.changeover == timedelta(hours=1, minutes=30)
    assert spec.checkpoint.every == timedelta(seconds=90)
    assert spec.watchdog.stall_after == timedelta(hours=2.5)
    assert spec.to_dict()["market"]["changeover"] == "1h30m"
    assert spec.to_dict()["checkpoint"]["every"] == "90s"
    assert spec.to_dict()["watchdog"] == {"stall_after": "2.5h", "idle_after": "10m", "action": "alert"}
    assert load_spec_text(spec_with()).market.changeover == timedelta(minutes=12)


def test_a_relative_deadline_resolves_from_the_submission_time() -> None:
    deadline = load_spec_text(spec_with(goals={"deadline": "36h"})).goals.deadline
    assert isinstance(deadline, Deadline)
    assert deadline.resolve(NOW) == NOW + timedelta(hours=36)
    assert deadline.resolve(NOW + timedelta(hours=1)) == NOW + timedelta(hours=37)
    assert str(deadline) == "36h"


def test_an_absolute_deadline_resolves_to_its_moment_whenever_submitted() -> None:
    spec = load_spec_text(spec_with(goals={"deadline": "2026-12-01T00:00Z"}), now=NOW)
    assert spec.goals.deadline is not None
    assert spec.goals.deadline.resolve(NOW) == datetime(2026, 12, 1, tzinfo=UTC)
    assert spec.goals.deadline.resolve(NOW + timedelta(days=2)) == datetime(2026, 12, 1, tzinfo=UTC)
    assert spec.to_dict()["goals"]["deadline"] == "2026-12-01T00:00Z"


def test_stored_specs_load_back_equal_and_the_typed_values_copy_and_pickle() -> None:
    spec = load_spec_text(spec_with(goals={"deadline": "6h"}, market={"changeover": "5m"}))
    stored = json.dumps(spec.to_dict())
    again = spec_from_json(stored)
    assert again == spec and json.dumps(again.to_dict()) == stored
    assert copy.deepcopy(spec) == spec and pickle.loads(pickle.dumps(spec)) == spec
    assert pickle.loads(pickle.dumps(spec.market.changeover)).text == "5m"
    assert spec.model_copy(update={"name": "other"}).market.changeover.text == "5m"


def test_parse_deadline_and_parse_duration_take_the_typed_values_too() -> None:
    spec = load_spec_text(spec_with(goals={"deadline": "6h"}, market={"changeover": "5m"}))
    assert spec.goals.deadline is not None
    assert parse_deadline(spec.goals.deadline, NOW) == parse_deadline("6h", NOW) == NOW + timedelta(hours=6)
    assert parse_duration(spec.market.changeover) == timedelta(minutes=5)


def test_the_json_schema_still_says_text() -> None:
    schema = job_spec_json_schema()
    changeover = schema["$defs"]["Market"]["properties"]["changeover"]
    assert changeover["type"] == "string" and changeover["default"] == "12m"
    deadline = schema["$defs"]["Goals"]["properties"]["deadline"]
    assert {"type": "string", "maxLength": 4096} in deadline["anyOf"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"market": {"changeover": 600}}, "market.changeover (line N): Input should be a valid string"),
        ({"market": {"changeover": "soon"}}, "market.changeover (line N): 'soon' is not a duration"),
        ({"goals": {"deadline": 36}}, "goals.deadline (line N): Input should be a valid string"),
        ({"checkpoint": {"every": "0s"}}, "checkpoint.every (line N): must be longer than zero"),
    ],
)
def test_wrong_values_are_refused_with_the_field_path(fields: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec_text(spec_with(**fields))
    assert re.sub(r"\(line \d+\)", "(line N)", str(err.value)).count(message) == 1
