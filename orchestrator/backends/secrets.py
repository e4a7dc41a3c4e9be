"""Reading the values of a job's secret references, at launch time, in the process that launches.

Local and SLURM backends (on Kubernetes the kubelet reads the Secret; see
:mod:`orchestrator.backends.kubernetes.manifests`):

* ``{secret: NAME, key: KEY}``: the key ``KEY`` of the secrets file ``$GPUCTL_HOME/secrets/NAME``, a
  YAML (or JSON) mapping of keys to string values. gpuctl reads it only when it is a regular file
  owned by the user and readable by nobody else (mode 0600 or 0400);
* ``{from_env: VAR}``: the variable ``VAR`` of the launching process's own environment.

A value is returned to the caller, which hands it to the node's environment (local) or to sbatch's
environment (SLURM), and is never written, logged or put into an error message.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

import yaml

from orchestrator.errors import UserError
from orchestrator.home import home_dir
from orchestrator.spec.env import EnvReference, FromEnv, SecretRef, env_references, plain_env
from orchestrator.userfiles import ContentError, compose_yaml

SECRETS_FOLDER = "secrets"
MAX_SECRETS_FILE_BYTES = 1 << 20


def secrets_dir(home: Path | None = None) -> Path:
    """``$GPUCTL_HOME/secrets``: one file per secret name."""
    return (home or home_dir()) / SECRETS_FOLDER


def launch_env(
    env: Mapping[str, str | EnvReference],
    environ: Mapping[str, str],
    home: Path | None = None,
    where: str = "the environment of this gpuctl process",
) -> dict[str, str]:
    """A job's ``env`` as its processes get it: the plain values and the references' values read now.

    ``environ`` is the launching process's environment (for ``from_env``); ``where`` names it in
    errors. Raises :class:`UserError` for the first reference that cannot be read.
    """
    return {**plain_env(env), **reference_values(env, environ, home, where)}


def reference_values(
    env: Mapping[str, str | EnvReference],
    environ: Mapping[str, str],
    home: Path | None = None,
    where: str = "the environment of this gpuctl process",
) -> dict[str, str]:
    """The values of ``env``'s references only (what must reach the nodes without being written)."""
    files: dict[str, dict[str, str]] = {}
    values: dict[str, str] = {}
    for name, ref in env_references(env).items():
        if isinstance(ref, FromEnv):
            values[name] = _from_environ(f"env.{name}", ref, environ, where)
        else:
            if ref.secret not in files:
                files[ref.secret] = read_secrets_file(secrets_dir(home) / ref.secret, f"env.{name}")
            values[name] = _key_of(files[ref.secret], f"env.{name}", ref, secrets_dir(home) / ref.secret)
    return values


def reference_value(
    ref: EnvReference, environ: Mapping[str, str], home: Path | None = None, used_by: str = "notify"
) -> str:
    """The value of one reference (a notification's webhook URL or SMTP password), read now and
    never stored; :class:`UserError` names the reference and the fix, never a value."""
    if isinstance(ref, FromEnv):
        return _from_environ(used_by, ref, environ, "the environment of the gpuctl controller")
    path = secrets_dir(home) / ref.secret
    return _key_of(read_secrets_file(path, used_by), used_by, ref, path)


def _from_environ(field: str, ref: FromEnv, environ: Mapping[str, str], where: str) -> str:
    value = environ.get(ref.from_env)
    if value is None:
        raise UserError(
            f"{field} is {{from_env: {ref.from_env}}}, but {ref.from_env} is not set in {where}",
            f"set {ref.from_env} in the environment of the process that launches the job (a controller "
            "takes it from the shell that started it: stop it and submit again from a shell where it is "
            "set), or keep the value in a secrets file and write {secret: NAME, key: KEY} "
            "(see docs/secrets.md)",
        )
    return value


def _key_of(data: Mapping[str, str], field: str, ref: SecretRef, path: Path) -> str:
    if ref.key not in data:  # its keys are not listed: a value written where a key goes is one
        raise UserError(
            f"{field}: the secrets file {path} has no key '{ref.key}' ({_count(len(data))}; keys are "
            "case-sensitive)",
            f"add a line `{ref.key}: VALUE` to {path}, or fix the key in the job spec",
        )
    return data[ref.key]


