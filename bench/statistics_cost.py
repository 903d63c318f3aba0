"""Benchmark: what the intervals and the paired comparison (docs/statistics.md#uncertainty-and-regressions) add to a
100,000-case LengthCheck run, and their memory per case.

One command, in one process: LengthCheck scores ``--cases`` synthetic outputs (batches of 5,000, as the flow
does at that size); then the summary is built from those case results by this checkout's
:class:`~evaltasks.engine.summary.SummaryBuilder` (counts plus the compact per-case arrays and the 95 % intervals)
and by the one of ``--base`` (a git revision before the statistics: counts only), and the comparison with a
baseline (the same cases with 2 % of the passing ones now failing) by this checkout's
:class:`~evaltasks.engine.compare.ComparisonBuilder` (change list plus paired tests) and by ``--base``'s (change list
only). pyperf times each builder (``bench_time_func``) in ``--processes`` worker processes (default 3, one
value each; the case results are built in each worker, outside the clock); the extra memory is the size of the
arrays the new builders keep, per case::

    .venv/bin/python bench/statistics_cost.py [--cases 100000] [--processes 3] [--base 5dca4b3]
    .venv/bin/python bench/statistics_cost.py --quick      # 2,000 cases, one value
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import describe, markdown_table, runner, seconds  # bench/ is the script directory: on sys.path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaltasks.engine.compare import ComparisonBuilder  # noqa: E402
from evaltasks.engine.summary import SummaryBuilder  # noqa: E402
from evaltasks.metrics import LengthCheckMetric  # noqa: E402
from evaltasks.results import TestCaseResult  # noqa: E402
from evaltasks.test_case import EvalTestCase  # noqa: E402

#: where a module was at ``--base`` when it is not at its path now (the layout moved it)
FORMER_PATHS = {"evaltasks/engine/compare.py": "evaltasks/compare.py"}
STATE: dict[str, Any] = {}


def _old_module(base: str, path: str, name: str) -> Any:
    """``path`` (or its former path) as it was at git revision ``base``, imported as module ``name``.

    Raises:
        subprocess.CalledProcessError: git knows neither path at ``base``.
    """
    if name in sys.modules:
        return sys.modules[name]
    show = lambda p: subprocess.run(["git", "show", f"{base}:{p}"], cwd=ROOT, capture_output=True, text=True)  # noqa: E731
    source = show(path)
    if source.returncode != 0 and path in FORMER_PATHS:
        source = show(FORMER_PATHS[path])
    source.check_returncode()
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(source.stdout, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _options(parser: Any) -> None:
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--base", default="5dca4b3", help="a git revision before the statistics")


def setup(n: int, base: str) -> dict[str, Any]:
    """The scored case results, the thresholds and the baseline (once per process, outside the clock)."""
    if STATE.get("n") == n:
        return STATE
    metric = LengthCheckMetric(max_length=8, unit="words")
    cases = [EvalTestCase(input="q", actual_output=("word " * (3 + i % 9)).strip()) for i in range(n)]
    t0 = time.perf_counter()
    per_metric = [r for s in range(0, n, 5000) for r in metric.score_batch(cases[s : s + 5000])]
    score_s = time.perf_counter() - t0
    results = [TestCaseResult.from_metrics(f"case-{i}", "q", cases[i].actual_output, [per_metric[i]]) for i in range(n)]
    # the baseline: the same cases, 2 % of the passing ones passed before and fail now
    flipped = 0
    base_cases = []
    for r in results:
        d = r.model_dump()
        if r.status == "failed" and flipped < n // 50:
            flipped += 1
            d["status"], d["metrics"][0]["status"], d["metrics"][0]["score"] = "passed", "passed", 1.0
        base_cases.append(d)
    thresholds = {metric.name: metric.threshold}
    old_results = _old_module(base, "evaltasks/results.py", "old_results")
    base_summary = json.loads(old_results.summarize(results, thresholds).model_dump_json())
    STATE.update(
        n=n,
        metric=metric,
        results=results,
        thresholds=thresholds,
        score_s=score_s,
        baseline={"summary": base_summary, "cases": base_cases},
    )
    return STATE


def _classes(which: str, base: str) -> Any:
    if which == "old":
        return (
            _old_module(base, "evaltasks/results.py", "old_results").SummaryBuilder,
            _old_module(base, "evaltasks/engine/compare.py", "old_compare").ComparisonBuilder,
        )
    return SummaryBuilder, ComparisonBuilder


def time_summary(loops: int, which: str, n: int, base: str) -> float:
    """Seconds of ``loops`` summaries built by the ``which`` ("old" / "new") builder (pyperf's time function)."""
    st, builder_cls = setup(n, base), _classes(which, base)[0]
    total = 0.0
    for _ in range(loops):
        builder = builder_cls(st["thresholds"])
        t0 = time.perf_counter()
        builder.add(st["results"])
        st[f"summary_{which}"] = builder.finish()
        total += time.perf_counter() - t0
    st[f"builder_{which}"] = builder
    return total


def time_compare(loops: int, which: str, n: int, base: str) -> float:
    """Seconds of ``loops`` comparisons built by the ``which`` builder (pyperf's time function)."""
    st = setup(n, base)
    if "summary_new" not in st:
        time_summary(1, "new", n, base)
    compare_cls = _classes(which, base)[1]
    total = 0.0
    for _ in range(loops):
        comparer = compare_cls(st["baseline"])
        t0 = time.perf_counter()
        comparer.add(st["results"])
        st[f"comparison_{which}"] = comparer.finish(st["summary_new"])
        total += time.perf_counter() - t0
    st[f"comparer_{which}"] = comparer
    return total


def main() -> None:
    """Time the four builders; the manager process prints the table and the memory per case."""
    run = runner(_options, ("cases", "base"), processes=3, values=1, loops=1)
    args = run.args
    n = 2_000 if args.quick else args.cases
    benches = {
        f"{what} {which}": run.bench_time_func(f"{what} {which}", fn, which, n, args.base)
        for what, fn in (("summary", time_summary), ("comparison", time_compare))
        for which in ("old", "new")
    }
    if args.worker:
        return
    st = setup(n, args.base)  # the memory the new builders keep, measured once here
    time_summary(1, "new", n, args.base)
    time_compare(1, "new", n, args.base)
    samples, comparer = st["builder_new"].samples, st["comparer_new"]
    summary, comparison, metric = st["summary_new"], st["comparison_new"], st["metric"]
    summary_bytes = (
        sum(a.buffer_info()[1] * a.itemsize for a in (*samples.scores.values(), *samples.statuses.values()))
        + samples.case_statuses.buffer_info()[1]
    )
    pairs = [comparer._overall, *comparer._passes.values(), *comparer._scores.values()]
    compare_bytes = sum(len(a) * a.itemsize for p in pairs for a in (p.base, p.cur, p.clusters))
    rows = []
    for what in ("summary", "comparison"):
        old, new = benches[f"{what} old"], benches[f"{what} new"]
        rows.append(
            (what, f"{seconds(old):.3f}", f"{seconds(new):.3f}", f"+{seconds(new) - seconds(old):.3f}", describe(new))
        )
    print(
        f"\n{n} cases, LengthCheck, 1 metric; scoring (score_batch, 5,000 a batch): {st['score_s']:.2f} s; "
        f"intervals {summary.pass_rate_interval.method} / {summary.metrics[metric.name].mean_score_interval.method}; "
        f"verdict {comparison.verdict}, p = {comparison.pass_rate_test.p_value:.3g}\n"
    )
    print(
        markdown_table(
            (
                f"built from {n:,} case results",
                f"before ({args.base}) median s",
                "now median s",
                "added s",
                "now: mean ± std dev",
            ),
            rows,
            "lrrrl",
        )
    )
    print(
        f"\nextra memory: summary arrays {summary_bytes / n:.1f} B/case, comparison pairs "
        f"{compare_bytes / n:.1f} B/case"
    )


if __name__ == "__main__":
    main()
