"""Reading secret references at launch time: private secrets files only, values never in messages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.backends.secrets import launch_env, read_secrets_file, reference_values
from orchestrator.errors import UserError
from orchestrator.spec.env import EnvReference, FromEnv, SecretRef

VALUE = "s3cr3t-VALUE-123"


def secrets_file(home: Path, name: str, text: str, mode: int = 0o600) -> Path:
    folder = home / "secrets"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    path.chmod(mode)
    return path


def test_references_are_read_from_the_file_and_the_environment(tmp_path: Path) -> None:
    secrets_file(tmp_path, "hf", f"token: {VALUE}\nother: 'x: #y'\n")
    env: dict[str, str | EnvReference] = {
        "PLAIN": "p",
        "HF_TOKEN": SecretRef(secret="hf", key="token"),
        "OTHER": SecretRef(secret="hf", key="other"),
        "WANDB": FromEnv(from_env="MY_WANDB"),
    }
    assert launch_env(env, {"MY_WANDB": "w"}, tmp_path) == {
        "PLAIN": "p", "HF_TOKEN": VALUE, "OTHER": "x: #y", "WANDB": "w"
    }  # fmt: skip
    assert reference_values(env, {"MY_WANDB": "w"}, tmp_path) == {
        "HF_TOKEN": VALUE,
        "OTHER": "x: #y",
        "WANDB": "w",
    }


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o602])
def test_a_file_others_can_read_or_write_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    path = secrets_file(tmp_path, "hf", f"token: {VALUE}\n", mode)
    with pytest.raises(UserError) as err:
        reference_values({"HF_TOKEN": SecretRef(secret="hf", key="token")}, {}, tmp_path)
    message = str(err.value)
    assert f"mode {mode:04o}" in message and f"To fix: `chmod 600 {path}`" in message
    assert VALUE not in message


def test_read_only_by_the_owner_is_accepted(tmp_path: Path) -> None:
    path = secrets_file(tmp_path, "hf", f"token: {VALUE}\n", 0o400)
    assert read_secrets_file(path) == {"token": VALUE}


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_refused(tmp_path: Path) -> None:
    path = secrets_file(tmp_path, "hf", f"token: {VALUE}\n")
    os.chown(path, 4242, -1)
    with pytest.raises(UserError, match="belongs to user id 4242, not to you"):
        read_secrets_file(path)


def test_a_missing_file_says_how_to_create_it_privately(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        reference_values({"HF_TOKEN": SecretRef(secret="hf", key="token")}, {}, tmp_path)
    assert "env.HF_TOKEN refers to the secret 'hf'" in str(err.value)
    assert f"install -m 600 /dev/null {tmp_path / 'secrets' / 'hf'}" in str(err.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"token: {VALUE}\n", "has no key 'missing' (it has 1 other key; keys are case-sensitive)"),
        (f"token: [{VALUE}\n", "malformed YAML (line 2"),
        (f"- {VALUE}\n", "is not a mapping of keys to values"),
        ("missing: 0123\n", "the value on line 1 of the secrets file"),
        (b"\xff\xfe" + VALUE.encode(), "is not UTF-8 text"),
    ],
)
def test_problems_in_the_file_never_show_a_value(tmp_path: Path, text: str | bytes, expected: str) -> None:
    path = secrets_file(tmp_path, "hf", "")
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(UserError) as err:
        reference_values({"X": SecretRef(secret="hf", key="missing")}, {}, tmp_path)
    assert expected in str(err.value) and VALUE not in str(err.value) and "To fix" in str(err.value)


def test_a_missing_variable_names_the_process_and_the_fixes(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        reference_values(
            {"WANDB": FromEnv(from_env="MY_WANDB")}, {}, tmp_path, where="the controller (pid 7)"
        )
    message = str(err.value)
    assert "MY_WANDB is not set in the controller (pid 7)" in message
    assert "stop it and submit again from a shell where it is set" in message and "{secret: NAME" in message