def read_secrets_file(path: Path, used_by: str = "the job") -> dict[str, str]:
    """The keys and values of a secrets file, after checking that only its owner, the user, can read it.

    Errors name the file, its mode and the fix, never a value (nor a line of the file).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise UserError(
            f"{used_by} refers to the secret '{path.name}', but {path} does not exist",
            f"create it readable only by you: `mkdir -p {path.parent} && install -m 600 /dev/null {path}`, "
            "then add `KEY: VALUE` lines with an editor (not on a command line: shells keep a history)",
        ) from None
    except OSError as exc:
        raise UserError(
            f"the secrets file {path} cannot be read ({exc.strerror})", f"check {path} and its folder"
        ) from None
    try:
        info = os.fstat(fd)  # of the file opened, so that nothing can swap it after the check
        _check_private(path, info)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(MAX_SECRETS_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_SECRETS_FILE_BYTES:
        raise UserError(f"the secrets file {path} is larger than 1 MiB", "keep only KEY: VALUE lines in it")
    return _parse(path, raw)


def _check_private(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise UserError(
            f"the secrets file {path} is not a regular file", f"make {path} a file of KEY: VALUE lines"
        )
    if info.st_uid != os.geteuid():
        raise UserError(
            f"the secrets file {path} belongs to user id {info.st_uid}, not to you ({os.geteuid()})",
            f"keep your secrets in a file of your own: copy it and `chmod 600 {path}`",
        )
    if info.st_mode & 0o077:
        raise UserError(
            f"the secrets file {path} can be read or changed by others (mode "
            f"{stat.S_IMODE(info.st_mode):04o}); gpuctl reads secrets only from files private to you",
            f"`chmod 600 {path}`",
        )


def _count(keys: int) -> str:
    return f"it has {keys} other key{'' if keys == 1 else 's'}" if keys else "it has no key"


def _parse(path: Path, raw: bytes) -> dict[str, str]:
    """The file's ``KEY: VALUE`` lines. Errors give line numbers only: a line may hold a secret in the
    place of its key (a value pasted alone, a key forgotten), so no key of the file is ever shown."""
    fix = f"write {path} as `KEY: VALUE` lines (YAML; quote a value with ': ' or '#' in it)"
    try:
        root, _ = compose_yaml(raw.decode("utf-8-sig"), f"the secrets file {path}", reveal=False)
    except UnicodeDecodeError:
        raise UserError(f"the secrets file {path} is not UTF-8 text", fix) from None
    except ContentError as exc:  # reveal=False: the message gives lines, never a piece of the file
        raise UserError(exc.what, f"{exc.fix}; {fix}") from None
    if not isinstance(root, yaml.MappingNode):
        raise UserError(f"the secrets file {path} is not a mapping of keys to values", fix)
    values: dict[str, str] = {}
    for key, value in root.value:
        line = key.start_mark.line + 1
        if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG or not key.value:
            raise UserError(
                f"line {line} of the secrets file {path} does not start with a key",
                f"write line {line} as `KEY: VALUE`, a plain name before the colon",
            )
        if not isinstance(value, yaml.ScalarNode) or value.tag != _STR_TAG:
            raise UserError(
                f"the value on line {value.start_mark.line + 1} of the secrets file {path} is not a string "
                f"(YAML reads {_KINDS.get(value.tag, 'another type')})",
                f'quote it in {path}: `KEY: "..."`; a line with nothing after its colon (a secret written '
                "where the key goes) reads as an empty value too",
            )
        values[str(key.value)] = str(value.value)
    return values


_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_KINDS = {
    "tag:yaml.org,2002:null": "nothing there",
    "tag:yaml.org,2002:int": "a number",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "true or false",
    "tag:yaml.org,2002:timestamp": "a date",
    "tag:yaml.org,2002:seq": "a list",
    "tag:yaml.org,2002:map": "a mapping",
    "tag:yaml.org,2002:binary": "binary data",
}
