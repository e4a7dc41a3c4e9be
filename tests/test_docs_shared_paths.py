"""Every path into the shared data folder that the docs name exists (`shared/data/...`, `../shared/...`,
and `$T/...` where a code block sets `T=../shared/...`), and every `gpuctl simulate --trace` file they
name is one of them (or a placeholder such as `FILE`): a reader copying a command gets a real file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DOCS = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
_PATH = r"(?:\.\./)?shared/[A-Za-z0-9_.\-/]*"
_SHARED_PATH = re.compile(rf"(?<![\w/.-]){_PATH}")
_VARIABLE = re.compile(rf"^\s*([A-Za-z_]\w*)=({_PATH})\s*$", re.MULTILINE)


_TRACE = re.compile(r"--trace[ =]([^\s`]+)")
_PLACEHOLDER = re.compile(r"[A-Z_\[\]=.]+|\.\.\.")
"""``FILE``, ``[ZONE=]FILE``, ``ZONE.json``, ``...``: a name the reader replaces."""


def expanded(text: str) -> str:
    """``text`` with ``$NAME`` and ``${NAME}`` replaced where a line sets ``NAME=`` a shared path."""
    for name, value in _VARIABLE.findall(text):
        text = re.sub(rf"\${{?{name}}}?(?=/|\b)", value, text)
    return text


def mentioned(text: str) -> set[str]:
    """The shared paths ``text`` names."""
    return {m.group().rstrip("./") for m in _SHARED_PATH.finditer(expanded(text))}


def traces(text: str) -> set[str]:
    """The ``--trace`` files that ``gpuctl simulate`` lines of ``text`` name, placeholders left out."""
    commands = "\n".join(line for line in expanded(text).splitlines() if "gpuctl simulate" in line)
    found = {m.group(1).rstrip(",;)") for m in _TRACE.finditer(commands)}
    return {f for f in found if not _PLACEHOLDER.fullmatch(f.removesuffix(".json").removesuffix("json"))}


def test_mentioned_finds_the_forms_the_docs_use() -> None:
    text = "see ../shared/data/a.json.\nT=../shared/data/x\nrun --trace $T/b.json and (shared/data format)"
    assert mentioned(text) == {
        "../shared/data/a.json",
        "../shared/data/x",
        "../shared/data/x/b.json",
        "shared/data",
    }


@pytest.mark.skipif(not SHARED.is_dir(), reason="no shared data folder beside this checkout (../shared)")
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_shared_path_in_the_docs_exists(doc: Path) -> None:
    missing = sorted(
        p for p in mentioned(doc.read_text()) if not (REPO.parent / p.removeprefix("../")).exists()
    )
    assert not missing, f"{doc.name} names shared paths that do not exist: {missing}"


@pytest.mark.skipif(not SHARED.is_dir(), reason="no shared data folder beside this checkout (../shared)")
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_trace_file_a_command_names_is_a_shared_file(doc: Path) -> None:
    named = traces(doc.read_text())
    wrong = sorted(
        t
        for t in named
        if not _SHARED_PATH.fullmatch(t) or not (REPO.parent / t.removeprefix("../")).is_file()
    )
    assert not wrong, f"{doc.name}: --trace names files that do not exist: {wrong}"
