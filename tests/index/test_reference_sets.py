"""Named reference sets: suite loading, FAISS search (exact flat and HNSW), scores equal to direct scoring."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from evaltasks import EvalTestCase, ReferenceMatchMetric, evaluate_sync
from evaltasks.errors import ConfigError
from evaltasks.index.search import ReferenceSearch, SearchConfig
from evaltasks.inputs.reference_sets import ReferenceSet, load_reference_set
from evaltasks.inputs.suite import load_suite
from tests.cli_forkserver import run_cli

FACTS = [
    "Paris is the capital of France.",
    "Berlin is the capital of Germany.",
    "Water boils at 100 degrees Celsius at sea level.",
    "The Solar System has eight planets.",
    "Neil Armstrong walked on the Moon in 1969.",
]
OUTPUTS = [
    "The capital of France is Paris.",
    "There are eight planets orbiting the Sun.",
    "Our company was founded in 2020.",
    "   ",
]


def _cases() -> list[EvalTestCase]:
    return [EvalTestCase(actual_output=o) for o in OUTPUTS]


@pytest.mark.parametrize("aggregation", ["max", "mean"])
def test_set_scores_equal_per_case_references(aggregation: str, cosine) -> None:
    reference_set = ReferenceSet("facts", tuple(FACTS))
    via_set = ReferenceMatchMetric(
        embedding_provider="local", reference_set=reference_set, aggregation=aggregation, name="set"
    )
    via_list = ReferenceMatchMetric(embedding_provider="local", references=FACTS, aggregation=aggregation, name="list")
    result = evaluate_sync(_cases(), [via_set, via_list])
    for case, output in zip(result.test_results, OUTPUTS):
        by_set, by_list = case.metrics
        if not output.strip():
            assert by_set.score == 0.0 and by_list.score == 0.0
            continue
        raw = cosine(output, FACTS)
        sims = np.clip(raw, 0.0, 1.0)
        expected = sims.max() if aggregation == "max" else sims.mean()
        assert abs(by_set.score - expected) <= 1e-6
        assert abs(by_set.score - by_list.score) <= 1e-6 and by_set.success == by_list.success
        top = by_set.evaluation_log["top_similarities"]
        assert [t["reference"] for t in top] == [int(i) for i in np.argsort(-raw, kind="stable")[: len(top)]]
        assert by_set.evaluation_log["reference_count"] == len(FACTS)
        assert by_set.evaluation_log["reference_set"] == "facts"
    assert result.reference_sets[0].count == len(FACTS) and result.reference_sets[0].recall_at_1 == 1.0


def test_hnsw_recall_is_measured_against_exact_search() -> None:
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((5000, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[:300] + 0.05 * rng.standard_normal((300, 32)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    exact = np.argmax(queries @ vectors.T, axis=1)
    weak = ReferenceSearch(vectors, SearchConfig(kind="hnsw", hnsw_m=4, ef_construction=8, ef_search=1))
    strong = ReferenceSearch(vectors, SearchConfig(kind="hnsw", hnsw_m=32, ef_construction=200, ef_search=256))
    recalls = []
    for search in (weak, strong):
        recall = search.measure_recall(queries, sample=300)
        _, found = search.top_k(queries, 1)
        assert recall.recall_at_1 == pytest.approx(float(np.mean(found[:, 0] == exact)))
        recalls.append(recall.recall_at_1)
    assert recalls[1] >= 0.99
    assert recalls[0] < recalls[1]
    flat = ReferenceSearch(vectors)
    _, found = flat.top_k(queries, 1)
    assert np.array_equal(found[:, 0], exact)


def test_clamped_mean_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((1000, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[:5]
    expected = np.clip(queries @ vectors.T, 0, 1).mean(axis=1)
    assert np.allclose(ReferenceSearch(vectors).clamped_mean(queries), expected, atol=1e-6)


def test_search_persists_and_reloads(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((200, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    search = ReferenceSearch(vectors, SearchConfig(kind="hnsw"))
    path = tmp_path / "s.faiss"
    search.save(path)
    loaded = ReferenceSearch.load(path, vectors, SearchConfig(kind="hnsw"))
    assert loaded is not None
    assert np.array_equal(loaded.top_k(vectors[:10], 3)[1], search.top_k(vectors[:10], 3)[1])
    assert ReferenceSearch.load(path, vectors[:100], SearchConfig(kind="hnsw")) is None  # other size: rebuild
    path.write_bytes(b"garbage")
    assert ReferenceSearch.load(path, vectors, SearchConfig(kind="hnsw")) is None


@pytest.mark.parametrize("m", [5, 64])  # FAISS scores fewer than 20 queries without BLAS, more with it
def test_flat_search_answers_as_index_flat_ip_from_its_mapped_vectors(tmp_path: Path, m: int) -> None:
    """A flat search keeps no FAISS copy of the set: it persists the vectors as ``.npy`` and a worker maps them
    read-only (no copy in its memory); its answers equal ``IndexFlatIP.search``'s bit for bit."""
    from evaltasks.index._blas import faiss

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((3000, 48)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = np.ascontiguousarray(vectors[:m] + 0.05 * rng.standard_normal((m, 48)).astype(np.float32))
    exact = faiss.IndexFlatIP(48)
    exact.add(vectors)
    want = exact.search(queries, 10)
    search = ReferenceSearch(vectors, SearchConfig(kind="flat"))
    assert search.index is None and np.shares_memory(search.vectors, vectors)  # no copy of the set
    path = tmp_path / "s.faiss"
    search.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.npy", "s.sha256.json"]
    for config in (SearchConfig(kind="flat"), SearchConfig()):  # a worker without the set's resolved config
        loaded = ReferenceSearch.load(path, None, config)
        assert loaded is not None and loaded.config.kind == "flat" and len(loaded) == 3000
        assert not loaded.vectors.flags.writeable and not loaded.vectors.flags.owndata  # the read-only map
        for got in (search.top_k(queries, 10), loaded.top_k(queries, 10)):
            assert np.array_equal(got[1], want[1]) and np.array_equal(got[0], want[0])
    assert ReferenceSearch.load(path, vectors[:100], SearchConfig(kind="flat")) is None  # other size: rebuild


_WORKER_SEARCH = """
import json, sys
from pathlib import Path
import numpy as np
from evaltasks.index.search import SearchConfig, get_search

def anonymous_kib():
    # the process's own memory: anonymous pages (mapped files' pages are page cache, shared and droppable)
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1])

queries = np.load(sys.argv[2])
before = anonymous_kib()
search = get_search(sys.argv[1], sys.argv[3], SearchConfig(**json.loads(sys.argv[4])))
sims, rows = search.top_k(queries, 10)
print(json.dumps({"added_kib": anonymous_kib() - before, "rows": rows.tolist()}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [{"kind": "flat"}, {"kind": "ivf"}, {"kind": "ivf", "ivf_sq8": True}],
    ids=["flat", "ivf-flat", "ivf-sq8"],
)
def test_a_worker_searching_a_persisted_set_does_not_copy_it(tmp_path: Path, options: dict) -> None:
    """A worker process (a fresh interpreter, as a Dask or Ray worker) loads a persisted search of
    100,000 × 384 vectors (146 MiB) and searches it: its own (anonymous) memory grows by far less than the
    set, because it reads the vectors through a read-only map of ``<key>.npy`` and IVF's lists (IVF-Flat's
    are a copy of the vectors, IVF-SQ8's a quarter of them) through FAISS's read-only map of the index file
    (pages shared in the page cache). Before, a flat worker read FAISS's copy and reconstructed another one,
    an IVF-Flat worker read its lists and reconstructed the vectors from them (+2 × the set each), an IVF-SQ8
    worker read its codes (+0.25 × the set). Its results equal the same search in this process."""
    from evaltasks.index.search import build_search

    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((100_000, 384), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    np.save(tmp_path / "q.npy", vectors[:64])
    config = SearchConfig(**options)
    search = build_search(f"k-{config.resolve(len(vectors)).label()}", vectors, config, tmp_path)
    expected = search.top_k(vectors[:64], 10)[1]
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            _WORKER_SEARCH,
            f"k-{search.config.label()}",
            str(tmp_path / "q.npy"),
            str(tmp_path),
            json.dumps(options),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr
    got = json.loads(child.stdout.splitlines()[-1])
    assert np.array_equal(np.array(got["rows"]), expected)
    set_kib = vectors.nbytes // 1024
    assert got["added_kib"] < set_kib // 10, (got["added_kib"], set_kib)


@pytest.mark.parametrize("fmt", ["txt", "csv", "jsonl", "json", "yaml"])
def test_set_file_formats(tmp_path: Path, fmt: str) -> None:
    if fmt == "txt":
        (tmp_path / "s.txt").write_text("\n".join(FACTS[:3]) + "\n\n" + FACTS[0] + "\n", encoding="utf-8")
        spec: object = "s.txt"
    elif fmt == "csv":
        (tmp_path / "s.csv").write_text(
            "id,answer\n" + "\n".join(f'{i},"{t}"' for i, t in enumerate(FACTS[:3])), encoding="utf-8"
        )
        spec = {"path": "s.csv", "column": "answer"}
    elif fmt == "jsonl":
        (tmp_path / "s.jsonl").write_text("\n".join(json.dumps({"a": t}) for t in FACTS[:3]), encoding="utf-8")
        spec = {"path": "s.jsonl", "column": "a"}
    elif fmt == "json":
        (tmp_path / "s.json").write_text(json.dumps(FACTS[:3]), encoding="utf-8")
        spec = "s.json"
    else:
        (tmp_path / "s.yaml").write_text("\n".join(f"- {t}" for t in FACTS[:3]), encoding="utf-8")
        spec = "s.yaml"
    loaded = load_reference_set("s", spec, tmp_path, "suite.yaml")
    assert loaded.texts == tuple(FACTS[:3])  # stripped, blank lines skipped, duplicates kept once


def _load_error(directory: Path, rest: str) -> str:
    """The ConfigError message of loading ``directory/suite.yaml``: suite ``s`` over a one-case ``d.jsonl``, its
    file going on with ``rest`` (reference sets and metrics)."""
    (directory / "d.jsonl").write_text(json.dumps({"actual_output": "x"}) + "\n", encoding="utf-8")
    (directory / "suite.yaml").write_text("name: s\ndataset: {path: d.jsonl}\n" + rest, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_suite(directory / "suite.yaml")
    return str(info.value)


def test_suite_reference_set_errors(tmp_path: Path) -> None:
    text = _load_error(
        tmp_path,
        "reference_sets: {facts: missing.txt, bad: {texts: ['a'], search: annoy}}\n"
        "metrics:\n  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: fact}\n",
    )
    assert "missing.txt" in text and "not found" in text
    assert "reference_sets.bad" in text and "field 'search' must be one of" in text
    assert "metrics[0]" in text and "unknown reference set 'fact'" in text


def test_constructor_rules() -> None:
    with pytest.raises(ValueError, match="either references or reference_set"):
        ReferenceMatchMetric(references=["a"], reference_set=ReferenceSet("s", ("b",)))
    with pytest.raises(ValueError, match="empty"):
        ReferenceSet("s", ())
    with pytest.raises(ValueError, match="search must be one of"):
        SearchConfig(kind="ivf-magic")


def test_cli_suite_with_sets_and_index_commands(
    tmp_path: Path, cosine, prefect_api_url: str, capsys, monkeypatch
) -> None:
    """A real CLI run with two sets (flat and HNSW), then `index info/build/prune` on its index (in this process:
    ``evaltasks.cli.main``, with the model this process already loaded)."""
    from evaltasks import cli as cli_module

    (tmp_path / "facts.txt").write_text("\n".join(FACTS), encoding="utf-8")
    (tmp_path / "d.jsonl").write_text(
        "\n".join(json.dumps({"actual_output": o}) for o in OUTPUTS[:3]), encoding="utf-8"
    )
    (tmp_path / "suite.yaml").write_text(
        "name: sets\ndataset: {path: d.jsonl}\n"
        "reference_sets: {facts: facts.txt, approx: {path: facts.txt, search: hnsw}}\n"
        "metrics:\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: facts, name: exact}\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: approx, name: approx}\n"
        "gate: {min_pass_rate: 0}\n",
        encoding="utf-8",
    )
    env = {**__import__("os").environ, "PREFECT_HOME": str(tmp_path / "ph"), "PREFECT_API_URL": prefect_api_url}
    run = run_cli("run", "suite.yaml", "--index-dir", "idx", "--quiet", cwd=tmp_path, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    results = json.loads((tmp_path / "eval-results" / "sets" / "results.json").read_text())  # per suite
    assert {s["search"] for s in results["reference_sets"]} == {"flat", "hnsw-m16-efc100"}
    assert results["summary"]["embeddings"]["references_computed"] == len(FACTS)
    for case, output in zip(results["cases"], OUTPUTS):
        expected = float(np.clip(cosine(output, FACTS), 0, 1).max())
        for metric in case["metrics"]:
            assert abs(metric["score"] - expected) <= 1e-6
    assert {p.name.split("-", 1)[1] for p in (tmp_path / "idx" / "sets").iterdir()} == {
        "flat.npy",
        "flat.sha256.json",
        "hnsw-m16-efc100.faiss",
        "hnsw-m16-efc100.npy",
        "hnsw-m16-efc100.sha256.json",
    }  # a flat search is its vectors only; every kind keeps them beside its
    # index (what a worker maps), and their checksums (what `index verify` checks)

    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert cli_module.main(["index", "info", "--index-dir", "idx"]) == 0
    # the run's 3 outputs are stored beside the references (a text is a text)
    assert f"{len(FACTS) + 3} vectors × 384 dims" in capsys.readouterr().out
    other = tmp_path / "other.yaml"
    other.write_text(
        "name: other\ndataset: {path: d.jsonl}\nmetrics:\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, references: ['"
        + FACTS[0]
        + "', 'New text.']}\n",
        encoding="utf-8",
    )
    assert cli_module.main(["index", "build", "other.yaml", "--index-dir", "idx"]) == 0
    assert "1 references embedded, 1 already in the index" in capsys.readouterr().out
    sets_before = sorted(p.name for p in (tmp_path / "idx" / "sets").iterdir())
    assert cli_module.main(["index", "prune", "other.yaml", "--dry-run", "--index-dir", "idx"]) == 0
    dry = capsys.readouterr().out.splitlines()  # what the prune below drops, and nothing dropped yet
    stored = len(FACTS) + 3 + 1
    assert any(
        line.endswith(
            f": would drop {len(FACTS) - 1 + 3} of {stored} vectors (kept: 2, the texts the suites reference)"
        )
        for line in dry
    ), dry
    assert sum(line.startswith("would drop the unused reference-set search ") for line in dry) == 2, dry
    assert dry[-1] == "dry run: nothing was dropped"
    assert json.loads(next((tmp_path / "idx").glob("*/meta.json")).read_text())["count"] == stored
    assert sorted(p.name for p in (tmp_path / "idx" / "sets").iterdir()) == sets_before
    assert cli_module.main(["index", "prune", "other.yaml", "--index-dir", "idx"]) == 0
    assert f"dropped {len(FACTS) - 1 + 3} vectors" in capsys.readouterr().out  # outputs too: no suite keeps them
    assert not list((tmp_path / "idx" / "sets").iterdir())  # no remaining suite searches a set
    meta = json.loads(next((tmp_path / "idx").glob("*/meta.json")).read_text())
    assert meta["count"] == 2


def test_reference_set_files_follow_the_suite_rules_for_yaml_and_encoding(tmp_path: Path) -> None:
    """YAML reference sets reject tags and duplicate keys with a line; UTF-16 files are named as such."""
    from evaltasks.errors import DatasetError
    from evaltasks.inputs.reference_sets import load_reference_set

    (tmp_path / "tagged.yaml").write_text("- ok\n- !!python/object/apply:os.system [echo]\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="line 2") as info:
        load_reference_set("s", "tagged.yaml", tmp_path, "suite.yaml")
    assert "tagged.yaml" in str(info.value)
    (tmp_path / "wide.txt").write_bytes("Paris\n".encode("utf-16"))
    with pytest.raises(DatasetError, match="UTF-16"):
        load_reference_set("s", "wide.txt", tmp_path, "suite.yaml")


def _clustered(n: int, d: int, clusters: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors around ``clusters`` Gaussian centres, and 500 queries near stored vectors (seeded)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d)).astype(np.float32)
    vectors = centres[rng.integers(0, clusters, n)] + 0.5 * rng.standard_normal((n, d)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[rng.choice(n, 500, replace=False)] + 0.15 * rng.standard_normal((500, d)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return vectors, queries


@pytest.fixture(scope="module")
def clustered() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """200,000 × 64 clustered unit vectors, 500 queries, and the exact top 10 of each query (numpy)."""
    vectors, queries = _clustered(200_000, 64, 2000, seed=11)
    sims = queries @ vectors.T
    top = _exact_top(sims, 10)
    return vectors, queries, top, np.take_along_axis(sims, top, axis=1)


def _exact_top(sims: np.ndarray, k: int) -> np.ndarray:
    """Each row's ``k`` highest, highest first, ties by lower column: what ``np.argsort(-sims, kind="stable")``
    gives in its first ``k`` columns, without sorting whole rows (a 500 × 200,000 sort took 9.5 s of CPU, this 2.1 s).
    Every column at or above the row's ``k``-th highest value is a candidate, so ties at the boundary are kept."""
    kth = -np.partition(-sims, k - 1, axis=1)[:, k - 1]
    top = np.empty((len(sims), k), dtype=np.int64)
    for row, (values, bound) in enumerate(zip(sims, kth)):
        candidates = np.flatnonzero(values >= bound)
        top[row] = candidates[np.lexsort((candidates, -values[candidates]))[:k]]
    return top


@pytest.mark.slow
@pytest.mark.parametrize("pq", [None, 8])
def test_ivf_recall_at_default_nprobe_on_clustered_data(clustered, pq: int | None) -> None:
    """IVF-Flat and IVF-PQ (8-byte codes, re-ranked) over 200,000 × 64 at the default nprobe: recall@10 ≥ 0.95
    against exact search, measured the same by ``measure_recall``; where the top 1 is the exact neighbour, its
    score is the exact score."""
    vectors, queries, exact_top, exact_sims = clustered
    search = ReferenceSearch(vectors, SearchConfig(kind="ivf", ivf_pq=pq))
    assert search.config.nlist == round(4 * np.sqrt(len(vectors))) and search.config.nprobe == 32
    assert search.config.label() == f"ivf{search.config.nlist}" + (f"-pq{pq}" if pq else "")
    assert isinstance(faiss_ivf(search), faiss_ivf_type(pq))
    sims, found = search.top_k(queries, 10)
    recall_10 = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found.tolist(), exact_top.tolist())]))
    assert recall_10 >= 0.95
    same = found[:, 0] == exact_top[:, 0]
    assert same.mean() >= 0.95
    assert np.allclose(sims[same, 0], exact_sims[same, 0], atol=1e-5)
    measured = search.measure_recall(queries, sample=500)
    assert measured.recall_at_1 == pytest.approx(float(same.mean()))
    assert measured.recall_at_10 == pytest.approx(recall_10)


