"""``env`` values: text, ``{secret: NAME, key: KEY}`` or ``{from_env: VAR}``, with clear errors."""

from __future__ import annotations

import pytest

from orchestrator.errors import SpecError
from orchestrator.spec import load_spec_text, spec_from_json
from orchestrator.spec.env import FromEnv, SecretRef, env_references, plain_env, secret_looking_names

BASE = "name: a\ncommand: train.py\n"


def test_references_load_and_round_trip_as_references() -> None:
    spec = load_spec_text(
        BASE + "env: {MODE: fast, HF_TOKEN: {secret: hf.tokens, key: token}, WANDB: {from_env: WANDB_KEY}}\n"
    )
    assert spec.env == {
        "MODE": "fast",
        "HF_TOKEN": SecretRef(secret="hf.tokens", key="token"),
        "WANDB": FromEnv(from_env="WANDB_KEY"),
    }
    assert spec.to_dict()["env"]["HF_TOKEN"] == {"secret": "hf.tokens", "key": "token"}
    assert spec_from_json(spec.model_dump_json()) == spec
    assert plain_env(spec.env) == {"MODE": "fast"}
    assert set(env_references(spec.env)) == {"HF_TOKEN", "WANDB"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ("{HF: {secret: hf}}", "env.HF.key (line 3): required field is missing"),
        ("{HF: {secrett: hf, key: t}}", "did you mean 'secret'? valid fields here are key, secret"),
        (
            "{HF: {from_env: X, y: 1}}",
            "env.HF.y (line 3): unknown field. To fix: valid fields here are from_env",
        ),
        ("{HF: {secret: Hf_x, key: t}}", "'Hf_x' is not a secret name. To fix: use lowercase letters"),
        ("{HF: {secret: ../etc, key: t}}", "'../etc' is not a secret name"),
        ("{HF: {secret: hf, key: a/b}}", "'a/b' is not a secret key"),
        ("{HF: {from_env: 1X}}", "'1X' is not an environment variable name"),
        ("{HF: 1}", "env.HF (line 3): an env value must be text, {secret: NAME, key: KEY} or {from_env"),
        ("{HF: [a]}", "To fix: quote numbers and booleans"),
    ],
)
def test_bad_references_name_the_field_and_the_fix(env: str, expected: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec_text(BASE + f"env: {env}\n")
    assert expected in str(err.value), str(err.value)
    assert "SecretRef" not in str(err.value) and "FromEnv" not in str(err.value)


def test_device_variables_are_refused_whatever_their_value() -> None:
    with pytest.raises(SpecError, match="CUDA_VISIBLE_DEVICES would choose the GPUs"):
        load_spec_text(BASE + "env: {CUDA_VISIBLE_DEVICES: {from_env: X}}\n")


def test_plain_values_with_secret_names_are_found() -> None:
    spec = load_spec_text(
        BASE + "env: {HF_TOKEN: x, AWS_SECRET_ACCESS_KEY: y, DB_PASSWORD: z, WANDB_API_KEY: w,\n"
        "  TOKENIZERS_PARALLELISM: 'false', MY_TOKEN: {from_env: T}, EMPTY_TOKEN: '', LR: '0.1'}\n"
    )
    assert secret_looking_names(spec.env) == [
        "HF_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "WANDB_API_KEY",
    ]
