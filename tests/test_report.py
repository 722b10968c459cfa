"""The report: sections present, numbers equal to the analyses' DataFrames, honest about what is missing,
self-contained, and clean in a real browser (headless Chromium)."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess

import pytest

import forensics
from analyses.stalls import find_stalls
from forensics.render import render
from forensics.render.cells import fmt_cell
from forensics.views.report import build_report
from tests.artefact_captures import CLEAN, EPISODES, rewrite, with_markers

CHAPTERS = ["machine", "sources", "timing", "timeline_plot", "stalls", "views", "spikes", "burners", "jitter", "system",
            "unknown"]  # fmt: skip


@pytest.fixture(scope="module")
def episodes_report():
    cap = with_markers()
    return cap, build_report(cap, "lab-episodes.ssf")


def test_report_has_every_chapter(episodes_report):
    _, report = episodes_report
    names = [s.name for s in report.sections]
    for name in CHAPTERS:
        assert name in names, name
    for view in ("timeline", "breakdown", "placement", "faults", "worst"):
        assert view in names  # the five views of summarize (the timeline view shares its name's prefix)
    timeline = report.section("timeline_plot")
    assert timeline.image is not None and timeline.image[:8] == b"\x89PNG\r\n\x1a\n"
    assert "7 stall episodes" in timeline.image_alt and "2 markers" in timeline.image_alt


def test_report_numbers_are_the_analyses_numbers(episodes_report):
    cap, report = episodes_report
    stalls = find_stalls(cap)
    section = report.section("stalls")
    keys = ["tid", "start_ns", "verdict", "stall_ns"]
    assert section.frame[keys].equals(stalls[keys])
    text = render(report, "html")
    for row in stalls.itertuples(index=False):
        assert fmt_cell("stall_ns", row.stall_ns, None) in text
        assert row.evidence.replace("'", "&#x27;") in text or row.evidence in text
    trailer = cap.trailer
    assert f"{trailer['missed_ticks']} (" in text  # missed ticks, from the trailer
    assert "sampler 162.488 ms (3.2 % of a core)" in text  # the recorder's own CPU
    assert "2.000 ms / 3.398 ms / 22.001 ms" in text  # interval p50 / p99 / max achieved


def test_html_is_self_contained(episodes_report):
    _, report = episodes_report
    text = render(report, "html")
    assert "Content-Security-Policy" in text and "<script" not in text
    assert not re.search(r"""(src|href)=["'](?!data:|#)""", text)  # no external resource, no link out
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert len(images) == 2  # timeline and jitter
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)


def test_markdown_report(episodes_report):
    _, report = episodes_report
    text = render(report, "markdown")
    assert text.startswith("# Spike and stall report")
    assert "## What could not be known" in text
    # The answer first: the incidents (as `forensics stalls` numbers them), then the episodes with their
    # verdicts, before the capture's details.
    parts = text.split("\n## ")
    assert parts[1].startswith("The answer: incidents, each root with its evidence\n\n| # | incident | at |")
    assert parts[2].startswith("The stall episodes, each with its evidence\n\n7 stall episodes (")
    assert "| at | tid | thread |" in text.replace("| # | at", "| at")
    assert text.count("](data:image/png;base64,") == 2


def test_report_without_trailer_says_timing_is_unknown(tmp_path):
    path = rewrite(EPISODES, tmp_path / "killed.ssf", trailer=False)
    with pytest.warns(forensics.CaptureWarning):
        cap = forensics.load(path)
    report = build_report(cap, "killed.ssf")
    timing = dict(zip(report.section("timing").frame["item"], report.section("timing").frame["value"], strict=True))
    assert timing["trailer"].startswith("MISSING") and "interval p50/p99/max" not in timing
    unknown = report.section("unknown").frame
    assert unknown["what"].str.contains("missed ticks").any()
    assert len(report.section("stalls").frame) == 7  # the data itself still reads and is analysed


def test_report_without_lab_truth_or_cycles(tmp_path):
    path = rewrite(EPISODES, tmp_path / "field.ssf", drop=("truth", "cycles"))
    cap = forensics.load(path)
    report = build_report(cap, "field.ssf")
    unknown = report.section("unknown").frame
    assert unknown["what"].str.contains("whether the verdicts are right").any()
    assert unknown["what"].str.contains("XRUN rate").any()  # needs the engine's cycle ends
    # The deadline then comes from the periodic thread's own wake-ups, and the picture says so.
    assert "from its wake-ups" in report.section("timeline_plot").image_alt
    assert len(report.section("stalls").frame) == 7


def test_report_lists_missing_sources():
    report = build_report(forensics.load(CLEAN), "clean.ssf")
    what = " ".join(report.section("unknown").frame["what"])
    for missing in ("CONFIG_SCHEDSTATS", "delay accounting", "taskstats", "eBPF"):
        assert missing in what or missing in " ".join(report.section("unknown").frame["why"])
    assert report.section("stalls").frame.empty


