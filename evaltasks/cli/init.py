"""``evaltasks init``: write a starter suite in the current folder (docs/cli.md#starter-suite-evaltasks-init).

Three files: ``suite.yaml`` (a ``python`` target, three metrics that run offline, a gate), ``questions.jsonl``
(five questions with their expected answers) and ``my_app.py`` (the target: a stand-in for the user's app, so
the suite runs as written, offline). Nothing is ever overwritten: when one of the files exists, the command
names it, writes nothing and exits 2. In a terminal it asks for the folder and the suite's name (Enter keeps
the default); otherwise (CI, a pipe) it asks nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from evaltasks.cli._command import Invocation, add_command
from evaltasks.cli._exits import EXIT_INVALID, EXIT_PASSED, error

SUITE_FILE = "suite.yaml"
DATASET_FILE = "questions.jsonl"
TARGET_FILE = "my_app.py"
DEFAULT_NAME = "starter"

# (id, question, expected answer): my_app.py answers the first four; the last one it cannot, on purpose, so
# the first run shows a failing case (and the gate, 80 %, still holds with four of five).
ROWS = [
    ("capital", "What is the capital of France?", "Paris is the capital of France."),
    ("boiling", "At what temperature does water boil at sea level?", "Water boils at 100 °C (212 °F) at sea level."),
    ("password", "How do I reset my password?", "Open Settings > Security and choose Reset password."),
    ("planets", "How many planets are in the Solar System?", "The Solar System has eight planets."),
    ("refund", "Can I get a refund after 30 days?", "Refunds are only possible within 30 days of purchase."),
]

TARGET_TEXT = '''"""The system under test: a stand-in for your app, so the starter suite runs offline.

evaltasks calls answer() once per row of questions.jsonl and scores what it returns. Replace its body with a
call to your own code (a RAG chain, an agent, a function of your package); return a string, or a dict with
"output" and, optionally, "retrieval_context", "context", "tools_called", "cost" and "metadata".
"""

FAQ = {
    "capital of france": "The capital of France is Paris.",
    "boil": "Water boils at 100 degrees Celsius (212 °F) at sea level.",
    "password": "Go to Settings > Security and click Reset password.",
    "planets": "There are eight planets in the Solar System.",
}


def answer(case):
    """The answer to one test case: ``case.input`` is the row's question, ``case.vars`` all its columns."""
    question = (case.input or "").lower()
    for key, reply in FAQ.items():
        if key in question:
            return reply
    return "Sorry, I don't know that yet."