@pytest.mark.slow
def test_ivf_sq8_recall_at_default_nprobe_and_a_chunked_build_equals_a_one_shot_one(
    clustered, tmp_path: Path, monkeypatch
) -> None:
    """IVF-SQ8 (8-bit codes, ``ivf_sq8: true``) over 200,000 × 64 at the default nprobe: recall@10 ≥ 0.95 and
    the top 1's score exact; built from memory-mapped vectors in chunks of 65,536 it answers exactly as one
    ``add`` of every vector does, and so do chunks of 7,000 (a chunk size that does not divide n)."""
    import evaltasks.index.search as reference_search
    from evaltasks.index._blas import faiss

    vectors, queries, exact_top, exact_sims = clustered
    config = SearchConfig(kind="ivf", ivf_sq8=True)
    np.save(tmp_path / "v.npy", vectors)
    mapped = np.load(tmp_path / "v.npy", mmap_mode="r")
    search = ReferenceSearch(mapped, config)
    assert search.config.label() == f"ivf{search.config.nlist}-sq8" and search.config.factory().endswith(",SQ8")
    assert isinstance(faiss_ivf(search), faiss.IndexIVFScalarQuantizer)
    assert search.config.nprobe == 32
    sims, found = search.top_k(queries, 10)
    recall_10 = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found.tolist(), exact_top.tolist())]))
    assert recall_10 >= 0.95
    same = found[:, 0] == exact_top[:, 0]
    assert same.mean() >= 0.95 and np.allclose(sims[same, 0], exact_sims[same, 0], atol=1e-5)
    assert search.measure_recall(queries, sample=500).recall_at_10 == pytest.approx(recall_10)

    one_shot = reference_search._train_ivf(vectors, search.config)
    one_shot.add(vectors)
    faiss.extract_index_ivf(one_shot).nprobe = search.config.nprobe
    _, expected = ReferenceSearch(vectors, search.config, one_shot).top_k(queries, 10)
    assert np.array_equal(found, expected)
    monkeypatch.setattr(reference_search, "_ADD_CHUNK", 7000)
    assert np.array_equal(ReferenceSearch(vectors, config).top_k(queries, 10)[1], expected)


