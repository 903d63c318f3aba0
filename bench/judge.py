"""Benchmark: GEval through evaltasks against eval-ai-library 0.8.x, both pointed at one loopback judge server.

One command measures, side by side in one run, and rewrites the section ``## LLM judge: GEval`` of
``docs/performance.md`` (only that section)::

    .venv/bin/python bench/judge.py --json /tmp/judge.json      # about 4 minutes (eval-ai-library's part)
    .venv/bin/python bench/judge.py --quick                     # smoke: 5 cases, 10 ms, no document
    .venv/bin/python bench/judge.py --render-from /tmp/judge.json

The judge is ``tests/chat_server.py`` (an OpenAI-compatible chat completions server on 127.0.0.1) in this
process, with ``--latency-ms`` (default 300) added to every request as a remote API's round trip. It counts the
requests and the billed tokens of each contender (prompt tokens: UTF-8 bytes // 4 + 1 per message; completion
tokens: the same rule per answer, so both sides are billed by one rule). Its answers are deterministic functions
of the case: a case's score is ``k / 10`` with ``k`` drawn from the sha256 of the model output, for
eval-ai-library as ``{"score": k/10}`` to each of its samples, for evaltasks as an integer ``k`` whose token
carries the probabilities ``{k: 0.7, k±1: 0.15 each}`` (clipped to 0..10, renormalised), so both land near the
same score.

The cases are the first ``--cases`` (200) TruthfulQA questions with davinci's answers and the best answer as the
expected output (TruthfulQA's ``davinci_answers.csv``, docs/install.md#truthfulqa-data-not-in-the-repository); without it, synthetic questions.

Contenders, each a fresh process (``--repeat`` times, interleaved, medians):

  eval-ai-library   ``GEval(model="gpt-4o-mini", threshold, criteria)`` (0.8.x, installed by this script into
                    ``bench/.venv-eval-ai-library``; litellm reaches the server through ``OPENAI_BASE_URL``). Its
                    ``evaluate()`` runs one case at a time (~22 requests of 300 ms each: 22 minutes for 200 cases),
                    so it is given the same concurrency as evaltasks instead: the first case alone (it generates
                    the evaluation steps once and keeps them), then the rest ``--concurrency`` at a time with
                    ``asyncio.gather`` over ``metric.evaluate``.
  evaltasks cold    ``evaltasks.evaluate_sync(cases, [GEvalMetric(...)], index_dir=EMPTY)`` with
                    ``judge_options={"max_concurrency": --concurrency}`` (answers stored under ``EMPTY/judgements``).
  evaltasks warm    the same call again with the same index directory: every answer comes from the store.

Wall time is measured inside each process around the evaluation (imports and interpreter start excluded on both
sides); the whole command's time is recorded too.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.metadata as md
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from _common import publish  # noqa: E402
from chat_server import Answer, ChatRequest, ChatServer  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "truthfulqa" / "davinci_answers.csv"
DOC = ROOT / "docs" / "performance.md"
HEADING = "## LLM judge: GEval vs eval-ai-library"
CRITERIA = (
    "Determine whether the model output answers the question truthfully and correctly, using the expected "
    "output as the reference answer."
)
THRESHOLD = 0.5
MODEL = "gpt-4o-mini"

EAL_SCRIPT = r"""
import asyncio, json, os, sys, time
from eval_lib import EvalTestCase, GEval
cases = json.load(open(sys.argv[1]))
concurrency = int(sys.argv[2])
metric = GEval(model=os.environ["BENCH_MODEL"], threshold=float(os.environ["BENCH_THRESHOLD"]),
               criteria=os.environ["BENCH_CRITERIA"])
tcs = [EvalTestCase(input=c["input"], actual_output=c["actual_output"], expected_output=c["expected_output"])
       for c in cases]

async def main():
    first = await metric.evaluate(tcs[0])
    gate = asyncio.Semaphore(concurrency)
    async def one(tc):
        async with gate:
            return await metric.evaluate(tc)
    return [first] + list(await asyncio.gather(*(one(tc) for tc in tcs[1:])))

t = time.perf_counter()
results = asyncio.run(main())
wall = time.perf_counter() - t
print(json.dumps({"wall_s": wall, "scores": [r["score"] for r in results],
                  "cost": sum(r.get("evaluation_cost") or 0 for r in results)}))
"""

EVALTASKS_SCRIPT = r"""
import json, os, sys, time
from evaltasks import EvalTestCase, GEvalMetric, evaluate_sync
cases = json.load(open(sys.argv[1]))
metric = GEvalMetric(threshold=float(os.environ["BENCH_THRESHOLD"]), model=os.environ["BENCH_MODEL"],
                     criteria=os.environ["BENCH_CRITERIA"],
                     judge_options={"max_concurrency": int(sys.argv[2])})
tcs = [EvalTestCase(input=c["input"], actual_output=c["actual_output"], expected_output=c["expected_output"])
       for c in cases]
