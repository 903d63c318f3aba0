"""examples/python_api.py, the example of docs/python-api.md#python-api: it runs, prints what it claims, and passes.

The printed numbers are checked against values computed here independently: the word count by a plain regex,
the ReferenceMatch score by sentence-transformers + numpy on the bundled model (fixture ``cosine``).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.process_env import subprocess_env

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "python_api.py"
OUTPUT = "The project finished on time and on budget."
REFERENCE = "The project was completed on schedule and within budget."


def _code_without_docstring(path: Path) -> str:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    first = tree.body[0]
    lines = path.read_text(encoding="utf-8").splitlines()
    return "\n".join(lines[first.end_lineno :]).strip("\n")


def test_docs_python_api_block_is_the_example() -> None:
    page = (REPO / "docs" / "python-api.md").read_text(encoding="utf-8")
    section = page.split("# Python API", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1).strip("\n")
    assert block == _code_without_docstring(EXAMPLE)


def test_python_api_example_prints_its_results_and_passes(tmp_path: Path, cosine) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        cwd=tmp_path,
        env=subprocess_env(tmp_path / "ph"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    words = len(re.findall(r"[A-Za-z]+", OUTPUT))  # 8: no apostrophes, digits or CJK in this sentence
    length_line = (
        f"LengthCheckMetric: score 1.0000, success True (Length {words} words is within the allowed "
        "range (min 5, max 50).)"
    )
    assert lines[0] == lines[1] == length_line
    expected = float(cosine(OUTPUT, [REFERENCE])[0])
    score = float(re.fullmatch(r"ReferenceMatchMetric: score ([0-9.]+), success True \(.*\)", lines[2]).group(1))
    assert abs(score - expected) <= 5e-5 + 1e-6, (score, expected)  # printed to 4 decimals
    assert expected >= 0.7  # the reference is one the output matches: the example passes
    assert lines[3] == "passed 1 of 1 case(s), pass rate 1.00"
    assert len(lines) == 4
    # a sign of life while the model loads (stderr, INFO)
    assert re.search(r"loading embedding model all-MiniLM-L6-v2 .*\.\.\.", proc.stderr)
    assert re.search(r"loaded embedding model all-MiniLM-L6-v2 in [0-9.]+ s", proc.stderr)
