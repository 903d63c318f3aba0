"""``examples/truthfulqa/fetch_data.py`` (docs/install.md#truthfulqa-data-not-in-the-repository): it downloads the two public files into
place and checks their sha256. Tested against a real HTTP server on 127.0.0.1 (stdlib ``http.server``) that
serves the files of ``../shared/data/truthfulqa`` (a mirror, through ``--base-url``); there is no internet here.
The expected sha256 values are computed here from those files, independently of the script's pinned ones.
"""

from __future__ import annotations

import hashlib
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "truthfulqa" / "fetch_data.py"
NAMES = ("TruthfulQA.csv", "davinci_answers.csv")


@contextmanager
def _serving(directory: Path) -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 serving ``directory``; yields its base URL and the paths requested."""
    requested: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(directory), **kwargs)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            requested.append(self.path)
            super().do_GET()

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requested
    finally:
        server.shutdown()
        server.server_close()


def _fetch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_pinned_sha256_values_are_those_of_the_published_files(truthfulqa_dir: Path) -> None:
    text = SCRIPT.read_text(encoding="utf-8")
    for name in NAMES:
        assert hashlib.sha256((truthfulqa_dir / name).read_bytes()).hexdigest() in text, name


def test_fetch_downloads_both_files_checks_them_and_keeps_them(truthfulqa_dir: Path, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    with _serving(truthfulqa_dir) as (base_url, requested):
        first = _fetch("--dest", str(dest), "--base-url", base_url)
        assert first.returncode == 0, first.stderr
        assert sorted(requested) == ["/TruthfulQA.csv", "/davinci_answers.csv"]
        for name in NAMES:
            assert (dest / name).read_bytes() == (truthfulqa_dir / name).read_bytes()
        assert sorted(p.name for p in dest.iterdir()) == sorted(NAMES)  # no staging left behind
        again = _fetch("--dest", str(dest), "--base-url", base_url)
        assert again.returncode == 0 and again.stdout.count("already in place") == 2, again.stdout
        assert len(requested) == 2  # nothing downloaded twice


def test_a_sha256_mismatch_is_one_error_line_and_nothing_is_put_in_place(truthfulqa_dir: Path, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "TruthfulQA.csv").write_bytes((truthfulqa_dir / "TruthfulQA.csv").read_bytes())
    (mirror / "davinci_answers.csv").write_bytes((truthfulqa_dir / "davinci_answers.csv").read_bytes()[:-1] + b"X")
    dest = tmp_path / "data"
    with _serving(mirror) as (base_url, _):
        proc = _fetch("--dest", str(dest), "--base-url", base_url)
    assert proc.returncode == 1, proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fetch_data: error: {base_url}davinci_answers.csv: sha256 "), lines
    assert "nothing was put in place" in lines[0]
    assert list(dest.iterdir()) == []  # not even the good TruthfulQA.csv, and no staging directory
    (tmp_path / "empty-mirror").mkdir()
    with _serving(tmp_path / "empty-mirror") as (url, _):  # 404 for both
        missing = _fetch("--dest", str(dest), "--base-url", url)
    assert missing.returncode == 1 and missing.stderr.startswith(f"fetch_data: error: cannot download {url}"), (
        missing.stderr
    )
    assert list(dest.iterdir()) == []


def test_the_example_suite_reads_its_data_from_its_own_folder() -> None:
    """The suite reads ``data/`` beside it, where the script puts the files by default (so a run prints no
    notice about a data file outside the suite's directory)."""
    suite = yaml.safe_load((REPO / "examples" / "truthfulqa" / "suite.yaml").read_text(encoding="utf-8"))
    assert suite["dataset"]["path"] == "data/davinci_answers.csv"
    assert 'DEFAULT_DEST = Path(__file__).resolve().parent / "data"' in SCRIPT.read_text(encoding="utf-8")
    assert "examples/truthfulqa/data/" in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
