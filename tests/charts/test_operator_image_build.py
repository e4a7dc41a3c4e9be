"""The gpuctl image, built for real from the repository's Containerfile with buildah, then run.

No container registry is reachable here, so the base is made on the spot: a Debian bookworm rootfs
from debootstrap (python3 3.11 and its venv module, as in python:3.11-slim) committed as
``localhost/gpuctl-base``. The Python packages come as wheels pip fetches on this machine; the build
installs them offline (``GPUCTL_PIP_ARGS``), the way the Containerfile offers to anyone without an
index. Storage is the vfs driver and RUN steps use chroot isolation: both work as root inside a VM
without overlay mounts or a usable cgroup hierarchy (crun refuses hybrid cgroups there, so
``podman run`` cannot start the image; ``buildah run --isolation chroot`` can).

About 2 to 4 minutes on 2 busy cores, debootstrap the longest part; needs root, ``buildah`` and ``debootstrap``.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import orchestrator
from tests.charts.containerfile import CONTAINERFILE, REPO

MISSING = [tool for tool in ("buildah", "debootstrap") if shutil.which(tool) is None]
BASE = "localhost/gpuctl-base:bookworm"
IMAGE = "localhost/gpuctl:test"
BASE_PACKAGES = "python3,python3-venv"  # python:3.11-slim's Python, from Debian bookworm
TAGS_GLIBC = range(17, 37)  # manylinux tags that bookworm's glibc 2.36 runs

RunIn = Callable[..., str]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        bool(MISSING), reason=f"needs {', '.join(MISSING)}: apt-get install buildah debootstrap"
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="debootstrap and buildah's vfs storage need root here"),
]


def run(argv: list[str], timeout: float = 900) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{output}"
    return done.stdout


class Buildah:
    """buildah on storage of its own under a temporary folder, so the test touches no other images."""

    def __init__(self, root: Path) -> None:
        self.global_args = ["--root", f"{root}/root", "--runroot", f"{root}/run", "--storage-driver", "vfs"]

    def __call__(self, *args: str) -> str:
        return run(["buildah", *self.global_args, *args])


def bootstrap_base(buildah: Buildah, work: Path) -> None:
    rootfs = work / "rootfs"
    run(["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm", str(rootfs)])
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        shutil.rmtree(rootfs / cache)
    tarball = work / "rootfs.tar"
    run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), "."])
    shutil.rmtree(rootfs)
    container = buildah("from", "scratch").strip()
    buildah("add", container, str(tarball), "/")
    buildah("commit", "--rm", container, BASE)


def fetch_wheels(wheels: Path) -> None:
    """Every wheel the image's `pip install ".[kubernetes,monitor]"` needs, for bookworm's CPython 3.11."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]
    requirements = [
        *pyproject["build-system"]["requires"],
        *project["dependencies"],
        *project["optional-dependencies"]["kubernetes"],
        *project["optional-dependencies"]["monitor"],
    ]
    arch = platform.machine()
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in TAGS_GLIBC] + [f"manylinux2014_{arch}"]
    run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(wheels), "--only-binary=:all:",
         "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "--abi", "none",
         *(arg for p in platforms for arg in ("--platform", p)), "--platform", "any", *requirements]
    )  # fmt: skip


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Buildah]:
    work = tmp_path_factory.mktemp("image")
    buildah = Buildah(work / "storage")
    try:
        bootstrap_base(buildah, work)
        fetch_wheels(work / "wheels")
        buildah(
            "build", "--isolation", "chroot", "--volume", f"{work / 'wheels'}:/wheels:ro",
            "--build-arg", "GPUCTL_PIP_ARGS=--no-index --find-links=/wheels",
            "--build-arg", f"BASE_IMAGE={BASE}", "--tag", IMAGE, "--file", str(CONTAINERFILE), str(REPO),
        )  # fmt: skip
        yield buildah
    finally:
        shutil.rmtree(work, ignore_errors=True)  # gigabytes of vfs layers: not left for pytest to keep


@pytest.fixture(scope="module")
def in_image(image: Buildah) -> Iterator[RunIn]:
    """Runs commands in a container of the image, as the image's own user."""
    container = image("from", IMAGE).strip()
    yield lambda *argv: image("run", "--isolation", "chroot", container, "--", *argv)
    image("rm", container)


def test_image_runs_as_the_non_root_user_of_the_chart(image: Buildah, in_image: RunIn) -> None:
    assert '"User": "65532:65532"' in image("inspect", "--type", "image", IMAGE)
    assert in_image("id", "-u").strip() == "65532"
    # Not able to change its own software.
    touch = "touch /opt/gpuctl/bin/x 2>/dev/null && echo writable || echo read-only"
    assert in_image("sh", "-c", touch).strip() == "read-only"


def test_gpuctl_and_the_operator_start_in_the_image(in_image: RunIn) -> None:
    assert in_image("gpuctl", "--version").strip() == f"gpuctl {orchestrator.__version__}"
    assert "Start an operator process" in in_image("kopf", "run", "--help")
    # The chart's command loads this module; the monitor sidecar runs the second.
    in_image("python", "-c", "import operators.kubernetes.handlers")
    assert "--interval" in in_image("python", "-m", "orchestrator.monitor", "--help")


def test_final_image_has_no_torch_pip_or_compiler(in_image: RunIn) -> None:
    found = in_image(
        "python", "-c",
        "import importlib.util as u, shutil as s;"
        "print([m for m in ('torch', 'pip', 'setuptools') if u.find_spec(m)],"
        " [c for c in ('gcc', 'cc', 'make') if s.which(c)])",
    )  # fmt: skip
    assert found.strip() == "[] []"
