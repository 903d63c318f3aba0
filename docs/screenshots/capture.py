"""Screenshots of every report surface, taken with headless Chromium from one real run
(docs/reports.md#what-each-surface-shows).

    .venv/bin/python docs/screenshots/capture.py [--out DIR] [--keep]

What it does, all on this machine (no network; Chromium, npm's cache and the local embedding model only):

1. writes a baseline and a pull request's version of the bundled quickstart suite (``examples/quickstart``) into a
   temporary directory: the pull request changes some answers so that cases newly fail (one answer carries a
   markdown link, to show whether model text stays inert), fixes one, drops one and adds one;
2. starts Prefect's own server (``prefect server start``, UI included) on a free port in a temporary
   ``PREFECT_HOME``, runs the baseline against it, then the pull request's run with ``--baseline`` in a
   pseudo-terminal of 160 × 50 (``TERM=xterm-256color``), keeping the bytes the terminal received;
3. runs the Action's ``action/report.py`` on that run's output directory as a pull-request job would
   (``OUTPUT_DIR``, ``EXIT_CODE``, ``GITHUB_STEP_SUMMARY``, ``GITHUB_EVENT_PATH``, ...), and renders the PR comment
   and the job summary with cmark-gfm (GitHub's renderer) inside GitHub's markdown stylesheet
   (``github-markdown-css`` from npm) in an 830 px column, the width of a PR conversation's comments, with
   Mermaid charts drawn by ``mermaid`` from npm (both fetched by ``npm pack`` into a cache under /tmp; without
   npm: a minimal stylesheet, and Mermaid blocks stay code);
4. takes the screenshots: ``pr-comment.png``, ``job-summary.png``, ``prefect-flow-run.png`` (the flow run's
   page: state, tags, timeline, logs), ``prefect-artifact.png`` (the summary artifact) and ``terminal.png`` (two
   screens of the pseudo-terminal, replayed by :class:`Screen` and drawn with rich's HTML export: half-way through
   the run, :meth:`PtyCapture.offset_at`, and the final one), each at most
   :data:`MAX_PNG_BYTES` where it can be (reduced to 256 colours by Pillow when it is installed).

The Prefect pages are shot only once they have rendered (:func:`rendered_screenshot`: their text must be in the
DOM, the virtual-time budget doubled up to 3 tries), so a busy machine cannot leave an empty screenshot.

Exit status 0 when every screenshot was written; 1 with a message naming the step (or page) that failed. Needs
``chromium`` (Debian's package) on ``PATH``.
"""

from __future__ import annotations

import argparse
import fcntl
import html
import io
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import tempfile
import termios
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CACHE = Path(tempfile.gettempdir()) / "evaltasks-screenshot-cache"
COLUMN_PX = 830  # the body of a comment in a pull request's conversation, the width docs/reports.md#what-each-surface-shows sizes reports for
TERMINAL = (160, 50)  # columns, rows
PREFECT_WINDOW = (1440, 1000)
PREFECT_ARTIFACT_WINDOW = (1440, 2200)  # the summary artifact is long: its verdict, tables and changes
MAX_HEIGHT_PX = 6000  # a page taller than this is cut (Chromium's screenshot is the window)
MAX_PNG_BYTES = 300_000
SERVER_DEADLINE_S = 600.0  # Prefect's server start (database migrations on a busy machine)
RUN_DEADLINE_S = 1800.0  # one evaltasks run (the model load on a busy machine)
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
    "--force-device-scale-factor=1", "--mute-audio",
)
FALLBACK_CSS = """
.markdown-body { font-family: -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif;
  font-size: 14px; line-height: 1.5; color: #1f2328; word-wrap: break-word; }
.markdown-body table { border-collapse: collapse; display: block; width: max-content; max-width: 100%;
  overflow: auto; }
.markdown-body td, .markdown-body th { border: 1px solid #d1d9e0; padding: 6px 13px; }
.markdown-body code, .markdown-body pre { font-family: ui-monospace, "DejaVu Sans Mono", monospace;
  font-size: 85%; background: #f6f8fa; border-radius: 6px; }
.markdown-body pre { padding: 16px; overflow: auto; }
"""