def test_default_nlist_is_capped_for_ten_million_vectors() -> None:
    """About 4·√n lists up to 4,096 (10^6: 4,000 as before), so 10^7 vectors train and assign in minutes."""
    assert SearchConfig(kind="ivf").resolve(1_000_000).nlist == 4000
    assert SearchConfig(kind="ivf").resolve(10_000_000).nlist == 4096
    assert SearchConfig(kind="ivf", nlist=12_000).resolve(10_000_000).nlist == 12_000


def faiss_ivf(search: ReferenceSearch):  # noqa: ANN201 - a FAISS object
    from evaltasks.index._blas import faiss

    return faiss.downcast_index(search.index)


def faiss_ivf_type(pq: int | None) -> type:
    from evaltasks.index._blas import faiss

    return faiss.IndexIVFPQ if pq else faiss.IndexIVFFlat


@pytest.mark.slow
def test_auto_is_flat_up_to_the_threshold_and_ivf_above() -> None:
    config = SearchConfig(search_auto_above=1000)
    assert SearchConfig().kind == "auto" and SearchConfig().search_auto_above == 1_000_000
    assert config.resolve(1000).kind == "flat" and config.resolve(1001).kind == "ivf"
    vectors, _ = _clustered(3000, 16, 50, seed=2)
    assert ReferenceSearch(vectors[:1000], config).config.label() == "flat"
    above = ReferenceSearch(vectors, config)
    assert above.config.kind == "ivf" and above.config.nlist == 3000 // 39  # at most n / 39 lists
    from evaltasks.index._blas import faiss

    assert isinstance(faiss_ivf(above), faiss.IndexIVFScalarQuantizer)  # auto's IVF stores SQ8 codes
    assert isinstance(faiss_ivf(ReferenceSearch(vectors, replace(config, ivf_sq8=False))), faiss_ivf_type(None))
    assert isinstance(faiss_ivf(ReferenceSearch(vectors, replace(config, ivf_pq=8))), faiss_ivf_type(8))
    assert SearchConfig(kind="ivf").resolve(3000).ivf_sq8 is False  # an explicit `search: ivf` stays IVF-Flat
    texts = tuple(f"text {i}" for i in range(1001))
    assert ReferenceSet("s", texts[:1000], config).search.label() == "flat"
    assert ReferenceSet("s", texts, config).search.label() == "ivf25-sq8"  # 4·√1001 = 127 lists, at most 1001 / 39


