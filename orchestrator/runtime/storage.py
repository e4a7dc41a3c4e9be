"""Where checkpoint files live: a local directory or ``s3://bucket/prefix``.

A checkpoint folder is written in three calls: :meth:`Storage.begin` names a folder to write the
files into, :meth:`Storage.write` writes each file, :meth:`Storage.commit` publishes the folder.
Locally the files go into a hidden folder ``.tmp-step-N-PID-RANDOM`` (unique per writer), each file
is fsynced, and the folder is renamed to ``step-N`` and the root fsynced: a ``step-N`` folder is
never seen half written, and no two writers share a folder. On S3 there is no rename; each PUT is
atomic and the manifest, written last, marks the folder complete (see
:mod:`orchestrator.runtime.checkpoint`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from orchestrator.errors import EnvironmentProblem, NotFoundError, TemporaryError

SLOW_WRITE_ENV = "GPUCTL_TEST_SLOW_CHECKPOINT_WRITE_S"
"""Fault injection for tests: seconds to sleep after a checkpoint data file is written to its
work folder and before the manifest is written and the folder published, so a test can kill the job
mid-write."""

TEMP_PREFIX = ".tmp-"
"""Names of folders being written (locally); never a checkpoint, removed by cleanup once stale."""


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

    def begin(self, folder: str) -> str:
        """Start writing checkpoint folder ``folder``; return the folder to write its files into."""
        ...

    def write(self, rel: str, fill: WriteFn, *, inject_delay: bool = False) -> tuple[str, int]:
        """Write ``rel`` durably with ``fill``; return (sha256 hex, size in bytes)."""
        ...

    def commit(self, work: str, folder: str) -> None:
        """Publish the files written under ``work`` as ``folder`` (replacing an older copy)."""
        ...

    def abort(self, work: str) -> None:
        """Give up on ``work`` after a failed write."""
        ...

    def read_bytes(self, rel: str) -> bytes: ...

    def local_copy(self, rel: str) -> AbstractContextManager[Path]:
        """A local path holding the file's content while the context is open (the file itself, or
        a downloaded copy that is removed on exit)."""
        ...

    def list_dirs(self) -> list[str]: ...

    def exists(self, rel: str) -> bool: ...

    def age_s(self, name: str) -> float | None:
        """Seconds since anything in folder ``name`` last changed; None when it holds nothing."""
        ...

    def remove_dir(self, name: str) -> None: ...

    def url_of(self, rel: str) -> str:
        """Where ``rel`` lives, for messages: a path or ``s3://bucket/key``."""
        ...


class LocalStorage:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalStorage({str(self.root)!r})"

    def begin(self, folder: str) -> str:
        work = f"{TEMP_PREFIX}{folder}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        (self.root / work).mkdir()
        return work

    def write(self, rel: str, fill: WriteFn, *, inject_delay: bool = False) -> tuple[str, int]:
        final = self.root / rel
        final.parent.mkdir(parents=True, exist_ok=True)
        with final.open("wb") as raw:
            writer = HashingWriter(raw)
            fill(writer)
            raw.flush()
            os.fsync(raw.fileno())
        if inject_delay:
            _slow_write_pause()
        return writer.digest.hexdigest(), writer.size

    def commit(self, work: str, folder: str) -> None:
        source, target = self.root / work, self.root / folder
        _fsync_dir(source)
        try:
            os.rename(source, target)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            # the same step written before (by a converter, or a second writer): swap it out
            aside = self.root / f"{TEMP_PREFIX}replaced-{folder}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            os.rename(target, aside)
            os.rename(source, target)
            shutil.rmtree(aside, ignore_errors=True)
        _fsync_dir(self.root)

    def abort(self, work: str) -> None:
        self.remove_dir(work)

    def read_bytes(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()

    @contextmanager
    def local_copy(self, rel: str) -> Iterator[Path]:
        yield self.root / rel

    def list_dirs(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def age_s(self, name: str) -> float | None:
        folder = self.root / name
        try:
            times = [folder.stat().st_mtime] + [e.stat().st_mtime for e in os.scandir(folder)]
        except OSError:
            return None
        return time.time() - max(times)

    def remove_dir(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)

    def url_of(self, rel: str) -> str:
        return str(self.root / rel)


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

    def __repr__(self) -> str:
        return f"S3Storage({self.url!r})"

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def begin(self, folder: str) -> str:
        return folder  # objects appear one by one; the manifest, written last, marks completeness

    def commit(self, work: str, folder: str) -> None:
        pass

    def abort(self, work: str) -> None:
        pass  # a folder without manifest is ignored, and removed by cleanup once stale

    def write(self, rel: str, fill: WriteFn, *, inject_delay: bool = False) -> tuple[str, int]:
        handle, name = tempfile.mkstemp(prefix="gpuctl-s3-up-")
        local = Path(name)
        try:
            with os.fdopen(handle, "wb") as raw:
                writer = HashingWriter(raw)
                fill(writer)
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

    @contextmanager
    def local_copy(self, rel: str) -> Iterator[Path]:
        handle, name = tempfile.mkstemp(prefix="gpuctl-s3-dl-")
        os.close(handle)
        target = Path(name)
        try:
            self._call("download", self._client.download_file, self.bucket, self._key(rel), name)
            yield target
        finally:
            target.unlink(missing_ok=True)

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

    def age_s(self, name: str) -> float | None:
        paginator = self._client.get_paginator("list_objects_v2")
        stamps: list[float] = []
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(name) + "/"):
                stamps += [obj["LastModified"].timestamp() for obj in page.get("Contents", [])]
        except Exception:
            return None  # unknown: cleanup leaves the folder alone
        return time.time() - max(stamps) if stamps else None

    def url_of(self, rel: str) -> str:
        return f"s3://{self.bucket}/{self._key(rel)}"

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
