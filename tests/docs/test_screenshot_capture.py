"""The parts of docs/screenshots/capture.py that need no browser (docs/reports.md#what-each-surface-shows): the scenario it
runs, its terminal replay, the pseudo-terminal it runs in and the pages it screenshots. Chromium and the Prefect
server are exercised only by running the script itself."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def capture() -> ModuleType:
    spec = importlib.util.spec_from_file_location("evaltasks_capture", REPO / "docs" / "screenshots" / "capture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


def _plain(line: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", line)


def test_screen_replays_a_live_progress_bar_and_keeps_colours(capture: ModuleType) -> None:
    screen = capture.Screen(columns=40, rows=5)
    screen.feed("\x1b[?25l\r\x1b[2Kscoring \x1b[32m 0/16\x1b[0m\r\x1b[2Kscoring \x1b[32m16/16\x1b[0m\r\n")
    screen.feed("\x1b[?25h\r\x1b[1A\x1b[2K\x1b[1;31mGATE FAILED\x1b[0m: pass rate 50.00%\r\nreports: out\r\n")
    lines = screen.ansi_lines()
    assert [_plain(line) for line in lines] == ["GATE FAILED: pass rate 50.00%", "reports: out"]
    assert lines[0].startswith("\x1b[0m\x1b[1;31mGATE FAILED\x1b[0m")


def test_screen_wraps_at_the_width_and_shows_the_last_rows(capture: ModuleType) -> None:
    screen = capture.Screen(columns=10, rows=3)
    screen.feed("0123456789abc\r\n")  # 13 characters: wraps once, exactly at column 10
    screen.feed("".join(f"line {n}\r\n" for n in range(3)))
    screen.feed("ab\x08\x08XY\x1b[5G!\r\n\x1b[31m\x1b[0mend\x1b]0;title\x07")
    assert [_plain(line) for line in screen.ansi_lines()] == ["line 2", "XY  !", "end"]
    assert "".join(char for char, _ in screen.lines[0]) == "0123456789"
    assert "".join(char for char, _ in screen.lines[1]) == "abc"


def test_pseudo_terminal_has_the_size_and_terminal_of_the_screenshot(capture: ModuleType, tmp_path: Path) -> None:
    run = capture.capture_pty(
        [sys.executable, "-c", "import os, sys; print(os.get_terminal_size(), sys.stdout.isatty()); sys.exit(3)"],
        {"PATH": "/usr/bin:/bin"},
        tmp_path,
    )
    assert run.code == 3
    assert run.data.decode().strip() == "os.terminal_size(columns=160, lines=50) True"
    assert run.reads[-1][0] == len(run.data) and 0 <= run.reads[-1][1] <= run.seconds


def test_offset_at_replays_what_the_terminal_had_received_by_then(capture: ModuleType) -> None:
    data = b"starting\rloading model\rscoring 16/16\r\ntable"
    run = capture.PtyCapture(
        code=1, data=data, reads=[(9, 0.5), (23, 40.0), (37, 41.0), (len(data), 41.2)], seconds=41.5
    )
    assert [run.offset_at(t) for t in (0.1, 0.5, 20.75, 40.0, 41.5)] == [0, 9, 9, 23, len(data)]
    screen = capture.Screen()
    screen.feed(data[: run.offset_at(20.75)].decode())
    assert screen.ansi_lines() == ["starting"]


def test_scenario_changes_answers_so_that_cases_newly_fail(capture: ModuleType, tmp_path: Path) -> None:
    baseline, pull_request = capture.write_scenario(tmp_path)
    quickstart = REPO / "examples" / "quickstart"
    assert baseline.read_text() == pull_request.read_text() == (quickstart / "suite.yaml").read_text()
    assert (baseline.parent / "answers.jsonl").read_text() == (quickstart / "answers.jsonl").read_text()
    rows = {row["id"]: row for row in map(json.loads, (pull_request.parent / "answers.jsonl").read_text().splitlines())}
    assert "password" not in rows and rows["everest"]["answer"].startswith("Mount Everest")
    assert rows["planets"]["answer"] == "I can only answer questions about our products."
    assert "[the docs](https://example.com/moon)" in rows["moon"]["answer"]
    assert len(rows["boiling"]["answer"].split()) > 30  # over the suite's LengthCheckMetric max_length
    assert rows["capital-fr"] == json.loads((quickstart / "answers.jsonl").read_text().splitlines()[0])


def test_markdown_page_renders_as_github_does(capture: ModuleType, tmp_path: Path) -> None:
    markdown = (
        "**FAILED**: pass rate 50.00%\n\n<details><summary>Worst cases</summary>\n\n| case | score |\n|---|---|\n"
        '| moon | 0.48 |\n</details>\n\n```mermaid\npie\n  "passed" : 4\n```\n'
    )
    js = tmp_path / "mermaid.min.js"
    js.write_text("")
    page = capture.markdown_page(markdown, "PR <comment>", None, js)
    assert "<strong>FAILED</strong>" in page and "<details><summary>Worst cases</summary>" in page
    assert "<td>moon</td>" in page and "<title>PR &lt;comment&gt;</title>" in page
    assert '<pre class="mermaid">pie\n  &quot;passed&quot; : 4\n</pre>' in page and js.as_uri() in page
    assert "width: 830px" in page and capture.FALLBACK_CSS in page and "data-size" in page
    without = capture.markdown_page(markdown, "PR comment", "/* css */", None)
    assert '<pre lang="mermaid">' in without and "mermaid.run" not in without and "/* css */" in without


def test_terminal_page_keeps_text_and_colours(capture: ModuleType) -> None:
    page = capture.terminal_html(
        [
            ("$ evaltasks run", ["scoring 3/16"]),
            ("at the end", ["\x1b[1;31mGATE FAILED\x1b[0m: pass rate 50.00%", "a < b"]),
        ]
    )
    assert page.index("scoring 3/16") < page.index("GATE FAILED") < page.index("a &lt; b")
    assert "#ff0000" in page.lower() or "#cd0000" in page.lower()  # xterm's red, bold or not
    assert '<div class="bar">$ evaltasks run</div>' in page and '<div class="bar">at the end</div>' in page
    assert page.count("<pre") == 2 and "data-size" in page


LATE_PAGE = """<!doctype html><html><body><p>description only</p>
<script>setTimeout(() => {{ document.body.insertAdjacentHTML("beforeend", "<h1>Cases: 7 passed</h1>"); }}, {delay});
</script></body></html>"""


@pytest.mark.skipif(__import__("shutil").which("chromium") is None, reason="needs chromium on PATH")
def test_a_page_is_shot_only_once_it_has_rendered_and_a_page_that_never_does_fails(
    capture: ModuleType, tmp_path: Path
) -> None:
    """Real headless Chromium on a page whose text appears after 3 s of (virtual) time, as Prefect's UI renders
    late on a busy machine: a 1 s budget shows only the description, so it is doubled until the text is there (4 s)
    and only then shot; a page whose text never appears gives no screenshot and an error naming it."""
    late = tmp_path / "late.html"
    late.write_text(LATE_PAGE.format(delay=3000))
    shot = tmp_path / "late.png"
    budget = capture.rendered_screenshot(late.as_uri(), shot, (400, 300), "Cases: 7 passed", 1000, name="late page")
    assert budget == 4000 and shot.read_bytes().startswith(b"\x89PNG")
    never = tmp_path / "never.html"
    never.write_text(LATE_PAGE.format(delay=600000))
    with pytest.raises(capture.CaptureError, match=r"^the Prefect summary artifact page did not render 'Cases: 7"):
        capture.rendered_screenshot(
            never.as_uri(),
            tmp_path / "never.png",
            (400, 300),
            "Cases: 7 passed",
            500,
            name="the Prefect summary artifact page",
        )
    assert not (tmp_path / "never.png").exists()
