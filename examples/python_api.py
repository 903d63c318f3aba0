"""The Python API on one answer: LengthCheckMetric on its own, then both metrics through ``evaluate()``.

Run it from the repository root (offline; the first run loads the embedding model, 5-90 s)::

    .venv/bin/python examples/python_api.py

It prints each metric's score, verdict and reason, then the summary; every check passes. This file is the
example of docs/python-api.md#python-api, as is.
"""

import asyncio
import logging

from evaltasks import EvalTestCase, LengthCheckMetric, ReferenceMatchMetric, evaluate

# evaltasks logs at INFO while the embedding model loads: show those lines as a sign of life.
logging.basicConfig(format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
logging.getLogger("evaltasks").setLevel(logging.INFO)

case = EvalTestCase(input="Write a summary", actual_output="The project finished on time and on budget.")

# One metric, awaited directly: no model, no index.
length = LengthCheckMetric(min_length=5, max_length=50, unit="words")
result = asyncio.run(length.evaluate(case))
print(f"{result.name}: score {result.score:.4f}, success {result.success} ({result.reason})")

# Several metrics over many cases: evaluate() (evaluate_sync() from code that already runs an event loop).
match = ReferenceMatchMetric(
    threshold=0.7, references=["The project was completed on schedule and within budget."], embedding_provider="local"
)
results = asyncio.run(evaluate([case], [length, match]))
for metric_result in results.test_results[0].metrics:
    print(
        f"{metric_result.name}: score {metric_result.score:.4f}, success {metric_result.success} "
        f"({metric_result.reason})"
    )
summary = results.summary
print(f"passed {summary.passed_cases} of {summary.cases} case(s), pass rate {summary.pass_rate:.2f}")