@pytest.mark.slow
@pytest.mark.parametrize(
    "config",
    [
        SearchConfig(kind="ivf"),
        SearchConfig(kind="ivf", ivf_pq=8, nprobe=4),
        SearchConfig(kind="ivf", ivf_quantizer="hnsw", nlist=64),
        SearchConfig(kind="ivf", ivf_sq8=True),
    ],
)
def test_ivf_persists_and_reloads(tmp_path: Path, config: SearchConfig) -> None:
    """A saved IVF index reloads with the set's vectors and, in a worker, from its files alone: same answers."""
    vectors, queries = _clustered(5000, 32, 40, seed=5)
    search = ReferenceSearch(vectors, config)
    path = tmp_path / "s.faiss"
    search.save(path)
    expected = search.top_k(queries, 10)
    for given in (vectors, None):
        loaded = ReferenceSearch.load(path, given, config)
        assert loaded is not None and loaded.config == search.config
        sims, rows = loaded.top_k(queries, 10)
        assert np.array_equal(rows, expected[1]) and np.allclose(sims, expected[0], atol=1e-6)


def test_bad_search_settings_name_the_suite_file_and_field(tmp_path: Path) -> None:
    text = _load_error(
        tmp_path,
        "reference_sets:\n  a: {texts: ['x'], search: ivf, nprobe: 0}\n  b: {texts: ['x'], nprobes: 4}\n"
        "  c: {texts: ['x'], ivf_quantizer: graph}\n"
        "  d: {texts: ['x'], ivf_sq8: 1}\n  e: {texts: ['x'], ivf_sq8: true, ivf_pq: 48}\n"
        "metrics:\n  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: a}\n",
    )
    assert "suite.yaml, reference_sets.a: field 'nprobe' must be a positive integer, got 0" in text
    assert "suite.yaml, reference_sets.b: field 'nprobes' is not a reference-set option" in text
    assert "suite.yaml, reference_sets.c: field 'ivf_quantizer' must be one of ['flat', 'hnsw']" in text
    assert "suite.yaml, reference_sets.d: field 'ivf_sq8' must be true or false, got 1" in text
    assert "suite.yaml, reference_sets.e: field 'ivf_sq8' cannot be combined with ivf_pq (48): choose one code" in text
    metric = ReferenceMatchMetric(
        embedding_provider="local",
        name="m",
        reference_set=ReferenceSet("s", tuple(FACTS), SearchConfig(kind="ivf", ivf_pq=7)),
    )
    with pytest.raises(ConfigError, match="field 'ivf_pq' must divide the embedding dimensions \\(384\\), got 7"):
        evaluate_sync(_cases(), [metric])