class CaptureError(Exception):
    """A step of the capture failed; the message names the step and what it saw."""


# --- the scenario: a baseline and a pull request's answers --------------------------------------------------------

PR_ANSWERS: dict[str, str | None] = {
    # answers the pull request changes (None: the case is removed); the others stay as in the baseline
    "boiling": ("Water boils at 100 degrees Celsius at sea level, which is 212 degrees Fahrenheit; higher up the air "
                "pressure is lower, so it boils at a lower temperature, about 70 degrees on the summit of Everest."),
    "planets": "I can only answer questions about our products.",
    "moon": "See [the docs](https://example.com/moon) for who walked on the Moon first.",
    "verbose": "Red is a primary colour.",
    "password": None,
}
PR_NEW_CASE = {
    "id": "everest", "question": "What is the highest mountain on Earth?",
    "answer": "Mount Everest, at 8,849 metres above sea level.",
    "references": ["Mount Everest is the highest mountain above sea level."],
}


def write_scenario(workdir: Path) -> tuple[Path, Path]:
    """Write ``workdir/baseline/suite.yaml`` (the quickstart suite as bundled) and ``workdir/pull-request/
    suite.yaml`` (the same suite, its answers changed by :data:`PR_ANSWERS` and :data:`PR_NEW_CASE`); returns
    both suite paths."""
    source = REPO / "examples" / "quickstart"
    rows = [json.loads(line) for line in (source / "answers.jsonl").read_text(encoding="utf-8").splitlines() if line]
    changed: list[dict[str, Any]] = []
    for row in rows:
        if row["id"] in PR_ANSWERS:
            if PR_ANSWERS[row["id"]] is None:
                continue
            row = {**row, "answer": PR_ANSWERS[row["id"]]}
        changed.append(row)
    changed.append(PR_NEW_CASE)
    suites = []
    for name, answers in (("baseline", rows), ("pull-request", changed)):
        directory = workdir / name
        directory.mkdir(parents=True)
        shutil.copy(source / "suite.yaml", directory / "suite.yaml")
        (directory / "answers.jsonl").write_text(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in answers), encoding="utf-8")
        suites.append(directory / "suite.yaml")
    return suites[0], suites[1]


# --- a terminal's final screen -------------------------------------------------------------------------------------

_CSI = re.compile(r"\x1b\[([0-9;?<=>]*)([ -/]*)([@-~])")
_OSC = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


