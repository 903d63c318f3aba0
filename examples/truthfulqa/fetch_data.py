"""Download the two public TruthfulQA files this example, the regression walkthrough and the docs' numbers
use, and check their sha256 (docs/install.md#truthfulqa-data-not-in-the-repository).

    .venv/bin/python examples/truthfulqa/fetch_data.py                      # into examples/truthfulqa/data/
    .venv/bin/python examples/truthfulqa/fetch_data.py --dest ../shared/data/truthfulqa   # for tests, benchmarks

- ``TruthfulQA.csv``: the TruthfulQA benchmark (Lin, Hilton & Evans, 2021; Apache-2.0), first published at
  https://github.com/sylinrl/TruthfulQA (its original 817-question file).
- ``davinci_answers.csv``: the same questions answered by OpenAI's ``davinci``, the file
  ``outputs/davinci_output_labeled.csv`` of https://github.com/benedictflorance/truthfulqa_experiments.

Both are read from that second repository at fixed commits (it keeps a copy of the original TruthfulQA.csv),
so the bytes never change under the pinned sha256. ``--base-url URL`` (or ``$TRUTHFULQA_BASE_URL``) reads
``URL/TruthfulQA.csv`` and ``URL/davinci_answers.csv`` instead: a mirror of the same files.

Both files are downloaded and checked before either is put in place: on a download error or a sha256 mismatch
the script prints one line naming the file and exits 1, leaving the destination as it was. A file already in
place with the right sha256 is kept. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

REPOSITORY = "https://raw.githubusercontent.com/benedictflorance/truthfulqa_experiments"
FILES = {
    # name in place: (URL at a fixed commit, sha256 of its bytes)
    "TruthfulQA.csv": (
        f"{REPOSITORY}/ef3cc8722c3a1b6b807643bb39b885de730823e0/TruthfulQA.csv",
        "99d6ae7755e3b435eade956068c9de7c0c474770344237aeb66b56519ba4b697",
    ),
    "davinci_answers.csv": (
        f"{REPOSITORY}/d810982597dfc52e7e94bc84ea89168b37452378/outputs/davinci_output_labeled.csv",
        "f680416df1eef1c4e2d3e23229d5f2e81f2c8dc9263f1d96da04d6f8f541a2d9",
    ),
}
DEFAULT_DEST = Path(__file__).resolve().parent / "data"  # where examples/truthfulqa/suite.yaml reads them
TIMEOUT_S = 60


class FetchError(Exception):
    """A file could not be downloaded, or its bytes are not the pinned ones (the message names it)."""


def sha256_of(path: Path) -> str:
    """The hex sha256 of the file at ``path``'s bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, target: Path, expected: str) -> None:
    """Write ``url``'s body to ``target`` and check its sha256 against ``expected``.

    Raises:
        FetchError: the request failed, or the sha256 differs (``target`` is then removed).
    """
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response, target.open("wb") as handle:
            for block in iter(lambda: response.read(1 << 20), b""):
                digest.update(block)
                handle.write(block)
    except (urllib.error.URLError, OSError) as exc:
        target.unlink(missing_ok=True)
        raise FetchError(f"cannot download {url}: {getattr(exc, 'reason', None) or exc}") from exc
    if digest.hexdigest() != expected:
        target.unlink(missing_ok=True)
        raise FetchError(
            f"{url}: sha256 {digest.hexdigest()} is not the expected {expected} "
            "(a different file; nothing was put in place)"
        )


def fetch(dest: Path, base_url: str | None = None) -> list[str]:
    """Put the files of :data:`FILES` into ``dest`` (created), each checked, none placed unless all are;
    ``base_url``: read ``BASE/NAME`` instead of the pinned URLs. Returns one line per file, what was done.

    Raises:
        FetchError: a download failed or a sha256 differs; ``dest`` holds what it held before.
    """
    dest.mkdir(parents=True, exist_ok=True)
    done, staged = [], []
    with tempfile.TemporaryDirectory(dir=dest, prefix=".fetch-") as staging:
        for name, (url, expected) in FILES.items():
            target = dest / name
            if target.is_file() and sha256_of(target) == expected:
                done.append(f"{target}: already in place (sha256 {expected[:12]}…)")
                continue
            source = f"{base_url.rstrip('/')}/{name}" if base_url else url
            download(source, Path(staging) / name, expected)
            staged.append(name)
        for name in staged:  # all checked: now into place (a rename within one file system)
            os.replace(Path(staging) / name, dest / name)
            done.append(f"{dest / name}: downloaded, sha256 {FILES[name][1][:12]}… checked")
    return done


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring): exit 0 when both files are in place, 1 on a failure."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help=f"target directory (default {DEFAULT_DEST})")
    parser.add_argument(
        "--base-url",
        default=os.environ.get("TRUTHFULQA_BASE_URL") or None,
        help="read BASE_URL/TruthfulQA.csv and BASE_URL/davinci_answers.csv instead of the pinned "
        "URLs (default $TRUTHFULQA_BASE_URL)",
    )
    args = parser.parse_args(argv)
    try:
        for line in fetch(args.dest, args.base_url):
            print(line)
    except (FetchError, OSError) as exc:
        print(f"fetch_data: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