def test_cli_suite_with_ivf_writes_recall_and_rejects_bad_codes(
    tmp_path: Path, cosine, prefect_api_url: str, monkeypatch
) -> None:
    """A real CLI run searching a set with IVF-Flat and IVF-PQ writes recall@1 and recall@10 per set into
    results.json (one list, every list probed: exact); `index prune` drops both searches, the PQ one's vectors
    too; PQ codes that do not divide the model's 384 dimensions are a suite mistake: exit 2, the field named, no
    traceback."""
    from evaltasks import cli as cli_module

    (tmp_path / "facts.txt").write_text("\n".join(FACTS), encoding="utf-8")
    (tmp_path / "d.jsonl").write_text(
        "\n".join(json.dumps({"actual_output": o}) for o in OUTPUTS[:3]), encoding="utf-8"
    )
    suite = (
        "name: ivf\ndataset: {path: d.jsonl}\n"
        "reference_sets: {plain: {path: facts.txt, search: ivf}, codes: {path: facts.txt, search: ivf, ivf_pq: %d},\n"
        "                 sq8: {path: facts.txt, search: ivf, ivf_sq8: true}}\n"
        "metrics:\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: plain, name: plain}\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: codes, name: codes}\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: sq8, name: sq8}\n"
        "gate: {min_pass_rate: 0}\n"
    )
    (tmp_path / "suite.yaml").write_text(suite % 8, encoding="utf-8")
    env = {**__import__("os").environ, "PREFECT_HOME": str(tmp_path / "ph"), "PREFECT_API_URL": prefect_api_url}
    run = run_cli("run", "suite.yaml", "--index-dir", "idx", "--quiet", cwd=tmp_path, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    results = json.loads((tmp_path / "eval-results" / "ivf" / "results.json").read_text())
    sets = {s["name"]: s for s in results["reference_sets"]}
    assert sets["plain"]["search"] == "ivf1" and sets["codes"]["search"] == "ivf1-pq8"
    assert sets["sq8"]["search"] == "ivf1-sq8"
    for info in sets.values():
        assert info["recall_at_1"] == 1.0 and info["recall_at_10"] == 1.0
    for case, output in zip(results["cases"], OUTPUTS):
        expected = float(np.clip(cosine(output, FACTS), 0, 1).max())
        for metric in case["metrics"]:
            assert abs(metric["score"] - expected) <= 1e-6
    assert {p.name.split("-", 1)[1] for p in (tmp_path / "idx" / "sets").iterdir()} == {
        "ivf1.faiss",
        "ivf1.npy",
        "ivf1-pq8.faiss",
        "ivf1-pq8.npy",
        "ivf1-sq8.faiss",
        "ivf1-sq8.npy",
        "ivf1.sha256.json",
        "ivf1-pq8.sha256.json",
        "ivf1-sq8.sha256.json",
    }
    (tmp_path / "other.yaml").write_text(
        "name: other\ndataset: {path: d.jsonl}\nmetrics:\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, references: ['" + FACTS[0] + "']}\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    assert cli_module.main(["index", "prune", "other.yaml", "--index-dir", "idx"]) == 0
    assert not list((tmp_path / "idx" / "sets").iterdir())

    (tmp_path / "suite.yaml").write_text(suite % 7, encoding="utf-8")
    run = run_cli("run", "suite.yaml", "--quiet", cwd=tmp_path, env=env, timeout=300)
    assert run.returncode == 2, run.stderr
    assert "field 'ivf_pq' must divide the embedding dimensions (384), got 7" in run.stderr
    assert "reference set 'codes'" in run.stderr and "Traceback" not in run.stderr


def _unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, d), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


class _Prestored:
    """Stores given vectors under another provider's namespace (``"text {i}"`` gets row i): what a run finds in
    the index when someone embedded the set before (``evaltasks index build``)."""

    def __init__(self, namespace: str, vectors: np.ndarray, like: object = None) -> None:
        self.namespace, self.vectors = namespace, vectors
        self.provider = getattr(like, "provider", "test")
        self.model_name = getattr(like, "model_name", "prestored")
        self.fingerprint = getattr(like, "fingerprint", "0")

    def embed_batch(self, texts):
        from evaltasks.embeddings.base import EmbeddingBatch

        return EmbeddingBatch.free(self.vectors[[int(t.rsplit(" ", 1)[1]) for t in texts]])


def test_write_vectors_reads_a_set_from_the_segments_in_its_order(tmp_path: Path) -> None:
    """``ReferenceIndex.write_vectors``: the stored vectors of texts, in the texts' order, across segments, in
    memory or written to a ``.npy`` and mapped read-only from it; a text not stored is a KeyError."""
    from evaltasks.index import ReferenceIndex

    vectors = _unit_rows(5000, 16, seed=1)
    provider = _Prestored("test/prestored", vectors)
    index = ReferenceIndex(tmp_path / "idx")
    for start in range(0, 5000, 1000):  # five segments
        index.get_or_embed(provider, [f"text {i}" for i in range(start, start + 1000)])
    order = np.random.default_rng(2).permutation(5000)
    texts = [f"text {i}" for i in order]
    assert np.array_equal(index.write_vectors(provider, texts), vectors[order])
    mapped = index.write_vectors(provider, texts, tmp_path / "sets" / "s.npy", chunk=777)
    assert isinstance(mapped, np.memmap) and not mapped.flags.writeable
    assert np.array_equal(mapped, vectors[order])
    assert np.array_equal(np.load(tmp_path / "sets" / "s.npy"), vectors[order])
    assert not [p for p in (tmp_path / "sets").iterdir() if p.name != "s.npy"]  # no temporary left
    with pytest.raises(KeyError, match="1 of 3 texts are not in the reference index"):
        index.write_vectors(provider, ["text 1", "text 2", "text 99999"])
    with pytest.raises(ValueError, match="unique"):
        index.write_vectors(provider, ["text 1", "text 1"])


def test_a_sets_texts_are_index_only_unless_a_case_uses_them() -> None:
    """``EmbeddingNeed.index_only``: a set's texts, less those a case also uses as a reference or an output,
    whichever metric registers first."""
    from evaltasks.engine.evaluate import collect_embedding_needs

    reference_set = ReferenceSet("facts", tuple(FACTS))
    cases = [EvalTestCase(actual_output=FACTS[1], references=[FACTS[0]]), EvalTestCase(actual_output="other")]
    by_set = ReferenceMatchMetric(embedding_provider="local", reference_set=reference_set, name="set")
    per_case = ReferenceMatchMetric(embedding_provider="local", name="per_case")
    for metrics in ([by_set, per_case], [per_case, by_set]):
        (need,) = collect_embedding_needs(cases, metrics).values()
        assert need.index_only == set(FACTS[2:])
        assert set(need.references) == set(FACTS)
    (need,) = collect_embedding_needs(cases, [by_set]).values()
    assert need.index_only == set(FACTS) - {FACTS[1]}  # FACTS[1] is an output: its vector is in the table


SET_SIZE = 200_000  # 293 MiB of float32 vectors at 384 dimensions


def test_a_flow_run_reads_its_reference_set_from_the_index_not_through_task_results(
    tmp_path: Path, prefect_harness, monkeypatch
) -> None:
    """A reference set's vectors stay out of the flow process's memory: its texts are index-only, embedded (here:
    found) in the index by ``embed-references`` task runs that return no vectors, and the search reads them from
    the index's mapped segments into ``<index>/sets/<key>.npy`` a chunk at a time. Measured with tracemalloc
    (numpy's buffers are traced; mapped files are not process memory): the run's peak stays well under the
    set's vectors (gathering them, as before, peaked at 3.3 times the set). Scores equal numpy's exact
    search over the stored vectors; a set text a case also uses per case is scored from the run's table."""
    import tracemalloc

    from evaltasks.embeddings import get_provider
    from evaltasks.flows.evaluate_suite import evaluate_suite
    from evaltasks.index import ReferenceIndex
    from evaltasks.index import search as search_module

    # a search is registered per process by the set's content and namespace: the synthetic vectors of the
    # other test over the same texts must not be found here
    monkeypatch.setattr(search_module, "_REGISTRY", {})
    local = get_provider("local")
    vectors = _unit_rows(SET_SIZE, 384, seed=5)
    texts = [f"text {i}" for i in range(SET_SIZE)]
    ReferenceIndex(tmp_path / "idx").get_or_embed(_Prestored(local.namespace, vectors, local), texts)
    outputs = OUTPUTS[:3]
    out_vectors = local.embed_batch(outputs).vectors
    sims = np.clip(out_vectors @ vectors.T, 0.0, 1.0)
    expected_max, expected_first = sims.max(axis=1), sims[:, 0]
    del sims, vectors
    (tmp_path / "set.txt").write_text("\n".join(texts), encoding="utf-8")
    del texts
    (tmp_path / "d.jsonl").write_text(
        "\n".join(json.dumps({"actual_output": o, "references": ["text 0"]}) for o in outputs), encoding="utf-8"
    )
    (tmp_path / "suite.yaml").write_text(
        "name: big-set\ndataset: {path: d.jsonl}\nreference_sets: {big: set.txt}\nmetrics:\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: big, name: by_set}\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, name: per_case}\n"
        "gate: {min_pass_rate: 0}\n",
        encoding="utf-8",
    )
    tracemalloc.start()
    try:
        state = evaluate_suite(
            suite_path=str(tmp_path / "suite.yaml"),
            output_dir=str(tmp_path / "out"),
            index_dir=str(tmp_path / "idx"),
            return_state=True,
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert state.is_completed(), state
    set_bytes = SET_SIZE * 384 * 4
    # measured: 126 MiB (about 50 MiB of Prefect's own, then ~380 bytes per text: the texts, the plan's counts
    # and sets of them); gathering the vectors through task results peaked at 960 MiB (3.3 × the set)
    assert peak < 0.6 * set_bytes, f"peak {peak / 2**20:.0f} MiB for a set of {set_bytes / 2**20:.0f} MiB"
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert results["summary"]["embeddings"]["references_reused"] == SET_SIZE
    for case, by_set, first in zip(results["cases"], expected_max, expected_first):
        scores = {metric["name"]: metric["score"] for metric in case["metrics"]}
        assert abs(scores["by_set"] - by_set) <= 1e-6 and abs(scores["per_case"] - first) <= 1e-6
    (stored,) = (tmp_path / "idx" / "sets").glob("*-flat.npy")
    assert np.load(stored, mmap_mode="r").shape == (SET_SIZE, 384)


@pytest.mark.slow
def test_evaluate_sync_with_an_index_reads_a_big_set_from_it(tmp_path: Path, monkeypatch) -> None:
    """``evaluate_sync(..., index_dir=...)`` keeps a set's vectors out of memory as the flow does (tracemalloc:
    the call's peak stays well under the set's vectors); scores equal numpy's exact search."""
    import tracemalloc

    from evaltasks.embeddings import get_provider
    from evaltasks.index import ReferenceIndex
    from evaltasks.index import search as search_module

    monkeypatch.setattr(search_module, "_REGISTRY", {})  # as in the flow's test above
    local = get_provider("local")
    vectors = _unit_rows(SET_SIZE, 384, seed=6)
    texts = tuple(f"text {i}" for i in range(SET_SIZE))
    ReferenceIndex(tmp_path / "idx").get_or_embed(_Prestored(local.namespace, vectors, local), texts)
    outputs = OUTPUTS[:3]
    expected = np.clip(local.embed_batch(outputs).vectors @ vectors.T, 0.0, 1.0).max(axis=1)
    del vectors
    metric = ReferenceMatchMetric(embedding_provider="local", reference_set=ReferenceSet("big", texts), name="set")
    cases = [EvalTestCase(actual_output=o) for o in outputs]
    tracemalloc.start()
    try:
        result = evaluate_sync(cases, [metric], index_dir=tmp_path / "idx")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    set_bytes = SET_SIZE * 384 * 4
    assert peak < 0.6 * set_bytes, f"peak {peak / 2**20:.0f} MiB for a set of {set_bytes / 2**20:.0f} MiB"
    assert [abs(case.metrics[0].score - e) <= 1e-6 for case, e in zip(result.test_results, expected)] == [True] * 3
    assert result.summary.embeddings.references_reused == SET_SIZE


def test_a_damaged_search_file_is_found_by_verify_and_rebuilt(tmp_path: Path, capsys, monkeypatch) -> None:
    """A persisted search records its files' sha256; a `.npy` damaged in place (same size: a run's cheap checks
    pass and it would read wrong scores) is BROKEN in `index info` (exit 1, nothing removed) and removed by
    `index verify` (exit 1), after which the set's next build writes it again and verify is clean."""
    from evaltasks import cli as cli_module
    from evaltasks.index import search as search_module
    from evaltasks.index.search import build_search, check_searches

    monkeypatch.setattr(search_module, "_REGISTRY", {})
    vectors = _unit_rows(2000, 32, seed=8)
    sets = tmp_path / "idx" / "sets"
    build_search("k-flat", vectors, SearchConfig(kind="flat"), sets)
    build_search("k-ivf4-sq8", vectors, SearchConfig(kind="ivf", nlist=4, ivf_sq8=True), sets)
    assert [(e["key"], e["checked"], e["problems"]) for e in check_searches(sets)] == [
        ("k-flat", True, []),
        ("k-ivf4-sq8", True, []),
    ]
    assert cli_module.main(["index", "verify", "--index-dir", str(tmp_path / "idx")]) == 0
    damaged = sets / "k-ivf4-sq8.npy"
    size = damaged.stat().st_size
    with open(damaged, "r+b") as handle:  # rows shuffled in place: same size, same header
        data = np.load(damaged)
        handle.seek(size - data.nbytes)
        handle.write(np.ascontiguousarray(data[::-1]).tobytes())
    assert damaged.stat().st_size == size
    capsys.readouterr()
    assert cli_module.main(["index", "info", "--index-dir", str(tmp_path / "idx")]) == 1
    out, err = capsys.readouterr()
    assert "BROKEN search k-ivf4-sq8: k-ivf4-sq8.npy does not match its recorded sha256" in out
    assert "1 of 2 reference-set searches are broken" in err and damaged.exists()
    assert cli_module.main(["index", "verify", "--index-dir", str(tmp_path / "idx")]) == 1
    assert "removed: the next run that uses the set rebuilds it" in capsys.readouterr().out
    assert sorted(p.name for p in sets.iterdir()) == ["k-flat.npy", "k-flat.sha256.json"]
    monkeypatch.setattr(search_module, "_REGISTRY", {})
    rebuilt = build_search("k-ivf4-sq8", vectors, SearchConfig(kind="ivf", nlist=4, ivf_sq8=True), sets)
    assert np.array_equal(np.load(damaged), vectors) and len(rebuilt) == 2000
    assert cli_module.main(["index", "verify", "--index-dir", str(tmp_path / "idx")]) == 0


def test_an_index_file_without_its_vectors_gets_them_back(tmp_path: Path, monkeypatch) -> None:
    """An HNSW or IVF-Flat search whose `<key>.npy` is gone (an older version wrote none, or it was removed)
    loads from its FAISS file and writes the vectors beside it again, so workers map them; a search built in
    memory first (no directory) is written when a later build names one."""
    from evaltasks.index import search as search_module
    from evaltasks.index.search import build_search, check_searches

    vectors = _unit_rows(3000, 32, seed=9)
    sets = tmp_path / "sets"
    for key, config in (
        ("k-hnsw", SearchConfig(kind="hnsw", hnsw_m=8, ef_construction=40)),
        ("k-ivf8", SearchConfig(kind="ivf", nlist=8)),
    ):
        monkeypatch.setattr(search_module, "_REGISTRY", {})
        build_search(key, vectors, config, sets)
        (sets / f"{key}.npy").unlink()
        monkeypatch.setattr(search_module, "_REGISTRY", {})
        build_search(key, vectors, config, sets)
        assert np.array_equal(np.load(sets / f"{key}.npy"), vectors)
    assert all(e["checked"] and not e["problems"] for e in check_searches(sets))
    monkeypatch.setattr(search_module, "_REGISTRY", {})
    build_search("k-flat", vectors, SearchConfig(kind="flat"), None)
    build_search("k-flat", vectors, SearchConfig(kind="flat"), tmp_path / "later")
    assert np.array_equal(np.load(tmp_path / "later" / "k-flat.npy"), vectors)


def test_set_texts_pruned_by_another_process_are_embedded_again(tmp_path: Path) -> None:
    """Between a run's storing of a set and its search build, another process's `index prune` may drop some
    of the set's vectors: the build embeds those again (the run goes on), with the same vectors."""
    from evaltasks.index import ReferenceIndex
    from evaltasks.metrics.vector.reference_match import _write_set_vectors

    vectors = _unit_rows(500, 16, seed=10)
    provider = _Prestored("test/pruned", vectors)
    index = ReferenceIndex(tmp_path / "idx")
    texts = [f"text {i}" for i in range(500)]
    index.get_or_embed(provider, texts)
    assert index.prune({provider.namespace: texts[:100]}) == {provider.namespace: 400}
    got = _write_set_vectors(index, provider, texts, tmp_path / "sets" / "k.npy")
    assert np.array_equal(got, vectors) and not index.missing_texts(provider, texts)


# --- target recall: the query breadth widened on the run's own outputs ---------------------------------------


def _recall_at_10(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found.tolist(), exact.tolist())]))