t = time.perf_counter()
result = evaluate_sync(tcs, [metric], index_dir=sys.argv[3])
wall = time.perf_counter() - t
scores = [r.metrics[0].score for r in result.test_results]
logs = [r.metrics[0].evaluation_log for r in result.test_results]
print(json.dumps({"wall_s": wall, "scores": scores, "cost": result.summary.evaluation_cost,
                  "methods": sorted({l.get("method") for l in logs if l.get("method")}),
                  "statuses": sorted({r.metrics[0].status for r in result.test_results})}))
"""


def load_cases(n: int) -> tuple[list[dict[str, str]], str]:
    """The first ``n`` TruthfulQA rows as cases (input, actual_output, expected_output), or synthetic ones."""
    if DATA.exists():
        with DATA.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
        cases = [
            {"input": r["question"], "actual_output": r["model_answer"], "expected_output": r["best_answer"]}
            for r in rows[:n]
        ]
        if len(cases) == n:
            return (
                cases,
                f"the first {n} rows of TruthfulQA's davinci_answers.csv (docs/install.md#truthfulqa-data-not-in-the-repository)",
            )
    cases = [
        {
            "input": f"Question {i}: what is {i} + {i}?",
            "actual_output": f"It is {2 * i + i % 3}.",
            "expected_output": f"{2 * i}",
        }
        for i in range(n)
    ]
    return cases, f"{n} synthetic arithmetic questions (TruthfulQA not found at {DATA})"


def case_points(text: str) -> int:
    """The scripted score (0..10) of the case whose user message contains ``text``: from its sha256."""
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest(), 16) % 11


def responder(cases: list[dict[str, str]]):
    """The judge server's answers: evaluation steps, scores (with logprobs for evaltasks) and reasons."""
    outputs = sorted((c["actual_output"] for c in cases), key=len, reverse=True)

    def points_of(user: str) -> int:
        for output in outputs:  # the longest output the message contains (outputs may contain each other)
            if output and output in user:
                return case_points(output)
        return 5

    def answer(request: ChatRequest) -> str | Answer:
        everything = request.system + "\n" + request.user
        response_format = request.body.get("response_format") or {}
        schema = (
            ((response_format.get("json_schema") or {}).get("schema") or {})
            if isinstance(response_format, dict)
            else {}
        )
        properties = set(schema.get("properties") or {})
        if (
            "steps" in properties
            or "generate 3-5 detailed evaluation steps" in everything
            or "Write the evaluation steps" in request.user
        ):  # evaltasks' steps prompt (json_object: no schema)
            return json.dumps(
                {
                    "steps": [
                        "Compare the output with the expected output.",
                        "Check every factual claim against the question.",
                        "Penalise answers that are false or evasive.",
                    ]
                }
            )
        if "Explain why this score was assigned" in everything:
            return json.dumps({"reason": "The output matches the reference in the main facts."})
        k = points_of(request.user)
        if "score" in properties or request.body.get("logprobs"):
            probabilities = {k: 0.7}
            for other in (k - 1, k + 1):
                if 0 <= other <= 10:
                    probabilities[other] = 0.15
            total = sum(probabilities.values())
            alternatives = [
                (str(s), math.log(p / total)) for s, p in sorted(probabilities.items(), key=lambda item: -item[1])
            ]
            text = json.dumps({"reason": "The output matches the reference in the main facts.", "score": k})
            return Answer(text, alternatives={str(k): alternatives} if k < 10 else {})
        return json.dumps({"score": k / 10})

    return answer


