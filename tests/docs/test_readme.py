"""The README's front door shows real output: its Python API example prints what the README says it prints, and its
quickstart block is what ``evaltasks run examples/quickstart/suite.yaml`` prints on a fresh checkout (times aside).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.cli_forkserver import run_cli
from tests.process_env import subprocess_env

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    """The text of the README's ``## title`` section."""
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def block(title: str, language: str) -> str:
    """The first fenced block of ``language`` in the README's ``## title`` section."""
    return re.search(rf"```{language}\n(.*?)```", section(title), re.S).group(1)


def fresh_env(tmp_path: Path) -> dict[str, str]:
    env = subprocess_env(tmp_path / "prefect-home")
    for name in ("COLUMNS", "LINES", "EVALTASKS_INDEX_DIR", "EVALTASKS_HISTORY_DIR"):
        env.pop(name, None)
    return env


def test_the_python_api_example_prints_what_the_readme_says(tmp_path: Path) -> None:
    stated = [
        " ".join(text.split())
        for text in re.findall(
            r"`((?:\w+Metric: [0-9.]+, success\s+\w+)|passed \d+ of \d+ case\(s\))`", section("Python API")
        )
    ]
    assert len(stated) == 3, stated
    proc = subprocess.run(
        [sys.executable, "-c", block("Python API", "python")],
        cwd=tmp_path,
        env=fresh_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == stated


def test_the_quickstart_block_is_what_the_command_prints(tmp_path: Path) -> None:
    """A fresh checkout's first run: nothing in the index yet, a temporary Prefect server, output piped."""
    shutil.copytree(REPO / "examples" / "quickstart", tmp_path / "examples" / "quickstart")
    proc = run_cli(
        "run",
        "examples/quickstart/suite.yaml",
        "--no-server",
        cwd=tmp_path,
        env=fresh_env(tmp_path),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = block("Quickstart", "text").rstrip("\n").splitlines()
    printed = [line.rstrip() for line in proc.stdout.rstrip("\n").splitlines()]
    assert printed[:-1] == shown[:-1]
    times = r"\(flow run [0-9.]+ s, total [0-9.]+ s\)"
    assert re.fullmatch(re.escape(shown[-1]).replace(re.escape("(flow run … s, total … s)"), times), printed[-1]), (
        printed[-1],
        shown[-1],
    )
    assert (tmp_path / "eval-results" / "quickstart" / "results.json").is_file()
