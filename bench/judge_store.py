"""The judge answer store's throughput: 10,000 puts, then 10,000 gets, of GEval-sized answers (one choice with
28 tokens of logprobs, 5 alternatives each; about 3 KB an entry), from 1 and from 8 threads.

Usage: ``python bench/judge_store.py [DIRECTORY]`` (default: a temporary folder; pass one on the disk the
reference index lives on). Prints one line per thread count.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from evaltasks.judges.base import Choice, JudgeReply, JudgeRequest, TokenLogprob
from evaltasks.judges.store import AnswerStore

N = 10_000
SCHEMA = {"type": "object", "properties": {"score": {"type": "integer"}, "reason": {"type": "string"}},
          "required": ["score", "reason"], "additionalProperties": False}


def main() -> None:
    """Measure and print puts/s, gets/s and bytes per entry."""
    requests = [JudgeRequest(messages=({"role": "system", "content": "Grade. " * 50},
                                       {"role": "user", "content": f"case {i} " * 40}), schema=SCHEMA, top_logprobs=5)
                for i in range(N)]
    text = json.dumps({"score": 7, "reason": "The answer is correct and complete, citing the main fact."})
    tokens = ["{", '"', "score", '"', ":", " ", "7", ","] + ["w"] * 20
    logprobs = tuple(TokenLogprob(t, -0.1, tuple((t + str(k), -0.1 * k) for k in range(5))) for t in tokens)
    reply = JudgeReply((Choice(text, json.loads(text), logprobs),), "gpt-4o-mini", 300, 40, 0.0001)
    keys = [r.key("gpt-4o-mini", "http://127.0.0.1/v1/") for r in requests]
    for threads in (1, 8):
        store = AnswerStore(tempfile.mkdtemp(dir=sys.argv[1] if len(sys.argv) > 1 else None))
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda k: store.put(k, reply, model="gpt-4o-mini", endpoint="http://127.0.0.1/v1/"), keys))
        puts = time.perf_counter() - start
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            hits = sum(r is not None for r in pool.map(lambda kr: store.get(*kr), zip(keys, requests)))
        gets = time.perf_counter() - start
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(store.directory) for f in files)
        print(f"threads={threads}: {N} puts {puts:.2f} s ({N / puts:.0f}/s), {N} gets {gets:.2f} s "
              f"({N / gets:.0f}/s), hits {hits}, {size // N} bytes/entry")


if __name__ == "__main__":
    main()