@dataclass
class Screen:
    """A terminal of ``columns`` × ``rows`` that keeps its scrollback: enough of xterm for what rich and Prefect
    write (printable text with line wrap, CR, LF, BS, TAB, SGR colours, erase in line/display, cursor movement;
    other escape sequences are dropped). :meth:`feed` takes the text the terminal received; :meth:`ansi_lines`
    gives the final screen, the last ``rows`` lines, as text with SGR sequences."""

    columns: int = TERMINAL[0]
    rows: int = TERMINAL[1]
    lines: list[list[tuple[str, str]]] = field(default_factory=lambda: [[]])
    row: int = 0
    col: int = 0
    style: str = ""
    _pending_wrap: bool = False

    def _top(self) -> int:
        """Index in :attr:`lines` of the screen's first row."""
        return max(len(self.lines) - self.rows, 0)

    def _move_to(self, row: int, col: int) -> None:
        self.row = max(row, 0)
        while len(self.lines) <= self.row:
            self.lines.append([])
        self.col = min(max(col, 0), self.columns - 1)
        self._pending_wrap = False

    def _put(self, char: str) -> None:
        if self._pending_wrap:
            self._move_to(self.row + 1, 0)
        line = self.lines[self.row]
        while len(line) < self.col:
            line.append((" ", ""))
        if self.col < len(line):
            line[self.col] = (char, self.style)
        else:
            line.append((char, self.style))
        if self.col == self.columns - 1:
            self._pending_wrap = True
        else:
            self.col += 1

    def _sgr(self, params: str) -> None:
        codes = params.split(";") if params else ["0"]
        parts = self.style.split(";") if self.style else []
        for code in codes:
            if code in ("", "0"):
                parts = []
            else:
                parts.append(code)
        self.style = ";".join(parts)

    def _erase_line(self, mode: int) -> None:
        line = self.lines[self.row]
        if mode == 0:
            del line[self.col:]
        elif mode == 1:
            for index in range(min(self.col + 1, len(line))):
                line[index] = (" ", "")
        else:
            line.clear()

    def _csi(self, params: str, final: str) -> None:
        if params.startswith(("?", "<", "=", ">")):
            return  # private modes (cursor visibility, bracketed paste...): nothing drawn
        numbers = [int(part) if part.isdigit() else 0 for part in params.split(";")] if params else []
        first = numbers[0] if numbers else 0
        count = max(first, 1)
        if final == "m":
            self._sgr(params)
        elif final == "K":
            self._erase_line(first)
        elif final == "J":
            if first in (2, 3):
                for index in range(self._top(), len(self.lines)):
                    self.lines[index] = []
            elif first == 0:
                self._erase_line(0)
                del self.lines[self.row + 1:]
        elif final == "A":
            self._move_to(max(self.row - count, self._top()), self.col)
        elif final in ("B", "E"):
            self._move_to(self.row + count, 0 if final == "E" else self.col)
        elif final == "F":
            self._move_to(max(self.row - count, self._top()), 0)
        elif final == "C":
            self._move_to(self.row, self.col + count)
        elif final == "D":
            self._move_to(self.row, self.col - count)
        elif final == "G":
            self._move_to(self.row, count - 1)
        elif final in ("H", "f"):
            row = numbers[0] if numbers and numbers[0] else 1
            col = numbers[1] if len(numbers) > 1 and numbers[1] else 1
            self._move_to(self._top() + row - 1, col - 1)

    def feed(self, text: str) -> None:
        """Apply ``text`` (what the terminal received, decoded) to the screen."""
        text = _OSC.sub("", text)
        position = 0
        while position < len(text):
            char = text[position]
            if char == "\x1b":
                match = _CSI.match(text, position)
                if match:
                    self._csi(match[1], match[3])
                    position = match.end()
                else:
                    position += 2  # a two-character escape (charset selection, keypad mode...)
                continue
            if char == "\n":
                self._move_to(self.row + 1, self.col)
            elif char == "\r":
                self._move_to(self.row, 0)
            elif char == "\b":
                self._move_to(self.row, self.col - 1)
            elif char == "\t":
                self._move_to(self.row, (self.col // 8 + 1) * 8)
            elif char >= " " and char != "\x7f":
                self._put(char)
            position += 1

    def ansi_lines(self) -> list[str]:
        """The final screen: the last :attr:`rows` lines (trailing blank lines left out first), each as text with
        SGR sequences, trailing spaces without a background dropped."""
        lines = list(self.lines)
        while lines and not "".join(char for char, _ in lines[-1]).strip():
            lines.pop()
        out = []
        for line in lines[-self.rows:]:
            cells = list(line)
            while cells and cells[-1][0] == " " and not cells[-1][1]:
                cells.pop()
            text, current = [], ""
            for char, style in cells:
                if style != current:
                    text.append("\x1b[0m" + (f"\x1b[{style}m" if style else ""))
                    current = style
                text.append(char)
            if current:
                text.append("\x1b[0m")
            out.append("".join(text))
        return out


def _xterm_theme() -> Any:
    """xterm's default colours (light grey on black, its 16-colour palette) as a rich terminal theme."""
    from rich.terminal_theme import TerminalTheme

    return TerminalTheme(
        (0, 0, 0), (229, 229, 229),
        [(0, 0, 0), (205, 0, 0), (0, 205, 0), (205, 205, 0), (59, 120, 255), (205, 0, 205), (0, 205, 205),
         (229, 229, 229)],
        [(127, 127, 127), (255, 0, 0), (0, 255, 0), (255, 255, 0), (92, 92, 255), (255, 0, 255), (0, 255, 255),
         (255, 255, 255)],
    )


def terminal_html(screens: list[tuple[str, list[str]]], columns: int = TERMINAL[0]) -> str:
    """An HTML page of terminal screens, each a (title, lines) pair: its lines (text with SGR sequences) drawn by
    rich's HTML export at ``columns`` columns under a title bar; the page reports its size for :func:`page_size`."""
    from rich.console import Console
    from rich.text import Text

    parts = []
    for title, lines in screens:
        console = Console(record=True, width=columns, file=io.StringIO(), color_system="truecolor",
                          force_terminal=True, legacy_windows=False)
        for line in lines:
            console.print(Text.from_ansi(line), soft_wrap=True, overflow="ignore", crop=False)
        exported = console.export_html(theme=_xterm_theme(), inline_styles=True, code_format="<pre>{code}</pre>")
        parts.append(f'<div class="bar">{html.escape(title)}</div>{exported}')
    theme = _xterm_theme()
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><style>
body {{ margin: 0; display: inline-block; background: {theme.background_color.hex};
  color: {theme.foreground_color.hex}; }}
pre {{ margin: 0; padding: 10px 12px; font: 13px/1.25 "DejaVu Sans Mono", Menlo, Consolas, monospace; }}
.bar {{ background: #333; color: #ddd; font: 13px sans-serif; padding: 5px 12px; }}
</style></head><body>{"".join(parts)}
{_SIZE_SCRIPT}</body></html>
"""


@dataclass
class PtyCapture:
    """What a program wrote to its pseudo-terminal (:func:`capture_pty`): its exit status, every byte, and when
    each read ended (offset in ``data``, seconds since the start)."""

    code: int
    data: bytes
    reads: list[tuple[int, float]]
    seconds: float

    def offset_at(self, seconds: float) -> int:
        """How many bytes of :attr:`data` the terminal had received ``seconds`` after the start: replay that many
        for the screen a person watching saw then."""
        offset = 0
        for end, at in self.reads:
            if at > seconds:
                break
            offset = end
        return offset


def capture_pty(argv: list[str], env: dict[str, str], cwd: Path, size: tuple[int, int] = TERMINAL,
                deadline_s: float = RUN_DEADLINE_S) -> PtyCapture:
    """Run ``argv`` in a new pseudo-terminal of ``size`` (columns, rows); returns what it wrote and when. Raises
    :class:`CaptureError` when it is still running after ``deadline_s`` (it is then killed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
    process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
                               start_new_session=True)
    os.close(slave)
    data = bytearray()
    reads: list[tuple[int, float]] = []
    start = time.monotonic()
    try:
        while True:
            if time.monotonic() - start > deadline_s:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise CaptureError(f"{' '.join(argv)} still ran after {deadline_s:.0f} s")
            if not select.select([master], [], [], 1.0)[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            data += chunk
            reads.append((len(data), time.monotonic() - start))
    finally:
        os.close(master)
    code = process.wait()
    return PtyCapture(code, bytes(data), reads, time.monotonic() - start)


# --- markdown as GitHub shows it ---------------------------------------------------------------------------------

_SIZE_SCRIPT = """<script>
function evaltasksSize() {
  const root = document.documentElement;
  document.body.setAttribute('data-size', Math.ceil(root.scrollWidth) + 'x' + Math.ceil(root.scrollHeight));
}
evaltasksSize();
</script>"""

_MERMAID_BLOCK = re.compile(r'<pre lang="mermaid"><code>(.*?)</code></pre>', re.S)


def npm_asset(package: str, member: str) -> Path | None:
    """``member`` of the npm ``package`` (``npm pack`` into :data:`CACHE`, once), or None when npm or the package
    is unavailable."""
    target = CACHE / package / member
    if target.exists():
        return target
    npm = shutil.which("npm")
    if npm is None:
        return None
    (CACHE / package).mkdir(parents=True, exist_ok=True)
    result = subprocess.run([npm, "pack", package, "--silent"], cwd=CACHE / package, capture_output=True,
                            text=True, timeout=300)
    tarballs = sorted((CACHE / package).glob("*.tgz"))
    if result.returncode != 0 or not tarballs:
        print(f"capture: npm pack {package} failed: {result.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    with tarfile.open(tarballs[-1]) as archive:
        try:
            data = archive.extractfile(f"package/{member}")
        except KeyError:
            return None
        if data is None:
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.read())
    return target


def markdown_page(markdown: str, title: str, css: str | None, mermaid_js: Path | None,
                  width_px: int = COLUMN_PX) -> str:
    """An HTML page of ``markdown`` rendered by cmark-gfm as GitHub renders comments (raw HTML such as
    ``<details>`` kept), in GitHub's stylesheet ``css`` (else :data:`FALLBACK_CSS`) in a ``width_px`` column
    under a ``title`` bar; Mermaid blocks become charts when ``mermaid_js`` is given. The page reports its size
    for :func:`page_size` once the charts are drawn."""
    import cmarkgfm
    from cmarkgfm.cmark import Options

    body = cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    scripts = _SIZE_SCRIPT
    if mermaid_js is not None and _MERMAID_BLOCK.search(body):
        body = _MERMAID_BLOCK.sub(lambda m: f'<pre class="mermaid">{m[1]}</pre>', body)
        scripts += (f'<script src="{mermaid_js.as_uri()}"></script><script>'
                    "mermaid.initialize({startOnLoad: false, theme: 'default'});"
                    "mermaid.run({querySelector: 'pre.mermaid'}).finally(evaltasksSize);</script>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{css if css is not None else FALLBACK_CSS}</style>
<style>
body {{ margin: 0; padding: 12px; background: #fff; display: inline-block; }}
.frame {{ width: {width_px + 34}px; border: 1px solid #d1d9e0; border-radius: 6px; }}
.frame .bar {{ background: #f6f8fa; border-bottom: 1px solid #d1d9e0; padding: 8px 16px;
  font: 14px -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; color: #59636e; }}
.markdown-body {{ box-sizing: content-box; width: {width_px}px; padding: 16px; }}
pre.mermaid {{ background: #fff; }}
</style></head>
<body><div class="frame"><div class="bar">{html.escape(title)}</div>
<article class="markdown-body">{body}</article></div>
{scripts}
</body></html>
"""


# --- Chromium ------------------------------------------------------------------------------------------------------

def chromium() -> str:
    """The Chromium executable (``chromium``, ``chromium-browser`` or ``google-chrome`` on ``PATH``)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise CaptureError("no chromium on PATH (Debian: apt-get install chromium)")


def _chromium_run(args: list[str], budget_ms: int) -> str:
    with tempfile.TemporaryDirectory(prefix="evaltasks-chromium-") as profile:
        result = subprocess.run(
            [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", *args],
            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise CaptureError(f"chromium {' '.join(args)}: exit {result.returncode}: {result.stderr.strip()[-500:]}")
    return result.stdout


def page_size(url: str, budget_ms: int = 10000) -> tuple[int, int]:
    """The (width, height) in CSS pixels that a page made by :func:`markdown_page` or :func:`terminal_html`
    reports once rendered (its ``data-size`` attribute)."""
    dom = _chromium_run(["--window-size=320,200", "--dump-dom", url], budget_ms)
    match = re.search(r'data-size="(\d+)x(\d+)"', dom)
    if match is None:
        raise CaptureError(f"{url} did not report its size")
    return int(match[1]), int(match[2])


def screenshot(url: str, path: Path, size: tuple[int, int], budget_ms: int = 10000) -> None:
    """Save a ``size`` (width, height) screenshot of ``url`` to ``path``, then make it at most
    :data:`MAX_PNG_BYTES` where ImageMagick can (256 colours)."""
    width, height = size[0], min(size[1], MAX_HEIGHT_PX)
    _chromium_run([f"--window-size={width},{height}", f"--screenshot={path}", url], budget_ms)
    if not path.exists():
        raise CaptureError(f"chromium wrote no screenshot of {url}")
    if path.stat().st_size > MAX_PNG_BYTES:
        reduce_png(path)


RENDER_TRIES = 3
"""Budgets tried by :func:`rendered_screenshot` (each twice the one before) before it gives up on a page."""


def rendered_screenshot(url: str, path: Path, size: tuple[int, int], expect: str, budget_ms: int = 10000,
                        name: str = "") -> int:
    """:func:`screenshot` of a page that renders itself (Prefect's single-page UI), taken only once it has rendered:
    first ``--dump-dom`` with the same ``--virtual-time-budget`` must contain ``expect`` (its text, runs of
    whitespace as one space); else the budget is doubled, up to :data:`RENDER_TRIES` tries in all. On a busy
    machine the UI may not have rendered within the budget (the artifact page showed only its description), and a
    screenshot of it would be empty. Returns the budget used; raises CaptureError naming the page (``name``, else
    ``url``) when it never rendered."""
    wanted = " ".join(expect.split())
    budget = budget_ms
    for _ in range(RENDER_TRIES):
        dom = _chromium_run([f"--window-size={size[0]},{min(size[1], MAX_HEIGHT_PX)}", "--dump-dom", url], budget)
        shown = re.sub(r"(?is)<(script|style|template)\b.*?</\1\s*>", " ", dom)  # code is not what a page shows
        text = " ".join(html.unescape(re.sub(r"<[^>]*>", " ", shown)).split())
        if wanted in text:
            screenshot(url, path, size, budget)
            return budget
        budget *= 2
    raise CaptureError(f"{name or url} did not render {wanted[:80]!r} within a virtual-time budget of "
                       f"{budget // 2} ms ({RENDER_TRIES} tries from {budget_ms} ms); no screenshot taken")


def reduce_png(path: Path) -> None:
    """Rewrite the PNG at ``path`` with a 256-colour palette when that is smaller (Pillow, where installed: it is
    not a dependency of evaltasks; without it the PNG stays as Chromium wrote it)."""
    try:
        from PIL import Image
    except ImportError:
        print(f"capture: {path.name} is {path.stat().st_size:,} bytes (install Pillow to reduce it)", file=sys.stderr)
        return
    smaller = path.with_suffix(".small.png")
    with Image.open(path) as image:
        # octree keeps small areas of a colour of their own (an emoji, a red FAILED) that median cut merges away
        image.convert("RGB").quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE).save(
            smaller, optimize=True)
    if smaller.stat().st_size < path.stat().st_size:
        smaller.replace(path)
    else:
        smaller.unlink()


def screenshot_page(page: str, path: Path, workdir: Path) -> tuple[int, int]:
    """Write the HTML ``page`` beside the work files, measure it and screenshot it whole to ``path``; returns its
    size."""
    html_path = workdir / (path.stem + ".html")
    html_path.write_text(page, encoding="utf-8")
    size = page_size(html_path.as_uri())
    screenshot(html_path.as_uri(), path, size)
    return size


# --- Prefect -------------------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _api(url: str, path: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"},
                                     method="GET" if body is None else "POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def start_prefect(home: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``prefect server start`` (UI included) on a free port with its database in ``home``; returns the
    process (a session of its own) and its API URL once ``/api/health`` answers. The UI is told its API URL
    (``PREFECT_UI_API_URL``): Prefect's UI otherwise calls port 4200 whatever port the server has."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_UI_API_URL": url,
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_SERVER_API_HOST": "127.0.0.1",
           "PREFECT_SERVER_API_PORT": str(port)}
    env.pop("PREFECT_API_URL", None)
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
    end = time.monotonic() + SERVER_DEADLINE_S
    while time.monotonic() < end:
        if process.poll() is not None:
            raise CaptureError(f"prefect server start ended with {process.returncode}; see {log}")
        try:
            if _api(url, "/health") is True:
                return process, url
        except OSError:
            pass
        time.sleep(0.5)
    stop(process)
    raise CaptureError(f"Prefect's server did not answer within {SERVER_DEADLINE_S:.0f} s; see {log}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """End ``process`` and its session (SIGTERM, then SIGKILL after 20 s)."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def newest_flow_run(url: str) -> dict[str, Any]:
    """The flow run that started last on the server at ``url``."""
    runs = _api(url, "/flow_runs/filter", {"limit": 1, "sort": "START_TIME_DESC"})
    if not runs:
        raise CaptureError("the Prefect server has no flow run")
    return runs[0]


def summary_artifact(url: str, flow_run_id: str) -> dict[str, Any] | None:
    """The flow run's markdown artifact whose key ends with ``-summary`` (docs/reports.md#outputs), else its first
    markdown artifact, else None."""
    artifacts = _api(url, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}})
    markdown = [artifact for artifact in artifacts if artifact.get("type") == "markdown"]
    for artifact in markdown:
        if (artifact.get("key") or "").endswith("-summary"):
            return artifact
    return markdown[0] if markdown else None


# --- the capture ---------------------------------------------------------------------------------------------------

def run_env(home: Path, api_url: str) -> dict[str, str]:
    """The environment of the runs: the capture's Prefect server, the local model offline, no evaltasks server,
    Prefect's task results kept in the work directory."""
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": api_url, "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "EVALTASKS_NO_SERVER": "1",
           "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(home / "storage")}
    for name in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "CI", "GITHUB_ACTIONS"):
        env.pop(name, None)
    return env


def action_report(output_dir: Path, exit_code: int, workdir: Path) -> tuple[str, str]:
    """Run ``action/report.py`` on ``output_dir`` as the Action's report step does in a pull request's job
    (tests/action/test_action.py drives it the same way); returns (PR comment body, job summary)."""
    step = workdir / "action-step"
    step.mkdir()
    env = {**os.environ}
    env.update({
        "OUTPUT_DIR": str(output_dir), "EXIT_CODE": str(exit_code), "SUITE": "examples/quickstart/suite.yaml",
        "SUITE_ID": "quickstart", "RUN_LOG": str(step / "run.log"), "COMMENT_BODY_FILE": str(step / "comment.md"),
        "GITHUB_STEP_SUMMARY": str(step / "summary.md"), "GITHUB_OUTPUT": str(step / "output"),
        "GITHUB_EVENT_PATH": str(REPO / "tests" / "data" / "pull_request_event.json"),
        "GITHUB_EVENT_NAME": "pull_request", "GITHUB_REPOSITORY": "example/evaltasks-demo",
        "GITHUB_SERVER_URL": "https://github.com", "GITHUB_RUN_ID": "4242", "BASELINE_AUTO": "true",
    })
    for name in ("GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT"):
        Path(env[name]).write_text("", encoding="utf-8")
    result = subprocess.run([sys.executable, str(REPO / "action" / "report.py")], env=env, capture_output=True,
                            text=True, timeout=300)
    if result.returncode != 0:
        raise CaptureError(f"action/report.py: exit {result.returncode}: {result.stderr.strip()[-800:]}")
    return (Path(env["COMMENT_BODY_FILE"]).read_text(encoding="utf-8"),
            Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8"))


def capture(out: Path, workdir: Path) -> dict[str, float]:
    """Make every screenshot into ``out`` using ``workdir`` for the runs; returns seconds per step."""
    times: dict[str, float] = {}
    started = time.monotonic()

    def lap(name: str) -> None:
        nonlocal started
        times[name] = round(time.monotonic() - started, 1)
        started = time.monotonic()

    out.mkdir(parents=True, exist_ok=True)
    chromium()
    baseline_suite, pr_suite = write_scenario(workdir)
    home = workdir / "prefect-home"
    home.mkdir()
    server, api_url = start_prefect(home, workdir / "prefect-server.log")
    lap("prefect server start")
    try:
        env = run_env(home, api_url)
        cli = [sys.executable, "-m", "evaltasks.cli", "run"]
        index = ["--index-dir", "index"]  # paths relative to the work directory: the terminal shows them
        base = subprocess.run([*cli, str(baseline_suite.relative_to(workdir)), "--output-dir", "out-baseline", *index],
                              env=env, cwd=workdir, capture_output=True, text=True, timeout=RUN_DEADLINE_S)
        if base.returncode not in (0, 1):
            raise CaptureError(f"the baseline run: exit {base.returncode}: {(base.stdout + base.stderr)[-1500:]}")
        lap("baseline run")
        pr_out = workdir / "out-pull-request"
        arguments = [str(pr_suite.relative_to(workdir)), "--output-dir", pr_out.name, "--baseline",
                     "out-baseline/results.json", "--baseline-label", "main"]
        argv = [*cli, *arguments, *index]
        run = capture_pty(argv, {**env, "TERM": "xterm-256color"}, workdir)
        code = run.code
        (workdir / "terminal.bytes").write_bytes(run.data)
        if code not in (0, 1):
            raise CaptureError(f"the pull request's run: exit {code}: {run.data.decode('utf-8', 'replace')[-1500:]}")
        lap("pull request run (pty)")

        middle = run.seconds / 2  # a live display redraws every tick: its screen half-way through the run
        live, final = Screen(), Screen()
        live.feed(run.data[:run.offset_at(middle)].decode("utf-8", "replace"))
        final.feed(run.data.decode("utf-8", "replace"))
        command = f"$ evaltasks run {' '.join(arguments)}"
        screenshot_page(terminal_html([
            (f"{command}   (terminal {TERMINAL[0]}×{TERMINAL[1]}; while running: after {middle:.1f} s of "
             f"{run.seconds:.1f} s)", live.ansi_lines()),
            ("at the end", final.ansi_lines()),
        ]), out / "terminal.png", workdir)
        lap("terminal screenshot")

        comment, job_summary = action_report(pr_out, code, workdir)
        css_path = npm_asset("github-markdown-css", "github-markdown.css")
        css = css_path.read_text(encoding="utf-8") if css_path else None
        mermaid_js = npm_asset("mermaid", "dist/mermaid.min.js")
        screenshot_page(markdown_page(comment, "github-actions (bot) commented: the PR comment", css, mermaid_js),
                        out / "pr-comment.png", workdir)
        screenshot_page(markdown_page(job_summary, "Job summary (evaltasks step)", css, mermaid_js),
                        out / "job-summary.png", workdir)
        lap("action report and markdown screenshots")

        ui = api_url.removesuffix("/api")  # Prefect 3.9 serves its V1 UI here (V2 under /v2)
        flow_run = newest_flow_run(api_url)
        # each Prefect page is shot once it shows what it is for: the run's name, the artifact's "Cases:" line
        rendered_screenshot(f"{ui}/runs/flow-run/{flow_run['id']}", out / "prefect-flow-run.png", PREFECT_WINDOW,
                            flow_run["name"], 20000, name="the Prefect flow run page")
        artifact = summary_artifact(api_url, flow_run["id"])
        if artifact is None:
            raise CaptureError(f"flow run {flow_run['name']} has no markdown artifact")
        cases_line = next((line for line in str(artifact.get("data") or "").splitlines()
                           if line.startswith("Cases: ")), "Cases that changed")
        rendered_screenshot(f"{ui}/artifacts/artifact/{artifact['id']}", out / "prefect-artifact.png",
                            PREFECT_ARTIFACT_WINDOW, cases_line.split(";")[0], 20000,
                            name="the Prefect summary artifact page")
        lap("Prefect UI screenshots")
    finally:
        stop(server)
    return times


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, capture, print each PNG's size and the time per step; 0 on success, 1 on failure."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where the PNGs go (default: docs/screenshots)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (runs, HTML pages, logs)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="evaltasks-capture-"))
    started = time.monotonic()
    try:
        times = capture(args.out.resolve(), workdir)
    except (CaptureError, OSError, subprocess.SubprocessError) as exc:
        print(f"capture: failed: {exc} (work directory kept: {workdir})", file=sys.stderr)
        return 1
    for name in ("pr-comment", "job-summary", "prefect-flow-run", "prefect-artifact", "terminal"):
        path = args.out / f"{name}.png"
        print(f"{path}: {path.stat().st_size:,} bytes")
    print("seconds: " + ", ".join(f"{name} {seconds}" for name, seconds in times.items())
          + f"; total {time.monotonic() - started:.1f}")
    if args.keep:
        print(f"work directory: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
