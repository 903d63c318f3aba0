"""The judge answer store's throughput, with pyperf: 10,000 puts, then 10,000 gets, of GEval-sized answers (one
choice with 28 tokens of logprobs, 5 alternatives each; about 3 KB an entry), from 1 and from 8 threads.

Usage: ``python bench/judge_store.py [--dir DIRECTORY] [--entries 10000]`` (default: a temporary folder; pass
one on the disk the reference index lives on); ``--quick``: 200 entries, one value. pyperf runs each
measurement in fresh worker processes (puts into a fresh store each time, gets from a store filled outside the
clock); the script prints puts/s, gets/s and bytes per entry as a table.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _common import describe, markdown_table, runner, seconds  # bench/ is the script directory: on sys.path

from evaltasks.judges.base import Choice, JudgeReply, JudgeRequest, TokenLogprob
from evaltasks.judges.store import AnswerStore

MODEL, ENDPOINT = "gpt-4o-mini", "http://127.0.0.1/v1/"
SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer"}, "reason": {"type": "string"}},
    "required": ["score", "reason"],
    "additionalProperties": False,
}
CACHE: dict[str, Any] = {}


def _options(parser: Any) -> None:
    parser.add_argument("--dir", default=None, help="where the stores are created (default: a temporary folder)")
    parser.add_argument("--entries", type=int, default=10_000, help="puts and gets per value (default 10,000)")


def workload(n: int) -> tuple[list[JudgeRequest], list[str], JudgeReply]:
    """``n`` GEval-sized requests, their store keys, and one reply to store under each."""
    if CACHE.get("n") != n:
        requests = [
            JudgeRequest(
                messages=(
                    {"role": "system", "content": "Grade. " * 50},
                    {"role": "user", "content": f"case {i} " * 40},
                ),
                schema=SCHEMA,
                top_logprobs=5,
            )
            for i in range(n)
        ]
        text = json.dumps({"score": 7, "reason": "The answer is correct and complete, citing the main fact."})
        tokens = ["{", '"', "score", '"', ":", " ", "7", ","] + ["w"] * 20
        logprobs = tuple(TokenLogprob(t, -0.1, tuple((t + str(k), -0.1 * k) for k in range(5))) for t in tokens)
        reply = JudgeReply((Choice(text, json.loads(text), logprobs),), MODEL, 300, 40, 0.0001)
        CACHE.update(n=n, work=(requests, [r.key(MODEL, ENDPOINT) for r in requests], reply))
    return CACHE["work"]


def _put_all(store: AnswerStore, keys: list[str], reply: JudgeReply, threads: int) -> None:
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda k: store.put(k, reply, model=MODEL, endpoint=ENDPOINT), keys))


def time_puts(loops: int, n: int, threads: int, directory: str | None) -> float:
    """Seconds of ``loops`` × ``n`` puts, each round into a fresh store (pyperf's time function)."""
    _, keys, reply = workload(n)
    total = 0.0
    for _ in range(loops):
        store = AnswerStore(tempfile.mkdtemp(dir=directory))
        t0 = time.perf_counter()
        _put_all(store, keys, reply, threads)
        total += time.perf_counter() - t0
    return total


def time_gets(loops: int, n: int, threads: int, directory: str | None) -> float:
    """Seconds of ``loops`` × ``n`` gets from a store filled outside the clock (pyperf's time function).

    Raises:
        AssertionError: a stored answer was not found.
    """
    requests, keys, reply = workload(n)
    store = AnswerStore(tempfile.mkdtemp(dir=directory))
    _put_all(store, keys, reply, threads)
    t0 = time.perf_counter()
    for _ in range(loops):
        with ThreadPoolExecutor(threads) as pool:
            hits = sum(r is not None for r in pool.map(lambda kr: store.get(*kr), zip(keys, requests)))
        assert hits == n, f"{hits} of {n} answers found"
    return time.perf_counter() - t0


def bytes_per_entry(n: int, directory: str | None) -> int:
    """Bytes on disk per stored answer (one store of ``n`` entries)."""
    _, keys, reply = workload(n)
    store = AnswerStore(tempfile.mkdtemp(dir=directory))
    _put_all(store, keys, reply, 1)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(store.directory) for f in files)
    return size // n


def main() -> None:
    """Measure puts and gets from 1 and 8 threads; the manager process prints the table."""
    run = runner(_options, ("dir", "entries"), processes=3, values=1, loops=1)
    args = run.args
    n = 200 if args.quick else args.entries
    benches = {}
    for threads in (1, 8):
        benches[threads] = (
            run.bench_time_func(f"{n} puts, {threads} threads", time_puts, n, threads, args.dir),
            run.bench_time_func(f"{n} gets, {threads} threads", time_gets, n, threads, args.dir),
        )
    if args.worker:
        return
    rows = [
        (threads, f"{n / seconds(puts):,.0f}", describe(puts), f"{n / seconds(gets):,.0f}", describe(gets))
        for threads, (puts, gets) in benches.items()
    ]
    print(f"\n{n:,} entries, {bytes_per_entry(n, args.dir):,} bytes/entry\n")
    print(markdown_table(("threads", "puts/s (median)", f"{n} puts", "gets/s (median)", f"{n} gets"), rows, "rrlrl"))


if __name__ == "__main__":
    main()
