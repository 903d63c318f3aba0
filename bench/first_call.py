"""Benchmark: the first call's start-up, a cached judge ``evaluate_sync`` in a fresh process.

The judge benchmark's GEval (``bench/judge.py``: its cases, criteria and scripted judge server) on ``--cases`` (40)
cases: one process stores every answer (the fill), then ``--repeat`` (5) fresh processes each time, in order,

  import            ``import evaltasks`` (lazy: the metrics and the engine load on first use);
  first call        everything after it: ``from evaltasks import GEvalMetric, ...``, the metric, the cases and
                    ``evaluate_sync(cases, [metric], index_dir=...)``, every answer from the store;
  second call       the same ``evaluate_sync`` again in the same process (nothing left to import or open).

``first call − second call`` is what a process pays once. Side by side, interleaved, the same process importing
``scipy.stats`` and ``openai`` in its first call, as the call did before (its summary needs no scipy:
docs/statistics.md#uncertainty-and-regressions; the judge client is built on the first request, and a cached call sends none).
Each process reports whether it imported scipy and openai, and the judge server counts the requests (0 after the
fill). For scale, fresh processes time ``import scipy.stats`` and ``import openai`` alone.
Target: first call ≤ 0.5 s. Rewrites the section ``## First call: a cached judge evaluate_sync`` of
docs/performance.md (only that section)::

    .venv/bin/python bench/first_call.py                 # about a minute
    .venv/bin/python bench/first_call.py --quick         # smoke: 5 cases, 2 processes, no document
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from _common import write_section  # noqa: E402
from chat_server import ChatServer  # noqa: E402
from judge import CRITERIA, MODEL, THRESHOLD, load_cases, responder  # noqa: E402

DOC = ROOT / "docs" / "performance.md"
HEADING = "## First call: a cached judge evaluate_sync"
TARGET_S = 0.5

SCRIPT = r"""
import json, os, sys, time
started = time.perf_counter()
import evaltasks
imported = time.perf_counter()
if os.environ.get("BENCH_AS_BEFORE"):  # what the first call imported before: scipy for the summary, openai for
    import openai, scipy.stats          # the judge client (now built on the first request only)
from evaltasks import EvalTestCase, GEvalMetric, evaluate_sync
cases = json.load(open(sys.argv[1]))
metric = GEvalMetric(threshold=float(os.environ["BENCH_THRESHOLD"]), model=os.environ["BENCH_MODEL"],
                     criteria=os.environ["BENCH_CRITERIA"])
tcs = [EvalTestCase(input=c["input"], actual_output=c["actual_output"], expected_output=c["expected_output"])
       for c in cases]
result = evaluate_sync(tcs, [metric], index_dir=sys.argv[2])
first = time.perf_counter()
again = evaluate_sync(tcs, [metric], index_dir=sys.argv[2])
second = time.perf_counter()
print(json.dumps({"import_s": imported - started, "first_s": first - imported, "second_s": second - first,
                  "scipy": "scipy" in sys.modules, "openai": "openai" in sys.modules,
                  "mean": result.summary.metrics[metric.name].mean_score,
                  "same": again.summary.metrics[metric.name].mean_score == result.summary.metrics[metric.name].mean_score}))
