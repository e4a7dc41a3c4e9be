"""The HTML report in a real headless browser: it renders, the charts carry data, nothing is blank."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from orchestrator.costs.budgets import CostConfig
from orchestrator.costs.html import to_html
from orchestrator.costs.report import build_report
from tests.costs.factory import at, fleet, job, seg

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def png_gray_values(path: Path) -> list[int]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) into per-pixel gray values."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), "unexpected PNG format"
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    prev = bytearray(stride)
    gray: list[int] = []
    for y in range(height):
        base = y * (stride + 1)
        ftype, line = raw[base], bytearray(raw[base + 1 : base + 1 + stride])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        gray.extend((line[i] + line[i + 1] + line[i + 2]) // 3 for i in range(0, stride, channels * 4))
        prev = line
    return gray


def render(tmp_path: Path, page: Path) -> tuple[str, list[int]]:
    """The DOM Chromium builds from ``page`` and the gray values of its screenshot (1400 x 1600)."""
    assert "<script" not in page.read_text() and "http://" not in page.read_text().replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )
    base = [str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    shot = page.with_suffix(".png")
    subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1400,1600", page.as_uri()],
        capture_output=True,
        timeout=60,
        check=True,
    )
    gray = png_gray_values(shot)
    mean = sum(gray) / len(gray)
    variance = sum((g - mean) ** 2 for g in gray) / len(gray)
    assert variance > 100, f"screenshot looks blank (variance {variance:.1f})"
    assert sum(1 for g in gray if g < 200) > 0.01 * len(gray), "too few drawn pixels"
    return dom, gray


def right_third_drawn(gray: list[int], width: int = 1400 // 4) -> bool:
    """Whether the right third of the screenshot has drawn pixels (the page uses the full width);
    ``gray`` holds every 4th pixel of each row."""
    rows = [gray[i : i + width] for i in range(0, len(gray), width)]
    return sum(1 for row in rows for g in row[2 * width // 3 :] if g < 200) > 0.002 * len(gray)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_html_report_renders_with_data_in_chromium(tmp_path: Path) -> None:
    jobs, segments, idle = fleet()
    config = CostConfig({"ml-research": 400.0}, other_teams_monthly_usd=300.0)
    report = build_report(jobs, segments, at(12, day=8), None, "team", idle=idle, budgets=config)
    page = tmp_path / "report.html"
    page.write_text(to_html(report), encoding="utf-8")
    dom, gray = render(tmp_path, page)
    for chart in (
        "cost-over-time", "savings-over-time", "market-split", "budget", "utilization-histogram", "efficiency-vs-cost"
    ):  # fmt: skip
        assert f'data-chart="{chart}"' in dom
    cost_svg = re.search(r'data-chart="cost-over-time".*?</svg>', dom, flags=re.S)
    assert cost_svg and len(re.findall(r'class="bar"', cost_svg.group(0))) >= 5
    assert {"ml-research", "vision", "nlp"} <= set(re.findall(r'data-group="([^"]+)"', cost_svg.group(0)))
    hist = re.search(r'data-chart="utilization-histogram".*?</svg>', dom, flags=re.S)
    assert hist and 'data-at="0.5"' in hist.group(0) and 'data-at="0.8"' in hist.group(0)
    assert 'class="bar"' in hist.group(0)
    scatter = re.search(r'data-chart="efficiency-vs-cost".*?</svg>', dom, flags=re.S)
    assert scatter and len(re.findall(r'class="point"', scatter.group(0))) == sum(1 for _ in idle)
    assert f"${report.totals.cost_usd:,.2f}" in dom and 'class="limit"' in dom
    assert right_third_drawn(gray), "the right third of the page is empty"


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_html_report_renders_one_point_in_chromium(tmp_path: Path) -> None:
    """One job of 30 seconds: one bucket, one savings point, one bar; nothing blank."""
    segments = [seg("short", at(5), at(5) + (at(0.01) - at(0)), price=1.0, od=3.0)]
    report = build_report([job("short")], segments, at(6), None, "job")
    page = tmp_path / "one.html"
    page.write_text(to_html(report), encoding="utf-8")
    dom, gray = render(tmp_path, page)
    savings = re.search(r'data-chart="savings-over-time".*?</svg>', dom, flags=re.S)
    assert savings and len(re.findall(r'class="point"', savings.group(0))) == 1
    cost_svg = re.search(r'data-chart="cost-over-time".*?</svg>', dom, flags=re.S)
    assert cost_svg and len(re.findall(r'class="bar"', cost_svg.group(0))) == 1
    assert "GPU use not measured" in dom and "banner simulated" in dom
    assert right_third_drawn(gray), "the right third of the page is empty"
