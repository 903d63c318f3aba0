"""What a run persists (task results, the reference index) under ``kill -9`` and under two runs at once.

- ``evaltasks run`` killed with SIGKILL (its whole process group) leaves no process behind, the index
  verifies, and the same command again reuses the persisted task results (embeddings and completed score
  batches, byte for byte untouched) and produces the scores of an uninterrupted run.
- Two ``evaltasks run`` at once on one ``--index-dir`` with separate PREFECT_HOMEs: both finish, equal scores,
  and the index holds each unique reference exactly once, with the right vector.

The expected scores come from an in-process :func:`evaltasks.evaluate_sync` run (no Prefect, no index, no
task cache) over the same suite: an uninterrupted run computed independently of the CLI.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import psutil
import pytest

from evaltasks.index import ReferenceIndex, text_id
from tests.cli_forkserver import run_cli
from tests.process_env import subprocess_env

REPO = Path(__file__).resolve().parents[2]
QUICKSTART_DATA = REPO / "examples" / "quickstart" / "answers.jsonl"
CASES = 240  # unique outputs; references cycle with REFERENCE_MOD, so the index holds a few hundred
REFERENCE_MOD = 30
BATCH_SIZE = 2  # 120 score-batch task runs per metric: the kill lands while batches are being scored
KILL_AFTER_FILES = 12  # a few score batches persisted, then SIGKILL
RUN_TIMEOUT_S = 420  # a loaded 2-core machine; a run takes 20-60 s there


def _index_state(root: Path) -> dict[str, tuple[np.ndarray, np.ndarray, dict]]:
    """namespace -> (ids, vectors, meta) as a run would read them; any corruption warning fails the test."""
    index = ReferenceIndex(root)
    out = {}
    for info in index.info():
        assert "error" not in info, info
        ns = index._namespace_by_name(info["namespace"])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out[info["namespace"]] = ns.load()
    return out


def _stale_temporaries(root: Path) -> list[Path]:
    return sorted(root.glob("*/.*.tmp"))


@pytest.fixture(scope="module")
def big_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart's 8 answers repeated into CASES cases with unique outputs and a few hundred references."""
    folder = tmp_path_factory.mktemp("big-suite")
    base = [json.loads(line) for line in QUICKSTART_DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    with open(folder / "answers.jsonl", "w", encoding="utf-8") as out:
        for i in range(CASES):
            case = base[i % len(base)]
            out.write(
                json.dumps(
                    {
                        "id": f"{case['id']}-{i}",
                        "question": case["question"],
                        "answer": f"{case['answer']} (take {i})",
                        "references": [f"{ref} [{i % REFERENCE_MOD}]" for ref in case["references"]],
                    }
                )
                + "\n"
            )
    (folder / "suite.yaml").write_text(
        textwrap.dedent(
            """\
        name: crash-test
        dataset:
          path: answers.jsonl
          fields: {id: id, input: question, actual_output: answer, references: references}
        metrics:
          - metric: ReferenceMatchMetric
            threshold: 0.6
            embedding_provider: local
          - metric: LengthCheckMetric
            max_length: 30
            unit: words
        gate:
          min_pass_rate: 0.7
        """
        ),
        encoding="utf-8",
    )
    return folder / "suite.yaml"


@pytest.fixture(scope="module")
def expected(big_suite: Path) -> dict:
    """The uninterrupted in-process run: scores by (case id, metric), the gate, the references and vectors."""
    from evaltasks.engine.evaluate import embed_references, evaluate_sync
    from evaltasks.engine.lifecycle import gate_passed
    from evaltasks.engine.run import plan_run

    plan = plan_run(str(big_suite))
    result = evaluate_sync(plan.dataset.cases, plan.suite.metrics, ids=plan.dataset.ids)
    scores = {(case.id, m.name): (m.score, m.status) for case in result.test_results for m in case.metrics}
    ((namespace, need),) = plan.needs.items()
    references = list(need.references)
    table, _ = embed_references(need.provider, references, None)
    return {
        "scores": scores,
        "passed": gate_passed(result, plan.suite.suite.gate.min_pass_rate, False),
        "namespace": namespace,
        "references": references,
        "reference_vectors": table.rows(references),
        "outputs": len(need.outputs),
        "output_texts": list(need.outputs),
    }


def _scores(results_path: Path) -> dict:
    results = json.loads(results_path.read_text(encoding="utf-8"))
    return {(case["id"], m["name"]): (m["score"], m["status"]) for case in results["cases"] for m in case["metrics"]}


def _assert_scores_equal(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    worst = max(abs(got[k][0] - want[k][0]) for k in want)
    assert worst <= 1e-9, f"scores differ by up to {worst}"
    assert {k: v[1] for k, v in got.items()} == {k: v[1] for k, v in want.items()}


def _survivors(prefect_home: Path, pgid: int | None = None, wait_s: float = 180.0) -> list[str]:
    """Live processes (zombies aside) in process group ``pgid`` or with PREFECT_HOME=``prefect_home``, after
    waiting up to ``wait_s`` for them to go (a hang guard: it returns as soon as none is left)."""
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                in_group = pgid is not None and os.getpgid(proc.pid) == pgid
                if in_group or proc.environ().get("PREFECT_HOME") == str(prefect_home):
                    found.append(f"{proc.pid}: {' '.join(proc.cmdline())[:200]}")
            except (psutil.Error, ProcessLookupError, PermissionError):
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _group_commands(pgid: int) -> list[str]:
    """Command lines of the live processes in process group ``pgid``."""
    out = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(" ".join(proc.cmdline()))
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return out


def _storage(prefect_home: Path) -> dict[str, tuple[int, int, str]]:
    """Prefect's local result storage: file name -> (size, mtime_ns, sha256)."""
    folder = prefect_home / "storage"
    out = {}
    for path in folder.iterdir() if folder.is_dir() else ():
        data = path.read_bytes()
        stat = path.stat()
        out[path.name] = (stat.st_size, stat.st_mtime_ns, hashlib.sha256(data).hexdigest())
    return out


def _complete(prefect_home: Path, name: str) -> bool:
    """A persisted result record parses (a record cut short by the kill does not)."""
    try:
        record = json.loads((prefect_home / "storage" / name).read_bytes())
    except ValueError:
        return False
    return "result" in record and "metadata" in record


def test_run_killed_with_sigkill_resumes_from_the_task_cache(
    big_suite: Path, expected: dict, tmp_path: Path, prefect_api_url: str
) -> None:
    home, work = tmp_path / "prefect-home", tmp_path / "work"
    work.mkdir()
    command = [
        sys.executable,
        "-m",
        "evaltasks.cli",
        "run",
        str(big_suite),
        "--index-dir",
        str(tmp_path / "index"),
        "--output-dir",
        "out",
        "--batch-size",
        str(BATCH_SIZE),
        "--quiet",
    ]
    env = subprocess_env(home)
    batches = -(-CASES // BATCH_SIZE)
    full_run_files = 2 * batches  # one per score batch and metric (embeddings live in the index)

    started = time.monotonic()
    run = subprocess.Popen(
        command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    pgid = os.getpgid(run.pid)
    log: list[bytes] = []
    reader = threading.Thread(target=lambda: log.extend(run.stdout), daemon=True)
    reader.start()
    try:
        while len(_storage_names(home)) < KILL_AFTER_FILES:
            assert run.poll() is None, f"the run ended before the kill:\n{b''.join(log).decode()[-3000:]}"
            assert time.monotonic() - started < RUN_TIMEOUT_S, "no task result persisted in time"
            time.sleep(0.02)
        assert not (work / "out" / "results.json").exists(), "the run finished before the kill: enlarge the data"
        # the temporary server runs in a session of its own (so Ctrl+C reaches only the CLI): found as its child
        group = _group_commands(pgid) + [
            " ".join(c.cmdline()) for c in psutil.Process(run.pid).children(recursive=True)
        ]
    finally:
        os.killpg(pgid, signal.SIGKILL)
        run.wait(timeout=60)
    assert any("uvicorn" in command and "prefect" in command for command in group), group  # its temporary server
    killed_after = time.monotonic() - started
    reader.join(timeout=10)

    # Nothing of the killed run survives: not the CLI, not Prefect's temporary server.
    assert _survivors(home, pgid) == []
    # The index verifies and holds every reference once, with its vector, and the outputs (scoring had begun,
    # so the references and outputs had been stored).
    ids, vectors, meta = _index_state(tmp_path / "index")[expected["namespace"]]
    want = dict(zip((text_id(r) for r in expected["references"]), expected["reference_vectors"]))
    assert len(ids) == len(set(ids.tolist())) == meta["count"] == len(want) + expected["outputs"]
    assert set(want) <= set(ids.tolist())
    rows = [k for k, i in enumerate(ids.tolist()) if i in want]
    assert np.allclose(vectors[rows], np.stack([want[int(ids[k])] for k in rows]), atol=1e-5)
    before = _storage(home)
    complete = {name for name in before if _complete(home, name)}
    assert 0 < len(before) <= full_run_files

    rerun_started = time.monotonic()
    # The rerun needs no temporary server of its own (the killed run's is the subject above): the task results
    # it reuses are in PREFECT_HOME's storage, whichever server records the runs.
    rerun = run_cli(*command[3:], cwd=work, env=subprocess_env(home, prefect_api_url), timeout=RUN_TIMEOUT_S)
    rerun_s = time.monotonic() - rerun_started
    assert rerun.returncode == (0 if expected["passed"] else 1), rerun.stdout + rerun.stderr
    assert _survivors(home) == []

    _assert_scores_equal(_scores(work / "out" / "results.json"), expected["scores"])
    embeddings = json.loads((work / "out" / "results.json").read_text())["summary"]["embeddings"]
    assert embeddings == {
        "references_computed": 0,
        "references_reused": len(expected["references"]),
        "outputs_computed": 0,
        "outputs_reused": expected["outputs"],
    }, embeddings
    after = _storage(home)
    assert len(after) == full_run_files
    untouched = {name for name in complete if after.get(name) == before[name]}
    assert untouched == complete, f"{len(complete - untouched)} completed results were recomputed"
    rewritten = len(after) - len(untouched)
    assert rewritten < full_run_files
    print(
        f"\nkilled after {killed_after:.1f} s with {len(before)} of {full_run_files} task results persisted "
        f"({len(complete)} complete); the rerun ({rerun_s:.1f} s) reused {len(untouched)} and wrote {rewritten}"
    )


def _storage_names(prefect_home: Path) -> list[str]:
    try:
        return os.listdir(prefect_home / "storage")
    except FileNotFoundError:
        return []


def test_two_runs_at_once_share_one_index(
    big_suite: Path, expected: dict, tmp_path: Path, prefect_api_url: str
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    index_dir = tmp_path / "index"
    argv = ["run", str(big_suite), "--index-dir", str(index_dir), "--output-dir", "out", "--quiet"]

    def run(name: str) -> subprocess.CompletedProcess[str]:
        (tmp_path / name).mkdir()
        env = subprocess_env(tmp_path / name / "home", prefect_api_url)
        return run_cli(*argv, cwd=tmp_path / name, env=env, timeout=RUN_TIMEOUT_S)

    with ThreadPoolExecutor(2) as pool:  # two processes at once
        runs = list(pool.map(run, ("a", "b")))
    outputs = [run.stdout + run.stderr for run in runs]
    want_rc = 0 if expected["passed"] else 1
    assert [run.returncode for run in runs] == [want_rc, want_rc], outputs
    counts = {}
    for name in ("a", "b"):
        assert _survivors(tmp_path / name / "home") == []
        _assert_scores_equal(_scores(tmp_path / name / "out" / "results.json"), expected["scores"])
        embeddings = json.loads((tmp_path / name / "out" / "results.json").read_text())["summary"]["embeddings"]
        assert embeddings["references_computed"] + embeddings["references_reused"] == len(expected["references"])
        assert embeddings["outputs_computed"] + embeddings["outputs_reused"] == expected["outputs"]
        counts[name] = (embeddings["references_computed"], embeddings["references_reused"])
    assert _scores(tmp_path / "a" / "out" / "results.json") == _scores(tmp_path / "b" / "out" / "results.json")

    state = _index_state(index_dir)
    assert list(state) == [expected["namespace"]]
    ids, vectors, meta = state[expected["namespace"]]
    want = dict(zip((text_id(r) for r in expected["references"]), expected["reference_vectors"]))
    outputs = {text_id(t) for t in expected["output_texts"]}
    assert len(ids) == meta["count"] == len(want) + len(outputs), "lost or duplicated vectors"
    assert set(ids.tolist()) == set(want) | outputs  # the references and the outputs, each once
    rows = [k for k, i in enumerate(ids.tolist()) if i in want]
    assert np.allclose(vectors[rows], np.stack([want[int(ids[k])] for k in rows]), atol=1e-5)
    assert not _stale_temporaries(index_dir)
    print(f"\nreferences (computed, reused) per run: {counts}; {len(ids)} in the index")