"""

ALONE = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"


def _alone(module: str, repeat: int) -> float:
    """Median seconds of ``import module`` in ``repeat`` fresh processes."""
    times = [
        float(
            subprocess.run(
                [sys.executable, "-c", ALONE.format(module=module)], capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(repeat)
    ]
    return statistics.median(times)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The fill, then ``args.repeat`` fresh processes against the stored answers."""
    work = Path(tempfile.mkdtemp(prefix="bench-first-call-"))
    cases, source = load_cases(args.cases)
    cases_file, script = work / "cases.json", work / "first_call.py"
    cases_file.write_text(json.dumps(cases), encoding="utf-8")
    script.write_text(SCRIPT, encoding="utf-8")
    runs: list[dict[str, Any]] = []
    before: list[dict[str, Any]] = []
    with ChatServer(responder=responder(cases), latency_s=0.0) as server:
        env = {
            **os.environ,
            "OPENAI_API_KEY": server.api_key,
            "OPENAI_BASE_URL": server.base_url,
            "BENCH_MODEL": MODEL,
            "BENCH_THRESHOLD": str(THRESHOLD),
            "BENCH_CRITERIA": CRITERIA,
            "HF_HUB_OFFLINE": "1",
        }
        argv = [sys.executable, str(script), str(cases_file), str(work / "index")]
        subprocess.run(argv, env=env, capture_output=True, text=True, check=True)  # the fill
        filled = len(server.requests)
        for _ in range(args.repeat):
            for into, extra in ((runs, {}), (before, {"BENCH_AS_BEFORE": "1"})):
                server.reset()
                done = subprocess.run(argv, env={**env, **extra}, capture_output=True, text=True, check=True)
                run = json.loads(done.stdout.splitlines()[-1])
                run["requests"] = len(server.requests)
                into.append(run)
                print(
                    f"{'as before: ' if extra else ''}first call {run['first_s']:.3f} s, second "
                    f"{run['second_s']:.3f} s, scipy {run['scipy']}, {run['requests']} requests",
                    file=sys.stderr,
                    flush=True,
                )
    return {
        "cases": len(cases),
        "source": source,
        "fill_requests": filled,
        "runs": runs,
        "as_before": before,
        "scipy_import_s": _alone("scipy.stats", args.repeat),
        "openai_import_s": _alone("openai", args.repeat),
        "cores": os.cpu_count(),
        "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "date": date.today().isoformat(),
    }


def render(data: dict[str, Any]) -> str:
    """The Markdown section for docs/performance.md."""
    runs = data["runs"]

    def med(key: str, measured: list[dict[str, Any]] = runs) -> float:
        return statistics.median(r[key] for r in measured)

    first, second = med("first_s"), med("second_s")
    old = med("first_s", data["as_before"])
    rows = [
        ("`import evaltasks`", med("import_s")),
        ("first call (imports, store, evaluate_sync)", first),
        ("second call, same process", second),
        ("first − second: paid once per process", first - second),
        ("first call importing scipy.stats and openai (as before)", old),
        ("ratio: first call / first call as before", first / old),
    ]
    lines = [
        HEADING,
        "",
        f"Measured {data['date']} by `bench/first_call.py` ({data['cores']} cores, 1-minute load average "
        f"{data['load'] if data.get('load') is None else round(data['load'], 1)} at the end, Python {data['python']}): GEval "
        f"(bench/judge.py's criteria and scripted judge server) on {data['cases']} cases ({data['source']}), every "
        f"answer already stored by one fill run ({data['fill_requests']} requests); medians of {len(runs)} fresh "
        "processes.",
        "",
        "| | seconds |",
        "|---|---:|",
        *[f"| {name} | {value:.3f} |" for name, value in rows],
        "",
        f"Target: first call ≤ {TARGET_S} s (measured {first:.3f} s). Requests after the fill: "
        f"{max(r['requests'] for r in runs)}; scipy imported by the call: "
        f"{'yes' if any(r['scipy'] for r in runs) else 'no'} (`import scipy.stats` alone: "
        f"{data['scipy_import_s']:.3f} s in a fresh process; the summary's Wilson and bootstrap intervals need "
        f"none); openai imported by the call: {'yes' if any(r['openai'] for r in runs) else 'no'} (`import openai` "
        f"alone: {data['openai_import_s']:.3f} s; the judge client is built on the first request).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    """Parse the options, measure, print the section and write it (not with ``--quick``)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    parser.add_argument("--quick", action="store_true", help="smoke run: --cases 5 --repeat 2, no document")
    args = parser.parse_args()
    if args.quick:
        args.cases, args.repeat = 5, 2
    data = measure(args)
    if args.json:
        args.json.write_text(json.dumps(data, indent=1), encoding="utf-8")
    section = render(data)
    print(section)
    if not args.quick:
        write_section(DOC, section, HEADING)
    return 0


if __name__ == "__main__":
    sys.exit(main())