def _raw_ivf_top_10(vectors: np.ndarray, queries: np.ndarray, nlist: int, nprobe: int) -> np.ndarray:
    """The top 10 of FAISS's own ``IndexIVFFlat`` trained as the product trains it, searched at ``nprobe``."""
    from evaltasks.index._blas import faiss
    from evaltasks.index.search import _train_ivf

    index = _train_ivf(vectors, SearchConfig(kind="ivf", nlist=nlist).resolve(len(vectors)))
    index.add(vectors)
    faiss.extract_index_ivf(index).nprobe = nprobe
    return index.search(queries, 10)[1]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_a_target_recall_doubles_the_query_options_until_the_outputs_reach_it(kind: str) -> None:
    """Uniform random vectors (no cluster structure: hard for every approximate index) searched from a breadth
    too narrow for them: with ``target_recall`` 0.9 the breadth doubles until recall@10 on the queries, against
    numpy's exact top 10, is at least 0.9, and the breadth before it was below (the smallest doubling that
    reaches it); without a target the breadth stays as set, below the target. Measuring changes nothing about
    the search: the breadth found is passed to ``top_k``."""
    vectors = _unit_rows(20_000, 32, seed=3)
    queries = _unit_rows(300, 32, seed=4)
    exact = np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :10]
    narrow = {"ivf": {"nlist": 128, "nprobe": 1}, "hnsw": {"hnsw_m": 4, "ef_construction": 16, "ef_search": 10}}[kind]
    option = "nprobe" if kind == "ivf" else "ef_search"

    search = ReferenceSearch(vectors, SearchConfig(kind=kind, **narrow))
    fixed = search.measure_recall(queries)
    assert fixed.recall_at_10 < 0.9 and getattr(fixed.query_config, option) == narrow[option]
    assert fixed.recall_at_10 == pytest.approx(_recall_at_10(search.top_k(queries, 10)[1], exact))

    targeted = search.measure_recall(queries, query_config=SearchConfig(kind=kind, target_recall=0.9, **narrow))
    widened = getattr(targeted.query_config, option)
    assert widened > narrow[option] and targeted.recall_at_10 >= 0.9 and not targeted.short_of_target()
    assert search.config == fixed.query_config  # the search itself is as built
    assert targeted.recall_at_10 == pytest.approx(
        _recall_at_10(search.top_k(queries, 10, targeted.query_config)[1], exact)
    )
    half = replace(targeted.query_config, target_recall=None, **{option: widened // 2})
    assert _recall_at_10(search.top_k(queries, 10, half)[1], exact) < 0.9
    assert np.array_equal(search.top_k(queries, 10)[1], search.top_k(queries, 10, fixed.query_config)[1])
    if kind == "ivf":  # a copy of the trained index, queried by FAISS itself at the widened nprobe, answers the same
        from evaltasks.index._blas import faiss

        copy = faiss.clone_index(search.index)
        faiss.extract_index_ivf(copy).nprobe = widened
        assert np.array_equal(search.top_k(queries, 10, targeted.query_config)[1], copy.search(queries, 10)[1])


@pytest.mark.slow
def test_a_target_out_of_reach_keeps_the_narrowest_best_query_options_and_auto_targets_095() -> None:
    """4-byte PQ codes whose top 10 by code is all that is re-ranked cannot reach recall@10 1.0 on random
    vectors, and past a few lists more lists find nothing more: widening stops after two doublings without gain
    and keeps the narrowest breadth of the best recall (a full scan would gain nothing); IVF-Flat, whose recall
    the lists limit, goes to nlist. ``auto`` picking IVF targets 0.95, an explicit kind none, flat never; nothing
    to measure on is no recall at all; a bad target is refused."""
    vectors = _unit_rows(8000, 16, seed=8)
    queries = _unit_rows(200, 16, seed=9)
    exact = np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :10]
    search = ReferenceSearch(vectors, SearchConfig(kind="ivf", ivf_pq=4, ivf_rerank=1, nlist=64, nprobe=1))
    by_nprobe = {
        n: _recall_at_10(search.top_k(queries, 10, replace(search.config, nprobe=n))[1], exact)
        for n in (1, 2, 4, 8, 16, 32, 64)
    }
    recall = search.measure_recall(queries, query_config=replace(search.config, target_recall=1.0))
    assert recall.short_of_target() and recall.recall_at_10 < 1.0
    best = max(by_nprobe.values())
    assert recall.recall_at_10 == pytest.approx(best)
    assert recall.query_config.nprobe == min(n for n, r in by_nprobe.items() if r == best)  # the narrowest of the best
    flat_ivf = ReferenceSearch(vectors, SearchConfig(kind="ivf", nlist=64, nprobe=1))
    exhaustive = flat_ivf.measure_recall(queries, query_config=replace(flat_ivf.config, target_recall=1.0))
    assert exhaustive.recall_at_10 == 1.0 and exhaustive.query_config.nprobe in (32, 64)

    assert SearchConfig(search_auto_above=10).resolve(11).target_recall == 0.95
    assert SearchConfig(search_auto_above=10, target_recall=0.99).resolve(11).target_recall == 0.99
    assert SearchConfig(kind="ivf").resolve(11).target_recall is None
    assert SearchConfig(search_auto_above=10, target_recall=0.99).resolve(10).target_recall is None  # flat: exact
    nothing = search.measure_recall(
        np.empty((0, 16), dtype=np.float32), query_config=replace(search.config, target_recall=1.0)
    )
    assert nothing.recall_at_10 is None and not nothing.short_of_target()
    for bad in (0, 1.5, True, "high"):
        with pytest.raises(ValueError, match="target_recall must be a number in \\(0, 1\\]"):
            SearchConfig(target_recall=bad)


def test_runs_sharing_a_registered_search_keep_their_own_query_options(tmp_path: Path, monkeypatch) -> None:
    """Two threads querying one registered search at different breadths at once (two runs, or two metrics of
    one run, in one process) each get what their own breadth gives: the breadth is per call, nothing shared
    changes, and a later ``get_search`` returns the search as built."""
    from concurrent.futures import ThreadPoolExecutor

    from evaltasks.index import search as search_module

    monkeypatch.setattr(search_module, "_REGISTRY", {})
    vectors = _unit_rows(20_000, 32, seed=6)
    queries = _unit_rows(200, 32, seed=7)
    built = search_module.build_search("k-ivf64", vectors, SearchConfig(kind="ivf", nlist=64, nprobe=1), tmp_path)
    narrow, wide = built.config, replace(built.config, nprobe=64)
    expected = {1: built.top_k(queries, 10, narrow)[1], 64: built.top_k(queries, 10, wide)[1]}
    assert not np.array_equal(expected[1], expected[64])

    def query(nprobe: int) -> bool:
        search = search_module.get_search("k-ivf64", tmp_path, replace(narrow, nprobe=nprobe))
        return all(
            np.array_equal(search.top_k(queries[:50], 10, replace(narrow, nprobe=nprobe))[1], expected[nprobe][:50])
            for _ in range(20)
        )

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(query, [1, 64] * 8))
    assert search_module.get_search("k-ivf64", tmp_path).config.nprobe == 1
    assert search_module.faiss.extract_index_ivf(built.index).nprobe == 1


