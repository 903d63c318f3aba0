"""Memory of Dask workers that search a memory-mapped reference set of 10^4 and of 10^6 vectors, one command.

For each size N (default 10,000 and 1,000,000), in ``--scratch`` (outside the repository; about 3.1 GB at
10^6, removed afterwards unless ``--keep``):

1. An index namespace holding N synthetic 384-d unit vectors (seeded) under the texts ``reference text {i}``,
   in the namespace of the local all-MiniLM-L6-v2 provider, written through ``ReferenceIndex.get_or_embed``
   with a provider that returns the synthetic vectors (no model): a run finds every reference stored and
   embeds none, exactly as after ``evaltasks index build``. ``refs.txt`` lists the N texts.
2. A suite: 64 real answers (``examples/quickstart``, variants) scored by ``ReferenceMatchMetric`` (local model)
   against the reference set ``refs.txt`` with ``search: flat`` (exact top 10 per output).
3. A real cluster: ``dask scheduler`` and two ``dask worker --nthreads 1 --no-nanny`` processes (as
   ``tests/e2e/test_cluster_runners.py`` starts them), then ``evaltasks run SUITE --task-runner dask:tcp://...
   --batch-size 8 --no-cache --index-dir ...``. Every 0.5 s while it runs, and once 5 s after it exits, each
   worker's memory is read with psutil (``memory_full_info``) and ``/proc/PID/smaps_rollup``: RSS, USS
   (pages mapped by this process only), PSS, anonymous memory (the process's own heap: not page cache) and
   file-backed RSS (``RssFile``: mapped files, page cache shared by every process that maps them). The
   CLI process (the flow: planning, ``prepare_search``) is sampled the same way.
4. A search-only process: a fresh interpreter (a worker with nothing else in it) loads the run's persisted
   flat search through ``get_search`` and answers 64 queries; its memory before, after the load and after
   the search.

Prints one table (MiB; peak while running and value after) and the JSON it was made from::

    .venv/bin/python bench/worker_memory.py --scratch DIR      # both sizes: 15-30 min on 2 loaded cores
    .venv/bin/python bench/worker_memory.py --scratch /tmp/wm --sizes 10000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
DIMS = 384
MIB = 1024**2
VARIANTS = ("", "Well, ", "In short: ", "I think ", "To answer: ", "Briefly, ", "Sure. ", "So, ")


class SyntheticLocal:
    """The local all-MiniLM-L6-v2 provider's namespace, returning seeded unit vectors instead of embeddings."""

    provider = "local"

    def __init__(self, n: int) -> None:
        from evaltasks.embeddings import get_provider

        self._real = get_provider("local")
        self.model_name = self._real.model_name
        self.n = n

    @property
    def fingerprint(self) -> str:
        """The real model's fingerprint (its files' hash; the model is not loaded)."""
        return self._real.fingerprint

    @property
    def namespace(self) -> str:
        """The real provider's namespace: a run with the real model finds these vectors."""
        return self._real.namespace

    def embed_batch(self, texts: list[str]) -> Any:
        """Seeded unit vectors, one per text (float32 (len(texts), 384))."""
        from evaltasks.embeddings.base import EmbeddingBatch

        rng = np.random.default_rng(0)
        out = np.empty((len(texts), DIMS), dtype=np.float32)
        for start in range(0, len(texts), 100_000):
            block = rng.standard_normal((min(100_000, len(texts) - start), DIMS), dtype=np.float32)
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            out[start : start + len(block)] = block
        return EmbeddingBatch.free(out)

    def embed(self, texts: list[str]) -> np.ndarray:
        """See :meth:`embed_batch`."""
        return self.embed_batch(texts).vectors


