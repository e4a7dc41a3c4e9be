"""Where checkpoint files live: a local directory or ``s3://bucket/prefix``.

Both stores write a file completely before it becomes visible under its final name: locally via a
temporary file, fsync and rename; on S3 a PUT is atomic by itself. Completeness of a whole checkpoint
is decided by its manifest (see :mod:`orchestrator.runtime.checkpoint`), which is written last.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from orchestrator.errors import EnvironmentProblem, NotFoundError, TemporaryError

SLOW_WRITE_ENV = "GPUCTL_TEST_SLOW_CHECKPOINT_WRITE_S"
"""Fault injection for tests: seconds to sleep after a checkpoint data file is written to its
temporary name and before it is renamed into place, so a test can kill the job mid-write."""


class HashingWriter:
    """A write-only file wrapper that computes the SHA-256 and size of what passes through."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


WriteFn = Callable[[HashingWriter], None]


def sha256_of_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _slow_write_pause() -> None:
    delay = float(os.environ.get(SLOW_WRITE_ENV, "0") or 0)
    if delay > 0:
        time.sleep(delay)


class Storage(Protocol):
    """A flat namespace of ``dir/name`` files; directories are checkpoint step folders."""

    def write(self, rel: str, fill: WriteFn, *, inject_delay: bool = False) -> tuple[str, int]:
        """Write ``rel`` atomically with ``fill``; return (sha256 hex, size in bytes)."""
        ...

    def read_bytes(self, rel: str) -> bytes: ...

    def local_copy(self, rel: str) -> Path:
        """A local path holding the file's content (the file itself, or a downloaded copy)."""
        ...

    def list_dirs(self) -> list[str]: ...

    def exists(self, rel: str) -> bool: ...

    def remove_dir(self, name: str) -> None: ...


class LocalStorage:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalStorage({str(self.root)!r})"

    def write(self, rel: str, fill: WriteFn, *, inject_delay: bool = False) -> tuple[str, int]:
        final = self.root / rel
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
        with tmp.open("wb") as raw:
            writer = HashingWriter(raw)
            fill(writer)
            raw.flush()
            os.fsync(raw.fileno())
        if inject_delay:
            _slow_write_pause()
        os.replace(tmp, final)
        _fsync_dir(final.parent)
        return writer.digest.hexdigest(), writer.size

    def read_bytes(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()

    def local_copy(self, rel: str) -> Path:
        return self.root / rel

    def list_dirs(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def remove_dir(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class S3Storage:
    """Checkpoints under ``s3://bucket/prefix``; honours ``AWS_ENDPOINT_URL`` (MinIO, moto)."""

    def __init__(self, url: str, client: Any = None) -> None:
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        if not bucket:
            raise NotFoundError(f"checkpoint location {url!r} names no bucket", "use s3://BUCKET/PREFIX")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = url
        self._client = client if client is not None else _make_s3_client()
        self._cache = Path(tempfile.mkdtemp(prefix="gpuctl-s3-"))

    def __repr__(self) -> str:
        return f"S3Storage({self.url!r})"

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def write(self, rel: str, fill: WriteFn, *, inject_delay: bool = False) -> tuple[str, int]:
        with tempfile.NamedTemporaryFile(dir=self._cache, delete=False) as raw:
            writer = HashingWriter(raw)  # type: ignore[arg-type]
            fill(writer)
            local = Path(raw.name)
        try:
            if inject_delay:
                _slow_write_pause()
            self._call("upload", self._client.upload_file, str(local), self.bucket, self._key(rel))
        finally:
            local.unlink(missing_ok=True)
        return writer.digest.hexdigest(), writer.size

    def read_bytes(self, rel: str) -> bytes:
        obj = self._call("read", self._client.get_object, Bucket=self.bucket, Key=self._key(rel))
        body: bytes = obj["Body"].read()
        return body

    def local_copy(self, rel: str) -> Path:
        for old in self._cache.glob("dl-*"):  # keep at most one downloaded checkpoint file
            old.unlink(missing_ok=True)
        target = self._cache / ("dl-" + rel.replace("/", "__"))
        self._call("download", self._client.download_file, self.bucket, self._key(rel), str(target))
        return target

    def list_dirs(self) -> list[str]:
        prefix = f"{self.prefix}/" if self.prefix else ""
        names: set[str] = set()
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
                for common in page.get("CommonPrefixes", []):
                    names.add(common["Prefix"][len(prefix) :].strip("/"))
        except Exception as exc:
            raise TemporaryError(
                f"listing {self.url} failed: {exc}", "check the bucket and credentials"
            ) from exc
        return sorted(names)

    def exists(self, rel: str) -> bool:
        try:
            self._client.head_object(Bucket=self.bucket, Key=self._key(rel))
        except Exception:
            return False
        return True

    def remove_dir(self, name: str) -> None:
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(name) + "/"):
            keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
            if keys:
                self._client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys})

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise TemporaryError(
                f"S3 {what} at {self.url} failed: {exc}",
                "check that the bucket exists, the credentials and AWS_ENDPOINT_URL",
            ) from exc


def _make_s3_client() -> Any:
    try:
        import boto3
    except ImportError as exc:  # pragma: no cover - boto3 is a dependency
        raise EnvironmentProblem("s3:// checkpoints need boto3", "pip install boto3") from exc
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    return boto3.client("s3", endpoint_url=endpoint)


def open_storage(location: str | Path) -> Storage:
    text = str(location)
    if text.startswith("s3://"):
        return S3Storage(text)
    return LocalStorage(text)
