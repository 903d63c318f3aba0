"""Benchmark: what the intervals and the paired comparison (README, "Uncertainty and regressions") add to a
100,000-case LengthCheck run, and their memory per case.

One command, in one process: LengthCheck scores ``--cases`` synthetic outputs (batches of 5,000, as the flow
does at that size); then the summary is built from those case results by this checkout's
:class:`~evaltasks.engine.statistics.SummaryBuilder` (counts plus the compact per-case arrays and the 95 % intervals)
and by the one of ``--base`` (a git revision before the statistics: counts only), and the comparison with a
baseline (the same cases with 2 % of the passing ones now failing) by this checkout's
:class:`~evaltasks.engine.compare.ComparisonBuilder` (change list plus paired tests) and by ``--base``'s (change list
only). Medians of ``--repeat`` runs; the extra memory is the size of the arrays the new builders keep, per
case::

    .venv/bin/python bench/statistics_cost.py [--cases 100000] [--repeat 3] [--base 5dca4b3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaltasks.engine.compare import ComparisonBuilder  # noqa: E402
from evaltasks.metrics import LengthCheckMetric  # noqa: E402
from evaltasks.engine.statistics import SummaryBuilder  # noqa: E402
from evaltasks.results import MetricResult, TestCaseResult  # noqa: E402
from evaltasks.test_case import EvalTestCase  # noqa: E402


def _old_module(base: str, path: str, name: str) -> Any:
    """``path`` as it was at git revision ``base``, imported as module ``name``."""
    source = subprocess.run(["git", "show", f"{base}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True)
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(source.stdout, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--base", default="5dca4b3")
    args = parser.parse_args()
    n = args.cases
    metric = LengthCheckMetric(max_length=8, unit="words")
    cases = [EvalTestCase(input="q", actual_output=("word " * (3 + i % 9)).strip()) for i in range(n)]
    ids = [f"case-{i}" for i in range(n)]
    score_s, per_metric = _timed(lambda: [r for s in range(0, n, 5000) for r in metric.score_batch(cases[s:s + 5000])])
    results = [TestCaseResult.from_metrics(ids[i], "q", cases[i].actual_output, [per_metric[i]]) for i in range(n)]
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
    old_results = _old_module(args.base, "evaltasks/results.py", "old_results")
    old_compare = _old_module(args.base, "evaltasks/engine/compare.py", "old_compare")
    base_summary = json.loads(old_results.summarize(results, thresholds).model_dump_json())
    baseline = {"summary": base_summary, "cases": base_cases}

    rows: dict[str, list[float]] = {k: [] for k in ("summary_old", "summary_new", "compare_old", "compare_new")}
    for _ in range(args.repeat):
        for key, cls in (("summary_old", old_results.SummaryBuilder), ("summary_new", SummaryBuilder)):
            builder = cls(thresholds)
            seconds, summary = _timed(lambda: (builder.add(results), builder.finish())[1])
            rows[key].append(seconds)
        for key, cls in (("compare_old", old_compare.ComparisonBuilder), ("compare_new", ComparisonBuilder)):
            comparer = cls(baseline)
            seconds, comparison = _timed(lambda: (comparer.add(results), comparer.finish(summary))[1])
            rows[key].append(seconds)
    samples = builder.samples
    summary_bytes = (sum(a.buffer_info()[1] * a.itemsize for a in (*samples.scores.values(), *samples.statuses.values()))
                     + samples.case_statuses.buffer_info()[1])
    pairs = [comparer._overall, *comparer._passes.values(), *comparer._scores.values()]
    compare_bytes = sum(len(a) * a.itemsize for p in pairs for a in (p.base, p.cur, p.clusters))
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"{n} cases, LengthCheck, 1 metric; medians of {args.repeat}")
    print(f"scoring (score_batch, 5,000 a batch): {score_s:.2f} s")
    print(f"summary: {med['summary_old']:.2f} s before, {med['summary_new']:.2f} s now "
          f"(+{med['summary_new'] - med['summary_old']:.2f} s; intervals {summary.pass_rate_interval.method} / "
          f"{summary.metrics[metric.name].mean_score_interval.method})")
    print(f"comparison: {med['compare_old']:.2f} s before, {med['compare_new']:.2f} s now "
          f"(+{med['compare_new'] - med['compare_old']:.2f} s; verdict {comparison.verdict}, "
          f"p = {comparison.pass_rate_test.p_value:.3g})")
    print(f"extra memory: summary arrays {summary_bytes / n:.1f} B/case, comparison pairs {compare_bytes / n:.1f} B/case")


if __name__ == "__main__":
    main()