def run_contender(label: str, argv: list[str], env: dict[str, str], server: ChatServer) -> dict[str, Any]:
    """Run one contender's process; its result line plus the server's counts for it."""
    server.reset()
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    command_s = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    result = json.loads(line)
    prompt, completion = server.billed
    result.update(
        label=label,
        command_s=command_s,
        requests=len(server.requests),
        answered=len(server.answered),
        prompt_tokens=prompt,
        completion_tokens=completion,
        peak_in_flight=server.peak_in_flight,
    )
    print(
        f"[{label}] {result['wall_s']:.2f} s, {result['requests']} requests, {prompt + completion:,} tokens",
        file=sys.stderr,
        flush=True,
    )
    return result


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every contender ``args.repeat`` times, interleaved."""
    from throughput import EAL_VENV, ensure_eal

    work = Path(tempfile.mkdtemp(prefix="bench-judge-"))
    cases, source = load_cases(args.cases)
    cases_file = work / "cases.json"
    cases_file.write_text(json.dumps(cases), encoding="utf-8")
    install = ensure_eal(work)
    eal_python = str(EAL_VENV / "bin" / "python")
    (work / "eal.py").write_text(EAL_SCRIPT, encoding="utf-8")
    (work / "evaltasks_geval.py").write_text(EVALTASKS_SCRIPT, encoding="utf-8")
    runs: dict[str, list[dict[str, Any]]] = {"eval-ai-library": [], "evaltasks cold": [], "evaltasks warm": []}
    with ChatServer(responder=responder(cases), latency_s=args.latency_ms / 1000.0) as server:
        env = {
            **os.environ,
            "OPENAI_API_KEY": server.api_key,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_BASE": server.base_url,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "BENCH_MODEL": MODEL,
            "BENCH_THRESHOLD": str(THRESHOLD),
            "BENCH_CRITERIA": CRITERIA,
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        for rep in range(args.repeat):
            index_dir = work / f"index-{rep}"
            runs["eval-ai-library"].append(
                run_contender(
                    "eval-ai-library",
                    [eal_python, str(work / "eal.py"), str(cases_file), str(args.concurrency)],
                    env,
                    server,
                )
            )
            for label in ("evaltasks cold", "evaltasks warm"):
                runs[label].append(
                    run_contender(
                        label,
                        [
                            sys.executable,
                            str(work / "evaltasks_geval.py"),
                            str(cases_file),
                            str(args.concurrency),
                            str(index_dir),
                        ],
                        env,
                        server,
                    )
                )
    versions = {"evaltasks": md.version("evaltasks"), "openai": md.version("openai")}
    check = subprocess.run(
        [eal_python, "-c", "import importlib.metadata as m; print(m.version('eval-ai-library'), m.version('litellm'))"],
        capture_output=True,
        text=True,
    )
    if check.returncode == 0:
        eal_version, litellm_version = check.stdout.split()
        versions.update({"eval-ai-library": eal_version, "litellm": litellm_version})
    return {
        "cases": len(cases),
        "source": source,
        "latency_ms": args.latency_ms,
        "concurrency": args.concurrency,
        "repeat": args.repeat,
        "runs": runs,
        "versions": versions,
        "install": install,
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in runs)


def render(data: dict[str, Any]) -> str:
    """The Markdown section for ``docs/performance.md``."""
    runs = data["runs"]
    runs["eval-ai-library"]
    rows = []
    for label, measured in runs.items():
        tokens = _median(measured, "prompt_tokens") + _median(measured, "completion_tokens")
        scores = [s for s in measured[0]["scores"] if s is not None]
        rows.append(
            (
                label,
                _median(measured, "requests"),
                tokens,
                _median(measured, "wall_s"),
                _median(measured, "command_s"),
                statistics.fmean(scores) if scores else float("nan"),
            )
        )
    base_requests, base_tokens, base_wall = rows[0][1], rows[0][2], rows[0][3]
    cold = rows[1]
    lines = [
        HEADING,
        "",
        f"Measured {data['date']} by `bench/judge.py` ({data['machine']['cores']} cores, Python "
        f"{data['machine']['python']}; evaltasks {data['versions'].get('evaltasks')}, eval-ai-library "
        f"{data['versions'].get('eval-ai-library', '?')} with litellm {data['versions'].get('litellm', '?')}, "
        f"openai {data['versions'].get('openai')}). GEval with the same criteria on {data['cases']} cases "
        f"({data['source']}), both against one loopback OpenAI-compatible server (`tests/chat_server.py`) adding "
        f"{data['latency_ms']} ms to every request; {data['concurrency']} cases in flight on both sides "
        "(eval-ai-library's `evaluate()` runs one case at a time: it gets `asyncio.gather` with the same limit "
        "instead, after a first case alone that generates its evaluation steps). Medians of "
        f"{data['repeat']} interleaved repetitions; wall time around the evaluation call, the whole command's in "
        "the last column. Tokens are billed by the server with one rule for both.",
        "",
        "| | requests | tokens billed | wall (s) | command (s) | mean score | requests vs eval-ai-library | tokens vs "
        "| wall vs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, requests, tokens, wall, command, mean in rows:
        lines.append(
            f"| {label} | {requests:,.0f} | {tokens:,.0f} | {wall:.2f} | {command:.2f} | {mean:.4f} | "
            f"{requests / base_requests:.3f} | {tokens / base_tokens:.3f} | {wall / base_wall:.3f} |"
        )
    methods = sorted({m for r in runs["evaltasks cold"] for m in r.get("methods", [])})
    lines += [
        "",
        f"Targets: requests and tokens at most 1/10 of eval-ai-library's (measured {cold[1] / base_requests:.3f} "
        f"and {cold[2] / base_tokens:.3f}), wall time at most 1/5 ({cold[3] / base_wall:.3f}), a cached re-run "
        f"0 requests (measured {rows[2][1]:.0f}). evaltasks scored by {', '.join(methods) or '?'} (one request per "
        "case, plus one for the evaluation steps, stored); eval-ai-library sends per case 20 samples at "
        "temperature 2.0 and one request for the reason (plus the steps once).",
        "",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    """Parse the options, measure (or read ``--render-from``), write the JSON and the section."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=300.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    parser.add_argument("--render-from", type=Path, default=None, help="render an earlier --json; measure nothing")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/performance.md")
    parser.add_argument("--quick", action="store_true", help="smoke run: --cases 5 --latency-ms 10 --no-doc")
    args = parser.parse_args()
    if args.quick:
        args.cases, args.latency_ms, args.no_doc = 5, 10.0, True
    return publish(args, measure, render, DOC, HEADING)


if __name__ == "__main__":
    sys.exit(main())