def prepare(work: Path, n: int) -> Path:
    """The index, reference set and suite of size ``n`` under ``work``; the suite's path."""
    from evaltasks.index import ReferenceIndex

    work.mkdir(parents=True, exist_ok=True)
    texts = [f"reference text {i}" for i in range(n)]
    (work / "refs.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    lookup = ReferenceIndex(work / "index").get_or_embed(SyntheticLocal(n), texts)
    assert lookup.computed == n, lookup
    del lookup
    rows = [json.loads(line) for line in (ROOT / "examples/quickstart/answers.jsonl").read_text().splitlines() if line]
    with (work / "answers.jsonl").open("w", encoding="utf-8") as out:
        for number, prefix in enumerate(VARIANTS):
            for row in rows:
                out.write(json.dumps({"id": f"{row['id']}-{number}", "answer": prefix + row["answer"]}) + "\n")
    suite = work / "suite.yaml"
    suite.write_text(
        "name: worker-memory\ndataset:\n  path: answers.jsonl\n  fields: {id: id, actual_output: answer}\n"
        "reference_sets: {big: {path: refs.txt, search: flat}}\n"
        "metrics:\n  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: big}\n"
        "gate: {min_pass_rate: 0}\n",
        encoding="utf-8",
    )
    return suite


def memory(pid: int) -> dict[str, float] | None:
    """MiB of process ``pid``: rss, uss, pss, anon (``Anonymous`` of smaps_rollup), file (``RssFile``)."""
    try:
        info = psutil.Process(pid).memory_full_info()
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except (psutil.Error, OSError):
        return None
    anon = next(int(line.split()[1]) for line in rollup if line.startswith("Anonymous:")) * 1024
    file = next(int(line.split()[1]) for line in status if line.startswith("RssFile:")) * 1024
    return {"rss": info.rss / MIB, "uss": info.uss / MIB, "pss": info.pss / MIB, "anon": anon / MIB, "file": file / MIB}


class Sampler(threading.Thread):
    """Samples :func:`memory` of each named pid every 0.5 s; keeps each field's peak."""

    def __init__(self, pids: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.peaks: dict[str, dict[str, float]] = {name: {} for name in pids}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for name, pid in list(self.pids.items()):
                sample = memory(pid)
                for key, value in (sample or {}).items():
                    self.peaks[name][key] = max(self.peaks[name].get(key, 0.0), value)
            self.stop.wait(0.5)


def wait_for(condition: Any, what: str, deadline_s: float = 300.0) -> Any:
    """Poll ``condition()`` until truthy (returned); SystemExit after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"{what}: not within {deadline_s} s")


def measure(work: Path, suite: Path) -> dict[str, Any]:
    """Start the cluster, run the suite on it while sampling; each process's peaks and after-values."""
    home = work / "prefect-home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update(PREFECT_HOME=str(home), HF_HUB_OFFLINE="1", PREFECT_LOGGING_ROOT_LEVEL="INFO")
    processes: list[subprocess.Popen[Any]] = []

    def start(args: list[str], log: Path) -> subprocess.Popen[Any]:
        process = subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=work,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        processes.append(process)
        return process

    scheduler_file = work / "scheduler.json"
    scheduler_file.unlink(missing_ok=True)
    try:
        start(
            [
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(scheduler_file),
            ],
            work / "scheduler.log",
        )
        address = wait_for(
            lambda: scheduler_file.exists() and json.loads(scheduler_file.read_text() or "{}").get("address"),
            "dask scheduler",
        )
        workers = {}
        for number in range(2):
            worker = start(
                [
                    "distributed.cli.dask_worker",
                    "--scheduler-file",
                    str(scheduler_file),
                    "--nthreads",
                    "1",
                    "--no-nanny",
                    "--no-dashboard",
                    "--host",
                    "127.0.0.1",
                ],
                work / f"worker-{number}.log",
            )
            workers[f"worker-{number}"] = worker.pid
        wait_for(
            lambda: (work / "scheduler.log").read_text(errors="replace").count("Register worker") >= 2,
            "two dask workers",
        )
        before = {name: memory(pid) for name, pid in workers.items()}
        shutil.rmtree(work / "out", ignore_errors=True)
        t0 = time.monotonic()
        cli = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "evaltasks.cli",
                "run",
                str(suite),
                "--task-runner",
                f"dask:{address}",
                "--batch-size",
                "8",
                "--no-cache",
                "--quiet",
                "--output-dir",
                str(work / "out"),
                "--index-dir",
                str(work / "index"),
            ],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        sampler = Sampler({**workers, "cli": cli.pid})
        sampler.start()
        _, stderr = cli.communicate(timeout=1800)
        seconds = time.monotonic() - t0
        time.sleep(5.0)
        sampler.stop.set()
        sampler.join()
        if cli.returncode != 0:
            raise SystemExit(f"evaltasks run exited {cli.returncode}:\n{stderr[-3000:]}")
        after = {name: memory(pid) for name, pid in workers.items()}
        logs = {name: (work / f"{name}.log").read_text(errors="replace") for name in workers}
        results = json.loads((work / "out" / "results.json").read_text(encoding="utf-8"))
        tasks = {
            name: {
                kind: sum(f"Task run '{kind}" in line and "Finished in state" in line for line in log.splitlines())
                for kind in ("embed-references", "embed-outputs", "score-batch")
            }
            for name, log in logs.items()
        }
        return {
            "run_s": round(seconds, 1),
            "before": before,
            "peak": sampler.peaks,
            "after": after,
            "task_runs": tasks,
            "cases": len(results["cases"]),
            "errors": sum(m.get("error") is not None for c in results["cases"] for m in c["metrics"]),
        }
    finally:
        for process in processes:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


_SEARCH_ONLY = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[3])
from worker_memory import memory
from evaltasks.index.search import SearchConfig, get_search
rng = np.random.default_rng(1)
queries = rng.standard_normal((64, 384), dtype=np.float32)
queries /= np.linalg.norm(queries, axis=1, keepdims=True)
import os
before = memory(os.getpid())
search = get_search(sys.argv[1], sys.argv[2], SearchConfig(kind="flat"))
loaded = memory(os.getpid())
search.top_k(queries, 10)
print(json.dumps({"before": before, "loaded": loaded, "searched": memory(os.getpid()), "n": len(search)}))
"""


def search_only(work: Path) -> dict[str, Any]:
    """A fresh process (a worker with nothing else to do) loads the run's persisted flat search and answers 64
    queries: its memory before, after loading and after searching (MiB)."""
    (npy,) = (work / "index" / "sets").glob("*.npy")
    child = subprocess.run(
        [sys.executable, "-c", _SEARCH_ONLY, npy.stem, str(npy.parent), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if child.returncode != 0:
        raise SystemExit(child.stderr[-3000:])
    return {**json.loads(child.stdout.splitlines()[-1]), "file_mib": npy.stat().st_size / MIB}


def table(rows: dict[int, dict[str, Any]]) -> str:
    """A Markdown table: per size and process, peak while running / after, MiB."""
    lines = [
        "| vectors (set size) | process | task runs | RSS peak / after | USS peak / after | PSS peak / after "
        "| anonymous peak / after | file-backed peak / after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, row in rows.items():
        size = f"{n:,} ({n * DIMS * 4 / MIB:,.0f} MiB)"
        for name, peak in row["peak"].items():
            after = row["after"].get(name) or {}
            runs = ", ".join(f"{k} {v}" for k, v in row["task_runs"].get(name, {}).items() if v) or "(the flow)"
            cells = [
                f"{peak.get(k, 0):,.0f} / {after[k]:,.0f}" if k in after else f"{peak.get(k, 0):,.0f} / -"
                for k in ("rss", "uss", "pss", "anon", "file")
            ]
            lines.append(f"| {size} | {name} | {runs} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| vectors (set size) | search-only process | RSS | USS | PSS | anonymous | file-backed |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, row in rows.items():
        size = f"{n:,} ({n * DIMS * 4 / MIB:,.0f} MiB)"
        for when in ("before", "loaded", "searched"):
            sample = row["search_only"][when]
            lines.append(
                f"| {size} | {when} | "
                + " | ".join(f"{sample[k]:,.0f}" for k in ("rss", "uss", "pss", "anon", "file"))
                + " |"
            )
    return "\n".join(lines)


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scratch", type=Path, default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--keep", action="store_true", help="keep the index and runs in --scratch")
    args = parser.parse_args()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="worker-memory-"))
    rows: dict[int, dict[str, Any]] = {}
    try:
        for n in args.sizes:
            work = scratch / f"n{n}"
            t0 = time.monotonic()
            suite = prepare(work, n)
            prepared = time.monotonic() - t0
            rows[n] = {"prepare_s": round(prepared, 1), "load_avg": os.getloadavg(), **measure(work, suite)}
            rows[n]["search_only"] = search_only(work)
            print(json.dumps({n: rows[n]}), file=sys.stderr, flush=True)
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        if not args.keep and args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
