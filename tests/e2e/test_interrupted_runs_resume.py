"""Crashes and concurrency: ``kill -9`` mid-run, two writers at once, atomic report files.

- The reference index survives its writer being killed with SIGKILL at random moments (state verifies, no
  completed write lost), and readers never see a torn index while another process writes it.
- ``evaltasks run`` killed with SIGKILL (its whole process group) leaves no process behind, the index
  verifies, and the same command again reuses the persisted task results (embeddings and completed score
  batches, byte for byte untouched) and produces the scores of an uninterrupted run.
- Two ``evaltasks run`` at once on one ``--index-dir`` with separate PREFECT_HOMEs: both finish, equal scores,
  and the index holds each unique reference exactly once, with the right vector.
- results.json and junit.xml are replaced atomically: a reader polling them while they are rewritten always
  parses a complete file that is one of the written versions.

The expected scores come from an in-process :func:`evaltasks.evaluate_sync` run (no Prefect, no index, no
task cache) over the same suite: an uninterrupted run computed independently of the CLI.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import psutil
import pytest

from conftest import subprocess_env
from evaltasks.index import ReferenceIndex, text_id

REPO = Path(__file__).resolve().parent.parent
QUICKSTART_DATA = REPO / "examples" / "quickstart" / "answers.jsonl"

CASES = 240          # unique outputs; references cycle with REFERENCE_MOD, so the index holds a few hundred
REFERENCE_MOD = 30
BATCH_SIZE = 2       # 120 score-batch task runs per metric: the kill lands while batches are being scored
KILL_AFTER_FILES = 12  # a few score batches persisted, then SIGKILL
RUN_TIMEOUT_S = 420  # a loaded 2-core machine; a run takes 20-60 s there

HASH_PROVIDER = textwrap.dedent(
    """
    import hashlib
    import numpy as np
    from evaltasks.embeddings.base import EmbeddingBatch, normalize_rows

    class HashProvider:
        provider, model_name = "test", "hash-16"
        fingerprint, namespace = "f0", "test/hash-16/f0"
        def embed_batch(self, texts):
            rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], dtype=np.uint8) for t in texts]
            return EmbeddingBatch.free(normalize_rows(np.array(rows, dtype=np.float32) - 127.5))
        def embed(self, texts):
            return self.embed_batch(texts).vectors
    """
)


def _hash_vector(text: str) -> np.ndarray:
    row = np.frombuffer(hashlib.sha256(text.encode()).digest()[:16], dtype=np.uint8).astype(np.float32) - 127.5
    return row / np.linalg.norm(row)


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


# --- the index layer: SIGKILL of a writer, readers during writes ------------------------------------------

KILLED_WRITER = HASH_PROVIDER + textwrap.dedent(
    """
    import sys
    from evaltasks.index import ReferenceIndex

    root, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    texts = [f"reference {i}" for i in range(start, stop)]
    print("ready", flush=True)
    for chunk in range(0, len(texts), 20):
        ReferenceIndex(root).get_or_embed(HashProvider(), texts[chunk : chunk + 20])
    print("done", flush=True)
    """
)


def test_index_survives_sigkill_of_its_writer(tmp_path: Path) -> None:
    """A writer killed at a random moment (mid-write included) leaves a state that verifies, keeps every
    completed write, and the next writer continues from it; a final writer leaves no temporary files."""
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER, encoding="utf-8")
    root = tmp_path / "index"
    kills, step, span = 14, 150, 20_000
    known = {text_id(f"reference {i}"): f"reference {i}" for i in range(kills * step + span)}
    rng = random.Random(7)
    count_before, mid_write, between_files = 0, 0, 0
    for kill in range(kills):
        start = kill * step  # overlaps what earlier writers stored, and adds new texts
        writer = subprocess.Popen(
            [sys.executable, str(script), str(root), str(start), str(start + span)],
            stdout=subprocess.PIPE, text=True,
        )
        assert writer.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 120  # a hang guard only
        while kill == 0 and not list(root.glob("*/meta.json")):  # the first writer completes a write: a state
            assert writer.poll() is None and time.monotonic() < deadline, "the first writer wrote nothing"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.05, 0.5))  # a random moment, mid-write included (correct at any moment)
        assert writer.poll() is None, "the writer finished before the kill: give it more texts"
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        writer.stdout.close()
        if not root.exists() or not list(root.glob("*/meta.json")):
            continue  # killed before its first write
        mid_write += bool(_stale_temporaries(root))
        namespace = next(root.glob("*/meta.json")).parent
        meta = json.loads((namespace / "meta.json").read_text())
        listed = {s[kind] for s in meta["segments"] for kind in ("ids", "vectors", "crc32")}
        between_files += any(p.name not in listed for p in namespace.glob("seg-*"))  # segment written, not committed
        ((ids, vectors, meta),) = _index_state(root).values()
        assert len(ids) == len(set(ids.tolist())) == meta["count"], f"kill {kill}: duplicated or miscounted vectors"
        assert len(ids) >= count_before, f"kill {kill}: {count_before - len(ids)} completed vectors lost"
        assert set(ids.tolist()) <= set(known), f"kill {kill}: unknown ids"
        expected = np.stack([_hash_vector(known[int(i)]) for i in ids])
        assert np.allclose(vectors, expected, atol=1e-6), f"kill {kill}: wrong vectors"
        count_before = len(ids)
    assert count_before > 0, "no writer ever wrote: the kills came too early"
    # A writer that runs to the end continues from the survivors and cleans up what the killed ones left. Its
    # 400 texts are new (the killed writers may have stored every text of any earlier range, and a writer with
    # nothing to add writes nothing, so it would clean nothing).
    fresh = kills * step + span
    done = subprocess.run([sys.executable, str(script), str(root), str(fresh), str(fresh + 400)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["ready", "done"], done.stderr
    ((ids, _, meta),) = _index_state(root).values()
    assert len(ids) >= max(count_before, 400) and not _stale_temporaries(root)
    listed = {s[kind] for s in meta["segments"] for kind in ("ids", "vectors", "crc32")}  # and no uncommitted segment
    assert {p.name for p in next(root.glob("*/meta.json")).parent.glob("seg-*")} == listed
    print(f"\n{kills} kills: {mid_write} left a temporary file (killed mid-write), {between_files} between "
          f"a segment and meta.json; {len(ids)} vectors at the end")


READER = HASH_PROVIDER + textwrap.dedent(
    """
    import sys, time, warnings
    from evaltasks.index import ReferenceIndex

    warnings.simplefilter("error")  # a corruption warning ("rebuilding it") ends the reader with a traceback
    root, stop_file = sys.argv[1], sys.argv[2]
    probe = [f"reference {i}" for i in range(0, 3000, 7)]
    reads = 0
    import os
    while not os.path.exists(stop_file):
        ReferenceIndex(root).missing_texts(HashProvider(), probe)
        reads += 1
        if reads == 1:
            print("reading", flush=True)
    print(reads, flush=True)
    """
)

STEADY_WRITER = HASH_PROVIDER + textwrap.dedent(
    """
    import sys
    from evaltasks.index import ReferenceIndex

    root, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    texts = [f"reference {i}" for i in range(start, stop)]
    for chunk in range(0, len(texts), 10):
        ReferenceIndex(root).get_or_embed(HashProvider(), texts[chunk : chunk + 10])
    """
)


def test_readers_never_see_a_torn_index_while_writers_write(tmp_path: Path) -> None:
    """Two readers load the index in a loop while two writers replace it hundreds of times: no read is ever
    reported corrupt (a read that races a replacement is repeated under the writers' lock)."""
    (tmp_path / "reader.py").write_text(READER, encoding="utf-8")
    (tmp_path / "writer.py").write_text(STEADY_WRITER, encoding="utf-8")
    root, stop = tmp_path / "index", tmp_path / "stop"
    subprocess.run([sys.executable, str(tmp_path / "writer.py"), str(root), "0", "10"], check=True, timeout=60)
    readers = [subprocess.Popen([sys.executable, str(tmp_path / "reader.py"), str(root), str(stop)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for reader in readers:  # both read before the writers start, however slowly the machine starts them
        assert reader.stdout.readline().strip() == "reading", reader.communicate(timeout=60)[1][-3000:]
    writers = [subprocess.Popen([sys.executable, str(tmp_path / "writer.py"), str(root), str(a), str(b)])
               for a, b in ((0, 2000), (1000, 3000))]
    try:
        assert [w.wait(timeout=240) for w in writers] == [0, 0]
    finally:
        stop.touch()
    outputs = [r.communicate(timeout=60) for r in readers]
    for reader, (out, err) in zip(readers, outputs):
        assert reader.returncode == 0, err[-3000:]
        assert int(out) > 0
    ((ids, _, meta),) = _index_state(root).values()
    assert len(ids) == meta["count"] == 3000
    print(f"\nreads without a corrupt state: {[int(out) for out, _ in outputs]}")


# --- end to end: evaltasks run killed with SIGKILL; two runs at once on one index -------------------------


@pytest.fixture(scope="module")
def big_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart's 8 answers repeated into CASES cases with unique outputs and a few hundred references."""
    folder = tmp_path_factory.mktemp("big-suite")
    base = [json.loads(line) for line in QUICKSTART_DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    with open(folder / "answers.jsonl", "w", encoding="utf-8") as out:
        for i in range(CASES):
            case = base[i % len(base)]
            out.write(json.dumps({
                "id": f"{case['id']}-{i}", "question": case["question"], "answer": f"{case['answer']} (take {i})",
                "references": [f"{ref} [{i % REFERENCE_MOD}]" for ref in case["references"]],
            }) + "\n")
    (folder / "suite.yaml").write_text(textwrap.dedent(
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
        """), encoding="utf-8")
    return folder / "suite.yaml"


@pytest.fixture(scope="module")
def expected(big_suite: Path) -> dict:
    """The uninterrupted in-process run: scores by (case id, metric), the gate, the references and vectors."""
    from evaltasks.engine.evaluate import embed_references, evaluate_sync
    from evaltasks.engine.run import gate_passed, plan_run

    plan = plan_run(str(big_suite))
    result = evaluate_sync(plan.dataset.cases, plan.suite.metrics, ids=plan.dataset.ids)
    scores = {(case.id, m.name): (m.score, m.status) for case in result.test_results for m in case.metrics}
    ((namespace, need),) = plan.needs.items()
    references = list(need.references)
    table, _ = embed_references(need.provider, references, None)
    return {
        "scores": scores, "passed": gate_passed(result, plan.suite.suite.gate.min_pass_rate, False),
        "namespace": namespace, "references": references, "reference_vectors": table.rows(references),
        "outputs": len(need.outputs), "output_texts": list(need.outputs),
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


def test_run_killed_with_sigkill_resumes_from_the_task_cache(big_suite: Path, expected: dict, tmp_path: Path,
                                                             prefect_api_url: str) -> None:
    home, work = tmp_path / "prefect-home", tmp_path / "work"
    work.mkdir()
    command = [sys.executable, "-m", "evaltasks.cli", "run", str(big_suite), "--index-dir", str(tmp_path / "index"),
               "--output-dir", "out", "--batch-size", str(BATCH_SIZE), "--quiet"]
    env = subprocess_env(home)
    batches = -(-CASES // BATCH_SIZE)
    full_run_files = 2 * batches  # one per score batch and metric (embeddings live in the index)

    started = time.monotonic()
    run = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           start_new_session=True)
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
        group = _group_commands(pgid) + [" ".join(c.cmdline()) for c in psutil.Process(run.pid).children(recursive=True)]
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
    rerun = subprocess.run(command, cwd=work, env=subprocess_env(home, prefect_api_url), capture_output=True,
                           text=True, timeout=RUN_TIMEOUT_S)
    rerun_s = time.monotonic() - rerun_started
    assert rerun.returncode == (0 if expected["passed"] else 1), rerun.stdout + rerun.stderr
    assert _survivors(home) == []

    _assert_scores_equal(_scores(work / "out" / "results.json"), expected["scores"])
    embeddings = json.loads((work / "out" / "results.json").read_text())["summary"]["embeddings"]
    assert embeddings == {"references_computed": 0, "references_reused": len(expected["references"]),
                          "outputs_computed": 0, "outputs_reused": expected["outputs"]}, embeddings
    after = _storage(home)
    assert len(after) == full_run_files
    untouched = {name for name in complete if after.get(name) == before[name]}
    assert untouched == complete, f"{len(complete - untouched)} completed results were recomputed"
    rewritten = len(after) - len(untouched)
    assert rewritten < full_run_files
    print(f"\nkilled after {killed_after:.1f} s with {len(before)} of {full_run_files} task results persisted "
          f"({len(complete)} complete); the rerun ({rerun_s:.1f} s) reused {len(untouched)} and wrote {rewritten}")


def _storage_names(prefect_home: Path) -> list[str]:
    try:
        return os.listdir(prefect_home / "storage")
    except FileNotFoundError:
        return []


def test_two_runs_at_once_share_one_index(big_suite: Path, expected: dict, tmp_path: Path, prefect_api_url: str) -> None:
    index_dir = tmp_path / "index"
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        command = [sys.executable, "-m", "evaltasks.cli", "run", str(big_suite), "--index-dir", str(index_dir),
                   "--output-dir", "out", "--quiet"]
        runs.append(subprocess.Popen(command, cwd=tmp_path / name,
                                     env=subprocess_env(tmp_path / name / "home", prefect_api_url),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [run.communicate(timeout=RUN_TIMEOUT_S)[0] for run in runs]
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


# --- atomic report files ------------------------------------------------------------------------------------

REPORT_READER = textwrap.dedent(
    """
    import hashlib, json, os, sys
    import xml.etree.ElementTree as ET

    folder, allowed_file, stop_file = sys.argv[1], sys.argv[2], sys.argv[3]
    allowed = json.load(open(allowed_file))
    counts = {"reads": 0, "torn": 0, "unknown": 0, "versions": []}
    seen = set()
    while not os.path.exists(stop_file):
        if counts["reads"] in (2, 42) or len(seen) != counts.get("reported", 0):  # progress, for the writer
            counts["reported"] = len(seen)
            print(counts["reads"], len(seen), flush=True)
        for name, parse in (("results.json", json.loads), ("junit.xml", ET.fromstring)):
            with open(os.path.join(folder, name), "rb") as handle:
                data = handle.read()
            counts["reads"] += 1
            try:
                parse(data)
            except Exception:
                counts["torn"] += 1
                continue
            digest = hashlib.sha256(data).hexdigest()
            if digest not in allowed[name]:
                counts["unknown"] += 1
            seen.add((name, allowed[name].index(digest) if digest in allowed[name] else -1))
    counts["versions"] = sorted(seen)
    del counts["reported"]
    print(json.dumps(counts), flush=True)
    """
)


def test_reports_are_replaced_atomically(tmp_path: Path) -> None:
    """A reader process polls results.json and junit.xml while they are rewritten (40 times, and on until the
    reader has read more than 40 times and seen at least 4 versions) with 4 different contents (each a few MB):
    every read parses completely and is byte for byte one of the written versions.

    (Checked by hand: with the writers opening the target directly instead of ``atomic_writer``, the reader
    sees torn files within the first few rewrites.)
    """
    from evaltasks import EvalTestCase, LengthCheckMetric, evaluate_sync
    from evaltasks.reports import write_reports

    versions = []
    for v in range(4):
        cases = [EvalTestCase(input=f"question {i}", actual_output=f"version {v} answer {i} " + "word " * (i % 40))
                 for i in range(3000 + 500 * v)]
        result = evaluate_sync(cases, [LengthCheckMetric(max_length=20 + v, unit="words")])
        header = {"suite": "atomic", "version": v, "gate": {"min_pass_rate": 0.5, "pass_rate": None}}
        versions.append((result, header))
    allowed: dict[str, list[str]] = {"results.json": [], "junit.xml": []}
    for v, (result, header) in enumerate(versions):  # each version's bytes, written once on their own
        paths = write_reports(tmp_path / f"v{v}", result, header, passed=True, min_pass_rate=0.5)
        for name in allowed:
            allowed[name].append(hashlib.sha256(paths[name].read_bytes()).hexdigest())
    (tmp_path / "allowed.json").write_text(json.dumps(allowed))
    (tmp_path / "reader.py").write_text(REPORT_READER, encoding="utf-8")

    out, stop = tmp_path / "out", tmp_path / "stop"
    write_reports(out, *versions[0], passed=True, min_pass_rate=0.5)
    reader = subprocess.Popen([sys.executable, str(tmp_path / "reader.py"), str(out), str(tmp_path / "allowed.json"),
                               str(stop)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    collector = threading.Thread(target=lambda: lines.extend(reader.stdout), daemon=True)
    collector.start()

    def progress() -> tuple[int, int]:  # (reads, versions seen) as the reader last reported them
        reported = [line.split() for line in list(lines) if line[:1].isdigit() and len(line.split()) == 2]
        return max((int(r) for r, _ in reported), default=0), max((int(v) for _, v in reported), default=0)

    deadline = time.monotonic() + 300  # a hang guard only
    try:
        while progress()[0] < 2:  # the reader is reading before the rewrites start
            assert reader.poll() is None, reader.stderr.read()
            assert time.monotonic() < deadline, "the reader did not start reading"
            time.sleep(0.05)
        rewrite = 0
        while rewrite < 40 or progress()[0] <= 40 or progress()[1] < 4:
            assert reader.poll() is None, reader.stderr.read()
            assert time.monotonic() < deadline, progress()
            write_reports(out, *versions[rewrite % len(versions)], passed=True, min_pass_rate=0.5)
            rewrite += 1
    finally:
        stop.touch()
    reader.wait(timeout=60)
    collector.join(timeout=60)
    stdout, stderr = lines[-1] if lines else "", reader.stderr.read()
    assert reader.returncode == 0, stderr
    counts = json.loads(stdout)
    assert counts["torn"] == 0 and counts["unknown"] == 0, counts
    assert counts["reads"] > 40, counts
    assert len(counts["versions"]) >= 4, counts  # the reader saw the files change, several versions of each
    assert not list(out.glob(".*.tmp"))
    print(f"\n{counts['reads']} reads, versions seen {counts['versions']}")