@pytest.mark.parametrize("suffix", [".html", ".md"])
def test_report_cli(run_module, tmp_path, suffix):
    out = tmp_path / f"r{suffix}"
    result = run_module("forensics", "report", str(EPISODES), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("wrote ") and "\x1b" not in result.stderr  # no progress, no colour in a pipe
    assert "What could not be known" in out.read_text()


def test_report_cli_bad_suffix_is_one_line(run_module, tmp_path):
    result = run_module("forensics", "report", str(EPISODES), "-o", str(tmp_path / "r.pdf"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"forensics: error: a report cannot be written as '{tmp_path / 'r.pdf'}': name the file .html, .htm, .md"
    ]


# --- headless Chromium ----------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CONSOLE = re.compile(r":CONSOLE[:(]|Uncaught|Refused to|violates the following Content Security Policy")


def _chromium(page, shot, profile) -> str:
    """Screenshot a page as the machine notes say (root: --no-sandbox); Chromium's log on stderr."""
    args = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
        "--window-size=1280,2400", f"--screenshot={shot}", page.as_uri(),
    ]  # fmt: skip
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stderr


@pytest.fixture
def chromium():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: .ci/run installs the Debian package")
        pytest.skip("chromium is not installed here (apt-get install chromium; CI installs it)")
    return CHROMIUM


def test_report_opens_in_chromium_without_console_errors(chromium, tmp_path, episodes_report):
    _, report = episodes_report
    page = tmp_path / "report.html"
    page.write_text(render(report, "html"))
    shot = tmp_path / "report.png"
    log = _chromium(page, shot, tmp_path / "profile")
    assert not [line for line in log.splitlines() if CONSOLE.search(line)], log
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000  # a page with text and pictures, not blank
    # The detector is not blind: a script error and a blocked external picture both show in the log.
    bad = tmp_path / "bad.html"
    bad.write_text(
        render(report, "html")
        .replace("</body>", '<img src="https://example.invalid/x.png"></body>')
        .replace("<body>", "<body><script>throw new Error('kaboom')</script>", 1)
    )
    bad_log = _chromium(bad, tmp_path / "bad.png", tmp_path / "profile2")
    assert [line for line in bad_log.splitlines() if CONSOLE.search(line)]
    plain = tmp_path / "plain.html"
    plain.write_text("<!DOCTYPE html><html><body><script>throw new Error('kaboom')</script></body></html>")
    assert "Uncaught Error: kaboom" in _chromium(plain, tmp_path / "plain.png", tmp_path / "profile3")


# What the page lays out, measured by Chromium itself: a copy of the page with a script that writes the
# measurements into the DOM, which --dump-dom prints once the page has loaded. Only the copy loses the
# Content-Security-Policy (the report forbids scripts); its layout is the report's.
MEASURE = """<script>
const first = document.querySelector('strong[class^="v-"]');
const box = first.getBoundingClientRect();
const spark = document.querySelector('td.mono');
const heads = [...document.querySelectorAll('h1, h2, h3, h4')].map(h => h.textContent);
document.body.setAttribute('data-measured', JSON.stringify({
  verdict: first.textContent, bottom: box.bottom, viewport: window.innerHeight,
  spark_space: spark ? getComputedStyle(spark).whiteSpace : null,
  spark_text: spark ? spark.textContent : null,
  backticks: heads.filter(h => h.includes('`')), code: document.querySelectorAll('h2 code, h3 code').length,
}));
</script>"""


def _measure(chromium, page_html: str, tmp_path) -> dict:
    import html as html_module
    import json

    page = tmp_path / "measured.html"
    page.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page_html).replace(
        "</body>", MEASURE + "</body>"))  # fmt: skip
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile-measure'}", "--window-size=1280,800", "--dump-dom",
            page.as_uri()]  # fmt: skip
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'data-measured="([^"]*)"', result.stdout)
    assert found, result.stdout[-2000:]
    return json.loads(html_module.unescape(found.group(1)))


def test_the_first_screen_holds_the_first_verdict(chromium, tmp_path, episodes_report):
    cap, report = episodes_report
    measured = _measure(chromium, render(report, "html"), tmp_path)
    first = find_stalls(cap).iloc[0]
    assert measured["verdict"] == first["verdict"]
    # A 1280 x 800 window (Chromium's headless viewport is 657 px of it): seen without scrolling.
    assert 600 < measured["viewport"] <= 800 and 0 < measured["bottom"] <= measured["viewport"], measured
    # Sparklines keep their time positions (no collapsed spaces), and headings show code, not backticks.
    assert measured["spark_space"] == "pre" and "  " in measured["spark_text"], measured
    assert measured["backticks"] == [] and measured["code"] >= 1, measured
