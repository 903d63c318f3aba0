"""A two-target run for the side-by-side report tests: the real LengthCheckMetric (at most 5 words) scored on two
targets' outputs, the cases and their ``generation`` set directly (no target generates anything), as the
contract lays a multi-target result out (every target's cases, target after target; the summary the first's)."""

from __future__ import annotations

from pathlib import Path

from evaltasks.engine.evaluate import evaluate_sync
from evaltasks.metrics import LengthCheckMetric
from evaltasks.results import EvaluationResult, TargetRun
from evaltasks.test_case import EvalTestCase, Generation

CASES = 30
CURRENT_FAILS = {0, 10, 20}  # long answers of the reference
CANDIDATE_FAILS = set(range(12))  # long answers of the candidate
WORSE = len(CANDIDATE_FAILS - CURRENT_FAILS)  # passed on current, failed on candidate: 10
BETTER = len(CURRENT_FAILS - CANDIDATE_FAILS)  # the reverse: 1 (c20)


def output(target: str, i: int) -> str:
    """The answer of ``target`` to case ``i``: two words, or nine when the target fails the case."""
    fails = CURRENT_FAILS if target == "current" else CANDIDATE_FAILS
    return f"{target} answer {i} is far too long to pass" if i in fails else f"{target} {i} ok"


def two_target_result(index_dir: Path) -> EvaluationResult:
    """``current`` (the reference) and ``candidate`` over cases ``c0``…``c29`` (questions ``question i``),
    scored by LengthCheckMetric (max 5 words); each target's cases carry their ``generation``."""
    metric = LengthCheckMetric(max_length=5, unit="words")
    runs, results = [], []
    for target in ("current", "candidate"):
        cases = [EvalTestCase(input=f"question {i}", actual_output=output(target, i)) for i in range(CASES)]
        scored = evaluate_sync(cases, [metric], ids=[f"c{i}" for i in range(CASES)], index_dir=index_dir)
        latency = 100.0 if target == "current" else 250.0
        for case in scored.test_results:
            results.append(case.model_copy(update={"generation": Generation(target=target, latency_ms=latency)}))
        runs.append(
            TargetRun(
                name=target,
                kind="python",
                fingerprint=("a" if target == "current" else "b") * 64,
                summary=scored.summary,
                requests=CASES,
                latency_ms_median=latency,
                latency_ms_p95=latency,
            )
        )
    return EvaluationResult(test_results=results, summary=runs[0].summary, targets=runs)