def test_workers_search_with_the_query_options_the_run_measured(tmp_path: Path, prefect_harness, monkeypatch) -> None:
    """Flow runs over a set of 20,000 random vectors stored in the index, ``search: ivf`` with 64 lists. First
    ``nprobe: 1`` alone (threads): scores are FAISS's own at nprobe 1 (its persisted index read back and
    queried), several of them below numpy's exact max. Then the same suite with ``target_recall: 1.0`` beside a
    second metric on the same file without one, on worker processes (``processes:2``), cache on: the run widens
    nprobe on its outputs and every batch of the first metric, scored in processes that load the search from
    disk, searches with it — every case's max equals numpy's exact max (cached nprobe-1 scores are not
    reused: the breadth is part of the cache key) — while the second metric, sharing the same search, still
    gets nprobe 1's answers. results.json reports each breadth and target."""
    from evaltasks.embeddings import get_provider
    from evaltasks.index import ReferenceIndex
    from evaltasks.index import search as search_module
    from evaltasks.index._blas import faiss
    from flows.evaluate_suite import evaluate_suite, make_task_runner

    monkeypatch.setattr(search_module, "_REGISTRY", {})
    local = get_provider("local")
    size = 20_000
    vectors = _unit_rows(size, 384, seed=12)
    texts = [f"text {i}" for i in range(size)]
    ReferenceIndex(tmp_path / "idx").get_or_embed(_Prestored(local.namespace, vectors, local), texts)
    outputs = [
        f"Answer number {i}: the {c} is {v}."
        for i, (c, v) in enumerate(
            (c, v) for c in ("sky", "sea", "grass", "sun", "moon", "road") for v in ("blue", "green", "warm", "far")
        )
    ]
    out_vectors = local.embed_batch(outputs).vectors
    exact = np.clip(out_vectors @ vectors.T, 0.0, 1.0).max(axis=1)
    (tmp_path / "set.txt").write_text("\n".join(texts), encoding="utf-8")
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps({"actual_output": o}) for o in outputs), encoding="utf-8")
    narrow = "{path: set.txt, search: ivf, nlist: 64, nprobe: 1}"
    (tmp_path / "suite.yaml").write_text(
        f"name: widened\ndataset: {{path: d.jsonl}}\nreference_sets: {{big: {narrow}}}\n"
        "metrics:\n  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: big, name: by_set}\n"
        "gate: {min_pass_rate: 0}\n",
        encoding="utf-8",
    )

    def run(runner: str) -> dict:
        state = evaluate_suite.with_options(task_runner=make_task_runner(runner))(
            suite_path=str(tmp_path / "suite.yaml"),
            output_dir=str(tmp_path / "out"),
            index_dir=str(tmp_path / "idx"),
            batch_size=4,
            return_state=True,
        )
        assert state.is_completed(), state
        return json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))

    results = run("threads")
    (persisted,) = (tmp_path / "idx" / "sets").glob("*-ivf64.faiss")
    faiss_index = faiss.read_index(str(persisted))
    faiss.extract_index_ivf(faiss_index).nprobe = 1
    at_one = np.clip(faiss_index.search(out_vectors, 1)[0][:, 0], 0.0, 1.0)
    assert (np.abs(at_one - exact) > 1e-6).sum() >= 3  # nprobe 1 misses the best reference of these cases
    assert [c["metrics"][0]["score"] for c in results["cases"]] == pytest.approx(at_one.tolist(), abs=1e-6)
    assert results["reference_sets"][0]["nprobe"] == 1 and results["reference_sets"][0]["target_recall"] is None

    (tmp_path / "suite.yaml").write_text(
        "name: widened\ndataset: {path: d.jsonl}\n"
        f"reference_sets: {{big: {narrow[:-1]}, target_recall: 1.0}}, same: {narrow}}}\n"
        "metrics:\n  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: big, name: by_set}\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: same, name: narrow}\n"
        "gate: {min_pass_rate: 0}\n",
        encoding="utf-8",
    )
    results = run("processes:2")
    sets = {info["name"]: info for info in results["reference_sets"]}
    assert sets["big"]["search"] == "ivf64" and sets["big"]["target_recall"] == 1.0
    assert sets["big"]["recall_at_10"] == 1.0 and 1 < sets["big"]["nprobe"] <= 64 and sets["big"]["ef_search"] is None
    assert sets["same"]["nprobe"] == 1 and sets["same"]["target_recall"] is None and sets["same"]["recall_at_10"] < 1
    for case, best, narrow_best in zip(results["cases"], exact, at_one):
        scores = {metric["name"]: metric["score"] for metric in case["metrics"]}
        assert abs(scores["by_set"] - best) <= 1e-6 and abs(scores["narrow"] - narrow_best) <= 1e-6