'''

SUITE_TEXT = """# A starter suite written by `evaltasks init`. Run it: evaltasks run {suite_path}
# The suite file's reference: docs/suite.md (its JSON Schema: `evaltasks schema`).
name: {name}
dataset:
  path: {dataset}
  fields: {{id: id, input: question, expected_output: expected}}
target:
  python: {module}:answer   # your app: replace answer() in {target}
metrics:
  - metric: SemanticSimilarityMetric   # the answer means what the expected answer says
    threshold: 0.7
    embedding_provider: local          # the bundled all-MiniLM-L6-v2: no API key, no network
  - metric: LengthCheckMetric          # short answers
    max_length: 40
    unit: words
  - metric: LatencyMetric              # each answer within 5 s
    max_ms: 5000
gate:
  min_pass_rate: 0.8   # 4 of 5: the stand-in app cannot answer the refund question
"""


def add_parser(sub: Any) -> None:
    """Add ``init`` and its flags to the command parser ``sub``."""
    init = add_command(
        sub,
        "init",
        "write a starter suite in the current folder",
        "Write a starter suite: a dataset of five questions, a suite with a python target (my_app.py, a "
        "stand-in for your app), three metrics that run offline and a gate. Never overwrites a file; asks "
        "for the folder and the suite's name only when run in a terminal.",
        "Starter suite",
    )
    init.add_argument(
        "folder",
        nargs="?",
        default=None,
        help="where to write the files, created if missing (default: the current folder)",
    )
    init.add_argument("--name", default=None, help="the suite's name (default: the folder's name)")


def command(args: argparse.Namespace, invocation: Invocation) -> int:
    """Write the starter suite (:func:`scaffold`); exit 0, or 2 naming the file that exists (nothing written)
    or the folder that cannot be used."""
    interactive = sys.stdin is not None and sys.stdin.isatty()
    folder_text: str = args.folder if args.folder is not None else (_ask("Folder", ".") if interactive else ".")
    folder = Path(folder_text).expanduser()
    default_name = _default_name(folder)
    name: str = args.name if args.name is not None else (_ask("Suite name", default_name) if interactive else "")
    name = name.strip() or default_name
    try:
        written = scaffold(folder, name)
    except FileExistsError as exc:
        error(
            f"{exc.filename} already exists: evaltasks init never overwrites a file, and wrote nothing; move it "
            "away or give another folder (evaltasks init FOLDER)"
        )
        return EXIT_INVALID
    except OSError as exc:
        error(f"cannot write the starter suite in {folder}: {exc.strerror or exc}")
        return EXIT_INVALID
    suite = written[0]
    print(f"Wrote a starter suite '{name}' in {folder}:")
    print(f"  {SUITE_FILE:<16} the suite: a python target, three offline metrics and a gate")
    print(f"  {DATASET_FILE:<16} five questions with their expected answers")
    print(f"  {TARGET_FILE:<16} the target: a stand-in for your app (replace answer())")
    print(f"Run it: evaltasks run {suite}")
    return EXIT_PASSED


def scaffold(folder: Path, name: str) -> list[Path]:
    """Write the starter suite's three files into ``folder`` (created, with its parents, if missing):
    ``suite.yaml``, ``questions.jsonl`` and ``my_app.py``; returns their paths, the suite first.

    No file is overwritten: each is created exclusively (``O_EXCL``, so a symlink in its place counts as a file
    too). When one already exists nothing is written (a file created meanwhile by another process: the ones
    this call wrote are removed again).

    Raises:
        FileExistsError: one of the files exists (``filename``: its path).
        NotADirectoryError: ``folder`` exists and is not a folder.
        OSError: the folder cannot be created or written.
    """
    files = _contents(folder, name)
    if os.path.lexists(folder) and not folder.is_dir():
        raise NotADirectoryError(20, "it is not a folder", str(folder))
    for path in files:
        if os.path.lexists(path):
            raise FileExistsError(17, "File exists", str(path))
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    try:
        for path, text in files.items():
            with open(path, "x", encoding="utf-8", newline="\n") as handle:
                written.append(path)
                handle.write(text)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return written


def _contents(folder: Path, name: str) -> dict[Path, str]:
    """The three files' paths (in ``folder``) and texts, the suite first."""
    suite_path = folder / SUITE_FILE
    rows = "".join(
        json.dumps({"id": case_id, "question": question, "expected": expected}, ensure_ascii=False) + "\n"
        for case_id, question, expected in ROWS
    )
    suite = SUITE_TEXT.format(
        suite_path=suite_path.as_posix(),
        name=json.dumps(name, ensure_ascii=False),  # a JSON string is a YAML double-quoted scalar
        dataset=DATASET_FILE,
        module=TARGET_FILE.removesuffix(".py"),
        target=TARGET_FILE,
    )
    return {suite_path: suite, folder / DATASET_FILE: rows, folder / TARGET_FILE: TARGET_TEXT}


def _default_name(folder: Path) -> str:
    """The folder's name as a suite name (lower case, runs of other characters as ``-``), or ``starter``."""
    try:
        base = folder.resolve().name
    except OSError:
        base = folder.name
    slug = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-")
    return slug or DEFAULT_NAME


def _ask(question: str, default: str) -> str:
    """Ask ``question`` on the terminal, showing ``default``; the answer, or ``default`` for an empty one or
    the end of input."""
    try:
        answer = input(f"{question} [{default}]: ")
    except EOFError:
        print()
        return default
    return answer.strip() or default
