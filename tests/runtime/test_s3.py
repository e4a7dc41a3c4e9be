"""s3:// checkpoints against moto's server on loopback."""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import torch

from orchestrator.runtime import CheckpointStore, S3Storage, open_storage
from orchestrator.runtime.checkpoint import MANIFEST, step_dir


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="ckpt")
    try:
        yield endpoint
    finally:
        server.stop()


def test_s3_round_trip_keep_and_torn(s3_endpoint: str) -> None:
    storage = open_storage("s3://ckpt/jobs/quickstart")
    assert isinstance(storage, S3Storage)
    store = CheckpointStore(storage, keep=2)
    for step in (1, 2, 3):
        store.save(step, {"w": torch.full((3,), float(step))})
    assert store.steps() == [2, 3]
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    # a torn newer checkpoint: data uploaded but no manifest
    client.put_object(Bucket="ckpt", Key=f"jobs/quickstart/{step_dir(4)}/state.pt", Body=b"partial")
    step, state = store.load_latest() or (None, None)
    assert step == 3 and torch.equal(state["w"], torch.full((3,), 3.0))
    # a corrupted newest checkpoint falls back to the previous one
    client.put_object(Bucket="ckpt", Key=f"jobs/quickstart/{step_dir(3)}/state.pt", Body=b"garbage")
    assert (store.load_latest() or (None,))[0] == 2
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="ckpt")["Contents"]]
    assert f"jobs/quickstart/{step_dir(2)}/{MANIFEST}" in keys


def test_runtime_from_env_with_s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.runtime import Runtime

    monkeypatch.setenv("GPUCTL_CHECKPOINT_DIR", "s3://ckpt/rt")
    monkeypatch.setenv("GPUCTL_CHECKPOINT_EVERY_STEPS", "1")
    model = torch.nn.Linear(3, 1)
    rt = Runtime.from_env(model, torch.optim.SGD(model.parameters(), lr=0.1))
    try:
        rt.step_done(1)
        rt.wait()
        with torch.no_grad():
            model.weight.add_(1.0)
        assert rt.resume() == 1
        fresh = Runtime.from_env(torch.nn.Linear(3, 1))
        assert fresh.resume() == 1 and torch.equal(fresh.model.weight, model.weight)
        fresh.notice.uninstall()
    finally:
        rt.notice.uninstall()


def test_s3_leaves_no_temporary_files(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    store = CheckpointStore(open_storage("s3://ckpt/clean"), keep=1)
    store.save(1, {"w": torch.ones(2)})
    store.save(2, {"w": torch.full((2,), 2.0)})
    assert (store.load_latest() or (None,))[0] == 2
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.put_object(Bucket="ckpt", Key=f"clean/{step_dir(3)}/state.pt", Body=b"bad")
    client.put_object(
        Bucket="ckpt",
        Key=f"clean/{step_dir(3)}/{MANIFEST}",
        Body=b'{"step": 3, "files": {"state.pt": {"sha256": "0", "bytes": 3}}}',
    )
    assert (store.load_latest() or (None,))[0] == 2  # a rejected download is removed too
    assert list(scratch.iterdir()) == []


def test_s3_cleanup_keeps_a_fresh_torn_folder_and_removes_a_stale_one(s3_endpoint: str) -> None:
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.put_object(Bucket="ckpt", Key=f"torn/{step_dir(1)}/state.pt", Body=b"another writer, mid-write")
    store = CheckpointStore(open_storage("s3://ckpt/torn"), keep=1)
    store.save(2, {"w": torch.ones(1)})
    assert store.steps() == [1, 2]
    assert store.storage.age_s(step_dir(1)) is not None
    CheckpointStore(store.storage, keep=1, stale_after_s=0).prune()
    assert store.steps() == [2]