@pytest.mark.slow
def test_a_search_short_of_its_target_is_reported(tmp_path: Path, monkeypatch) -> None:
    """``evaluate_sync`` over a set whose 4-byte PQ codes cannot reach recall@10 1.0 on random vectors: the
    result reports the breadth kept and the recall measured there, which the search gives at that breadth, and
    an ``IndexWarning`` says the target was missed (a CLI run puts it in the reports' warnings)."""
    from evaltasks.embeddings import get_provider
    from evaltasks.index import IndexWarning, ReferenceIndex
    from evaltasks.index import search as search_module

    monkeypatch.setattr(search_module, "_REGISTRY", {})
    local = get_provider("local")
    vectors = _unit_rows(12_000, 384, seed=14)
    texts = tuple(f"text {i}" for i in range(len(vectors)))
    ReferenceIndex(tmp_path / "idx").get_or_embed(_Prestored(local.namespace, vectors, local), texts)
    config = SearchConfig(kind="ivf", nlist=16, nprobe=2, ivf_pq=4, ivf_rerank=1, target_recall=1.0)
    metric = ReferenceMatchMetric(
        embedding_provider="local", reference_set=ReferenceSet("coarse", texts, config), name="set"
    )
    outputs = [f"Sentence {i} about {w}." for i, w in enumerate(["rain", "bread", "music", "trains"] * 6)]
    with pytest.warns(
        IndexWarning,
        match=r"reference set 'coarse': recall@10 0\.\d+ on the run's outputs is below "
        r"its target_recall 1\.0 \((even at the widest search,|wider searches "
        r"found no more than) nprobe \d+\); search: flat is exact",
    ):
        result = evaluate_sync([EvalTestCase(actual_output=o) for o in outputs], [metric], index_dir=tmp_path / "idx")
    (info,) = result.reference_sets
    assert 2 <= info.nprobe <= 16 and info.target_recall == 1.0 and info.recall_at_10 < 1.0
    queries = local.embed_batch(outputs).vectors
    exact = np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :10]
    search = search_module.get_search(metric.search_key)
    found = search.top_k(queries, 10, replace(search.config, nprobe=info.nprobe))[1]
    assert info.recall_at_10 == pytest.approx(_recall_at_10(found, exact))


def test_scoring_a_batch_directly_measures_on_its_outputs(monkeypatch) -> None:
    """``metric.score_batch(cases)`` with no vectors (the metric used on its own) widens to its set's target on
    the outputs it embeds, as a run does: its max scores are numpy's exact ones."""
    from evaltasks.embeddings import get_provider
    from evaltasks.index import search as search_module

    monkeypatch.setattr(search_module, "_REGISTRY", {})
    local = get_provider("local")
    texts = tuple(
        f"The {c} {v} {w}."
        for c in ("river", "train", "cat", "tower", "song", "cloud")
        for v in ("flows", "waits", "sleeps", "stands", "plays", "moves", "grows", "arrives")
        for w in ("today", "at night", "in spring", "slowly", "again", "alone")
    )  # 288
    outputs = [f"A {w} is {v}." for w in ("river", "cat", "song", "cloud") for v in ("quiet", "near", "old")]
    cases = [EvalTestCase(actual_output=o) for o in outputs]
    exact = np.clip(local.embed_batch(outputs).vectors @ local.embed_batch(list(texts)).vectors.T, 0, 1).max(axis=1)

    def scores(target: float | None) -> list[float]:
        config = SearchConfig(kind="ivf", nlist=32, nprobe=1, target_recall=target)
        metric = ReferenceMatchMetric(
            embedding_provider="local", reference_set=ReferenceSet("facts", texts, config), name="set"
        )
        return [r.score for r in metric.score_batch(cases)]

    assert np.abs(np.array(scores(None)) - exact).max() > 1e-3  # nprobe 1 alone misses some best references
    assert scores(1.0) == pytest.approx(exact.tolist(), abs=1e-6)


@pytest.mark.slow
def test_recall_counts_identical_references_as_found_and_rerank_is_per_call() -> None:
    """A set holding each vector three times (texts an uncased model embeds alike): the exact answer's rows
    are one of several equally good choices, so a search that returns exact similarities has recall 1.0 even
    where its rows differ from numpy's (counting rows gave 0.96 and widened to a full scan with a warning).
    ``ivf_rerank`` is per call too: two breadths on one PQ search answer as their own rerank says."""
    base = _unit_rows(7000, 32, seed=21)
    vectors = np.repeat(base, 3, axis=0)
    queries = _unit_rows(200, 32, seed=22)
    search = ReferenceSearch(vectors, SearchConfig(kind="ivf", nlist=64, nprobe=64))
    recall = search.measure_recall(queries, query_config=replace(search.config, target_recall=1.0))
    assert recall.recall_at_10 == 1.0 and recall.recall_at_1 == 1.0 and not recall.short_of_target()
    sims, _ = search.top_k(queries, 10)
    exact = np.sort(queries @ base.T, axis=1)[:, ::-1]  # each distinct similarity three times in the set
    assert np.allclose(sims, np.repeat(exact[:, :4], 3, axis=1)[:, :10], atol=1e-5)

    pq = ReferenceSearch(base, SearchConfig(kind="ivf", nlist=16, nprobe=16, ivf_pq=4, ivf_rerank=1))
    truth = np.argsort(-(queries @ base.T), axis=1, kind="stable")[:, :10]
    one = _recall_at_10(pq.top_k(queries, 10)[1], truth)
    ten = _recall_at_10(pq.top_k(queries, 10, replace(pq.config, ivf_rerank=10))[1], truth)
    assert ten > one + 0.2 and pq.config.ivf_rerank == 1
    assert _recall_at_10(pq.top_k(queries, 10)[1], truth) == one


@pytest.mark.slow
def test_a_run_started_while_another_runs_with_the_same_metric_keeps_each_query_options(
    tmp_path: Path, monkeypatch
) -> None:
    """One metric object used by two ``evaluate_sync`` calls, the second made while the first is between its
    batches (from its progress callback): the first call widened nprobe on its outputs, the second (no output
    to measure on) keeps nprobe 1 — and the first call's later batches still search at its own breadth: every
    score equals numpy's exact max (a breadth kept on the shared metric object was overwritten by the second
    call)."""
    from evaltasks.embeddings import get_provider
    from evaltasks.index import ReferenceIndex
    from evaltasks.index import search as search_module

    monkeypatch.setattr(search_module, "_REGISTRY", {})
    local = get_provider("local")
    vectors = _unit_rows(20_000, 384, seed=12)
    texts = tuple(f"text {i}" for i in range(len(vectors)))
    ReferenceIndex(tmp_path / "idx").get_or_embed(_Prestored(local.namespace, vectors, local), texts)
    outputs = [
        f"Answer number {i}: the {c} is {v}."
        for i, (c, v) in enumerate(
            (c, v) for c in ("sky", "sea", "grass", "sun", "moon", "road") for v in ("blue", "green", "warm", "far")
        )
    ]
    exact = np.clip(local.embed_batch(outputs).vectors @ vectors.T, 0.0, 1.0).max(axis=1)
    config = SearchConfig(kind="ivf", nlist=64, nprobe=1, target_recall=1.0)
    metric = ReferenceMatchMetric(
        embedding_provider="local", reference_set=ReferenceSet("big", texts, config), name="set"
    )
    inner: list = []

    def between_batches(done: int) -> None:
        if not inner:
            inner.append(evaluate_sync([EvalTestCase(actual_output="  ")], [metric], index_dir=tmp_path / "idx"))

    outer = evaluate_sync(
        [EvalTestCase(actual_output=o) for o in outputs],
        [metric],
        index_dir=tmp_path / "idx",
        batch_size=4,
        progress=between_batches,
    )
    assert inner[0].reference_sets[0].nprobe == 1 and inner[0].reference_sets[0].recall_at_10 is None
    assert outer.reference_sets[0].nprobe > 1 and outer.reference_sets[0].recall_at_10 == 1.0
    assert [case.metrics[0].score for case in outer.test_results] == pytest.approx(exact.tolist(), abs=1e-6)
