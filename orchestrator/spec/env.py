"""The values of a job's ``env``: plain text, or a reference to a secret that gpuctl never stores.

::

    env:
      WANDB_PROJECT: demo                        # plain: stored, printed and sent as written
      HF_TOKEN: {secret: hf, key: token}          # a key of a Secret (Kubernetes) or of a secrets file
      WANDB_API_KEY: {from_env: WANDB_API_KEY}    # the launching process's environment (local, SLURM)

A reference is all that is stored (the job database, the GPUJob) and printed (``gpuctl validate``,
``gpuctl sbatch --dry-run``); its value is read only when the job's nodes are launched, by the
process that launches them (see :mod:`orchestrator.backends.secrets` and docs/secrets.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from orchestrator.spec.limits import Text, shown

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""A Kubernetes Secret's name (a DNS-1123 subdomain); also a file name: no '/', never '.' or '..'."""
SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")
"""A key of a Kubernetes Secret."""
MAX_SECRET_NAME = 253

_SECRET_WORDS = frozenset(
    {"TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "KEY", "APIKEY", "CREDENTIAL", "CREDENTIALS"}
)


class _Reference(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SecretRef(_Reference):
    """A key of a secret: a Kubernetes Secret in the job's namespace, or on local and SLURM the
    secrets file ``$GPUCTL_HOME/secrets/NAME`` (a YAML mapping, mode 0600, owned by the user)."""

    secret: str = Field(
        max_length=MAX_SECRET_NAME,
        description="the secret's name: a Kubernetes Secret, or the file $GPUCTL_HOME/secrets/NAME",
    )
    key: str = Field(max_length=MAX_SECRET_NAME, description="the key within the secret")

    @field_validator("secret")
    @classmethod
    def _secret_name(cls, v: str) -> str:
        if not SECRET_NAME.fullmatch(v):
            raise ValueError(
                f"{shown(v)} is not a secret name; use lowercase letters, digits, '-' and '.', "
                "starting and ending with a letter or digit (a Kubernetes Secret's name, e.g. 'hf-token')"
            )
        return v

    @field_validator("key")
    @classmethod
    def _secret_key(cls, v: str) -> str:
        if not SECRET_KEY.fullmatch(v):
            raise ValueError(f"{shown(v)} is not a secret key; use letters, digits, '-', '_' and '.'")
        return v

    def describe(self) -> str:
        return f"secret '{self.secret}', key '{self.key}'"


class FromEnv(_Reference):
    """A variable of the environment of the process that launches the job's nodes (local: the
    controller; SLURM: the controller or ``gpuctl sbatch``). Not available on Kubernetes."""

    from_env: str = Field(max_length=1024, description="name of the variable to copy at launch time")

    @field_validator("from_env")
    @classmethod
    def _variable_name(cls, v: str) -> str:
        if not ENV_NAME.fullmatch(v):
            raise ValueError(
                f"{shown(v)} is not an environment variable name; "
                "use letters, digits and '_', not starting with a digit"
            )
        return v

    def describe(self) -> str:
        return f"variable ${self.from_env} of the launching process"


def _env_value_kind(value: Any) -> str:
    """Which member of :data:`EnvValue` a value is, so that errors come from that member alone."""
    if isinstance(value, SecretRef | FromEnv):
        return type(value).__name__
    if isinstance(value, Mapping):
        return "FromEnv" if "from_env" in value and not {"secret", "key"} & set(value) else "SecretRef"
    return "str"


EnvValue = Annotated[
    Annotated[Text, Tag("str")] | Annotated[SecretRef, Tag("SecretRef")] | Annotated[FromEnv, Tag("FromEnv")],
    Discriminator(_env_value_kind),
    Field(description="text, {secret: NAME, key: KEY} or {from_env: VARIABLE}"),
]
"""One ``env`` value: text, ``{secret: NAME, key: KEY}`` or ``{from_env: VARIABLE}``."""

EnvReference = SecretRef | FromEnv
REFERENCE_MODELS: dict[str, type[BaseModel]] = {"SecretRef": SecretRef, "FromEnv": FromEnv}


def plain_env(env: Mapping[str, str | EnvReference]) -> dict[str, str]:
    """The variables written out in the spec (not secret: stored and printed as they are)."""
    return {name: value for name, value in env.items() if isinstance(value, str)}


def env_references(env: Mapping[str, str | EnvReference]) -> dict[str, EnvReference]:
    """The variables whose value is read at launch time."""
    return {name: value for name, value in env.items() if not isinstance(value, str)}


def secret_looking_names(env: Mapping[str, str | EnvReference]) -> list[str]:
    """Plain variables whose name says they hold a secret (``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``,
    ``DB_PASSWORD``, ``WANDB_API_KEY``): worth a reference instead."""
    return [
        name
        for name, value in env.items()
        if isinstance(value, str) and value and _SECRET_WORDS & set(name.upper().split("_"))
    ]
