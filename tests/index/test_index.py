"""ReferenceIndex (docs/embeddings.md#reference-index): segment files on disk under tmp_path, the real local model."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest

from evaltasks import EvalTestCase, ReferenceIndex, ReferenceMatchMetric, evaluate_sync
from evaltasks.embeddings import get_provider
from evaltasks.embeddings.local import LocalEmbeddingProvider
from evaltasks.embeddings.openai import OpenAIEmbeddingProvider
from evaltasks.index import default_index_dir, text_id
from tests.cli_forkserver import run_cli

EPS = 1e-6

REFS = [
    "The Eiffel Tower is in Paris.",
    "Water boils at 100 degrees Celsius at sea level.",
    "The Eiffel Tower is in Paris.",  # duplicate: stored once
    "Photosynthesis turns light into chemical energy.",
]
UNIQUE = list(dict.fromkeys(REFS))


@pytest.fixture(scope="module")
def provider():
    return get_provider("local")


def namespace_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir())


def meta_of(root: Path) -> dict:
    (ns,) = namespace_dirs(root)
    return json.loads((ns / "meta.json").read_text(encoding="utf-8"))


def vector_file(ns: Path) -> Path:
    """The vectors file of a namespace's only segment (what a corruption test damages)."""
    (path,) = ns.glob("seg-*.vectors.npy")
    return path


def assert_rows_match_model(table, texts, st_model) -> None:
    expected = st_model.encode(texts, normalize_embeddings=True)
    got = table.rows(texts)
    assert got.shape == expected.shape
    assert np.all(np.abs(np.sum(got * expected, axis=1) - 1.0) <= EPS)  # same direction
    assert np.allclose(got, expected, atol=1e-5)


# -- reuse -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_second_run_embeds_zero_references(tmp_path, provider, st_model) -> None:
    first = ReferenceIndex(tmp_path).get_or_embed(provider, REFS)
    assert (first.computed, first.reused) == (len(UNIQUE), 0)
    assert first.table.texts == UNIQUE
    assert_rows_match_model(first.table, UNIQUE, st_model)

    second = ReferenceIndex(tmp_path).get_or_embed(provider, REFS)  # a fresh object: reads from disk
    assert (second.computed, second.reused) == (0, len(UNIQUE))
    assert_rows_match_model(second.table, UNIQUE, st_model)
    assert np.array_equal(second.table.rows(UNIQUE), first.table.rows(UNIQUE))


def test_new_references_are_added_and_old_ones_reused(tmp_path, provider, st_model) -> None:
    ReferenceIndex(tmp_path).get_or_embed(provider, REFS)
    extra = "Mount Everest is the highest mountain above sea level."
    lookup = ReferenceIndex(tmp_path).get_or_embed(provider, [extra, *REFS])
    assert (lookup.computed, lookup.reused) == (1, len(UNIQUE))
    assert_rows_match_model(lookup.table, [extra, *UNIQUE], st_model)
    assert meta_of(tmp_path)["count"] == len(UNIQUE) + 1


def test_identical_references_are_stored_once(tmp_path, provider) -> None:
    ReferenceIndex(tmp_path).get_or_embed(provider, REFS + REFS[::-1])
    meta = meta_of(tmp_path)
    assert meta["count"] == len(UNIQUE) == 3
    (ids_file,) = namespace_dirs(tmp_path)[0].glob("seg-*.ids.npy")
    ids = np.load(ids_file, allow_pickle=False)
    assert len(ids) == 3
    assert ids.tolist() == sorted(text_id(t) for t in UNIQUE)  # stored sorted: lookups are binary searches


def test_text_id_is_a_content_hash() -> None:
    text = "Ünïcode reference"
    expected = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") & (2**63 - 1)
    assert text_id(text) == expected
    assert text_id(text) == text_id(str(text))
    assert text_id("a") != text_id("a ")
    assert 0 <= text_id("anything") < 2**63


# -- through evaluate ------------------------------------------------------------------------------------
def _cases() -> list[EvalTestCase]:
    return [
        EvalTestCase(actual_output="The Eiffel Tower stands in Paris.", references=[REFS[0], REFS[3]]),
        EvalTestCase(actual_output="Water boils at 100 °C.", references=[REFS[1], REFS[0]]),
        EvalTestCase(actual_output="Plants use sunlight to make sugar.", references=[REFS[3]]),
        EvalTestCase(actual_output="The Eiffel Tower stands in Paris.", references=[REFS[2]]),  # repeated output
    ]


def test_scores_through_the_index_equal_direct_scores(tmp_path, cosine) -> None:
    metric = ReferenceMatchMetric(embedding_provider="local", aggregation="mean")
    direct = evaluate_sync(_cases(), [metric])
    first = evaluate_sync(_cases(), [metric], index_dir=tmp_path)
    second = evaluate_sync(_cases(), [metric], index_dir=tmp_path)

    assert first.summary.embeddings.references_computed == len(UNIQUE)
    assert first.summary.embeddings.references_reused == 0
    assert second.summary.embeddings.references_computed == 0
    assert second.summary.embeddings.references_reused == len(UNIQUE)
    assert (first.summary.embeddings.outputs_computed, first.summary.embeddings.outputs_reused) == (3, 0)
    assert (second.summary.embeddings.outputs_computed, second.summary.embeddings.outputs_reused) == (0, 3)
    assert direct.summary.embeddings.references_computed == len(UNIQUE)
    assert direct.summary.embeddings.references_reused == 0

    for case, d, a, b in zip(_cases(), direct.test_results, first.test_results, second.test_results):
        expected = float(np.clip(cosine(case.actual_output, case.references), 0, 1).mean())
        for result in (d, a, b):
            got = result.metrics[0]
            assert abs(got.score - expected) <= EPS
            assert got.success is d.metrics[0].success


def test_index_dir_none_writes_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    evaluate_sync(_cases()[:1], [ReferenceMatchMetric(embedding_provider="local")])
    assert list(tmp_path.iterdir()) == []


# -- corruption ------------------------------------------------------------------------------------------
def _corrupt_truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _corrupt_garbage(path: Path) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))


@pytest.mark.parametrize("corrupt", [_corrupt_truncate, _corrupt_garbage], ids=["truncated", "garbage"])
def test_corrupt_index_is_detected_and_rebuilt(tmp_path, provider, st_model, corrupt) -> None:
    ReferenceIndex(tmp_path).get_or_embed(provider, REFS)
    (ns,) = namespace_dirs(tmp_path)
    corrupt(vector_file(ns))

    with pytest.warns(UserWarning, match="corrupt"):
        lookup = ReferenceIndex(tmp_path).get_or_embed(provider, REFS)
    assert (lookup.computed, lookup.reused) == (len(UNIQUE), 0)  # nothing read from the bad file
    assert_rows_match_model(lookup.table, UNIQUE, st_model)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rebuilt index is sound: no warning any more
        again = ReferenceIndex(tmp_path).get_or_embed(provider, REFS)
    assert (again.computed, again.reused) == (0, len(UNIQUE))
    assert_rows_match_model(again.table, UNIQUE, st_model)
    assert meta_of(tmp_path)["count"] == len(UNIQUE)


def test_corrupt_index_scores_stay_right_through_evaluate(tmp_path, cosine) -> None:
    metric = ReferenceMatchMetric(embedding_provider="local")
    evaluate_sync(_cases(), [metric], index_dir=tmp_path)
    (ns,) = namespace_dirs(tmp_path)
    _corrupt_truncate(vector_file(ns))
    with pytest.warns(UserWarning, match="corrupt"):
        result = evaluate_sync(_cases(), [metric], index_dir=tmp_path)
    assert result.summary.embeddings.references_computed == len(UNIQUE)
    for case, got in zip(_cases(), result.test_results):
        expected = float(np.clip(cosine(case.actual_output, case.references), 0, 1).max())
        assert abs(got.metrics[0].score - expected) <= EPS


def test_flipped_vector_bytes_are_caught_by_the_checksum(tmp_path, provider, st_model) -> None:
    ReferenceIndex(tmp_path).get_or_embed(provider, REFS)
    (ns,) = namespace_dirs(tmp_path)
    path = vector_file(ns)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40  # inside the float data: numpy still reads the file, the vectors are wrong
    path.write_bytes(bytes(data))
    tampered = np.load(path, allow_pickle=False)
    assert tampered.shape == (len(UNIQUE), 384)  # only the checksum can tell
    with pytest.warns(UserWarning, match="corrupt"):
        lookup = ReferenceIndex(tmp_path).get_or_embed(provider, REFS)
    assert (lookup.computed, lookup.reused) == (1, len(UNIQUE) - 1)  # the damaged vector only, not the namespace
    assert_rows_match_model(lookup.table, UNIQUE, st_model)


def test_metadata_disagreeing_with_the_index_is_detected(tmp_path, provider) -> None:
    ReferenceIndex(tmp_path).get_or_embed(provider, REFS)
    (ns,) = namespace_dirs(tmp_path)
    meta = json.loads((ns / "meta.json").read_text())
    meta["count"] = 99  # the segment files are intact (checksum still matches) but the count disagrees
    (ns / "meta.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="corrupt"):
        lookup = ReferenceIndex(tmp_path).get_or_embed(provider, REFS)
    assert lookup.computed == len(UNIQUE)
    assert meta_of(tmp_path)["count"] == len(UNIQUE)


def test_unreadable_metadata_is_detected(tmp_path, provider) -> None:
    ReferenceIndex(tmp_path).get_or_embed(provider, REFS)
    (ns,) = namespace_dirs(tmp_path)
    (ns / "meta.json").write_text("{not json")
    with pytest.warns(UserWarning, match="corrupt"):
        lookup = ReferenceIndex(tmp_path).get_or_embed(provider, REFS)
    assert lookup.computed == len(UNIQUE)
    assert meta_of(tmp_path)["count"] == len(UNIQUE)


# -- namespaces and files --------------------------------------------------------------------------------
def test_namespaces_differ_per_model(tmp_path, provider, minilm_path) -> None:
    ReferenceIndex(tmp_path).get_or_embed(provider, REFS)
    # the same weights named by path: another model name, so another namespace (nothing reused across)
    by_path = get_provider("local", str(minilm_path))
    assert by_path.namespace != provider.namespace
    lookup = ReferenceIndex(tmp_path).get_or_embed(by_path, REFS)
    assert (lookup.computed, lookup.reused) == (len(UNIQUE), 0)
    dirs = namespace_dirs(tmp_path)
    assert len(dirs) == 2
    models = sorted(json.loads((d / "meta.json").read_text())["model"] for d in dirs)
    assert models == sorted(["all-MiniLM-L6-v2", str(minilm_path)])


def test_fingerprint_follows_the_model_files(tmp_path, provider, minilm_path) -> None:
    # a copy of the model whose config differs by one byte has another fingerprint, so another namespace
    copy = tmp_path / "model-copy"
    copy.mkdir()
    for item in minilm_path.iterdir():
        (copy / item.name).symlink_to(item)
    (copy / "config.json").unlink()
    (copy / "config.json").write_text((minilm_path / "config.json").read_text() + "\n")
    changed = LocalEmbeddingProvider(str(copy))
    same = LocalEmbeddingProvider(str(minilm_path))
    assert same.fingerprint == provider.fingerprint
    assert changed.fingerprint != provider.fingerprint
    assert changed.fingerprint in changed.namespace and changed.namespace != same.namespace


def test_a_model_folder_is_hashed_again_only_when_a_file_changes(tmp_path, minilm_path) -> None:
    """Fingerprints are kept per folder and file signature (name, size, mtime): an unchanged folder is not read
    again (what `evaltasks server`'s runs rely on), a file rewritten in place, even at the same size, is."""
    from evaltasks.embeddings import local

    copy = tmp_path / "model-copy"
    copy.mkdir()
    for item in minilm_path.iterdir():
        if item.is_file():
            (copy / item.name).symlink_to(item)
    (copy / "config.json").unlink()
    original = (minilm_path / "config.json").read_text()
    (copy / "config.json").write_text(original)
    first = local._local_fingerprint(copy)
    assert [key for key in local._HASHED_FOLDERS if key[0] == str(copy)] != []
    hashed = dict(local._HASHED_FOLDERS)
    assert local._local_fingerprint(copy) == first and hashed == local._HASHED_FOLDERS  # no new entry: not re-read
    # same size, other bytes, a later modification time: hashed again, another fingerprint
    changed = original.replace('"', "'", 1)
    assert len(changed) == len(original) and changed != original
    (copy / "config.json").write_text(changed)
    stat = (copy / "config.json").stat()
    os.utime(copy / "config.json", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert local._local_fingerprint(copy) != first
    # the bundled model, primed as the server's runner does, keeps the fingerprint a fresh hash gives
    local.prime_fingerprint()
    assert LocalEmbeddingProvider().fingerprint == local._local_fingerprint(minilm_path)


def test_openai_namespace_differs_from_local(provider) -> None:
    # constructing the client makes no request; only the namespace is read
    openai_small = OpenAIEmbeddingProvider(api_key="sk-test-not-used")
    openai_large = OpenAIEmbeddingProvider("text-embedding-3-large", api_key="sk-test-not-used")
    openai_256 = OpenAIEmbeddingProvider(api_key="sk-test-not-used", dimensions=256)
    spaces = {provider.namespace, openai_small.namespace, openai_large.namespace, openai_256.namespace}
    assert len(spaces) == 4
    assert openai_small.namespace.startswith("openai/text-embedding-3-small/")
    assert provider.namespace.startswith("local/all-MiniLM-L6-v2/")


def test_files_are_npy_and_json_only(tmp_path, provider) -> None:
    ReferenceIndex(tmp_path).get_or_embed(provider, REFS)
    (ns,) = namespace_dirs(tmp_path)
    files = sorted(p.name for p in ns.iterdir())
    assert [f for f in files if f != ".lock"] == [
        "meta.json",
        "seg-000001.crc32.npy",
        "seg-000001.ids.npy",
        "seg-000001.vectors.npy",
    ]
    assert not [p for p in tmp_path.rglob("*") if p.suffix in {".pkl", ".pickle", ".npz"}]
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.stat().st_size:
            assert not path.read_bytes().startswith(b"\x80"), f"{path} looks like a pickle"
    ids = np.load(ns / "seg-000001.ids.npy", allow_pickle=False)  # plain arrays: no object dtype, no pickle
    vectors = np.load(ns / "seg-000001.vectors.npy", allow_pickle=False)
    assert (ids.dtype, vectors.dtype, vectors.shape) == (np.dtype("<i8"), np.dtype("<f4"), (len(UNIQUE), 384))
    checks = np.load(ns / "seg-000001.crc32.npy", allow_pickle=False)  # each row's CRC-32 of its id and vector
    assert checks.dtype == np.dtype("<u4") and checks.tolist() == [
        zlib.crc32(vectors[i].tobytes(), zlib.crc32(ids[i].tobytes())) for i in range(len(ids))
    ]
    meta = json.loads((ns / "meta.json").read_text(encoding="utf-8"))
    assert meta["provider"] == "local"
    assert meta["model"] == "all-MiniLM-L6-v2"
    assert meta["fingerprint"] == provider.fingerprint
    assert meta["dimensions"] == 384
    assert meta["count"] == len(UNIQUE)
    (segment,) = meta["segments"]
    assert (meta["format"], segment["count"]) == (2, len(UNIQUE))
    for kind in ("ids", "vectors", "crc32"):
        assert segment["sha256"][kind] == hashlib.sha256((ns / segment[kind]).read_bytes()).hexdigest()
    assert ReferenceIndex(tmp_path).info()[0]["count"] == len(UNIQUE)


def test_default_index_dir(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("EVALTASKS_INDEX_DIR", raising=False)
    assert default_index_dir() == Path(".evaltasks/index")
    assert ReferenceIndex().root == Path(".evaltasks/index")
    monkeypatch.setenv("EVALTASKS_INDEX_DIR", str(tmp_path / "elsewhere"))
    assert ReferenceIndex().root == tmp_path / "elsewhere"
    assert ReferenceIndex(tmp_path / "explicit").root == tmp_path / "explicit"


def test_empty_request_touches_nothing(tmp_path, provider) -> None:
    lookup = ReferenceIndex(tmp_path / "idx").get_or_embed(provider, [])
    assert (lookup.computed, lookup.reused, len(lookup.table)) == (0, 0, 0)
    assert not (tmp_path / "idx").exists()


def test_empty_index_dir_variable_counts_as_unset(monkeypatch) -> None:
    monkeypatch.setenv("EVALTASKS_INDEX_DIR", "")  # an empty CI variable
    assert default_index_dir() == Path(".evaltasks/index")
    monkeypatch.setenv("EVALTASKS_INDEX_DIR", "   ")
    assert ReferenceIndex().root == Path(".evaltasks/index")


# -- corruption seen by users: `evaltasks index info` and a run's reports -----------------------------------
def _cli(cwd: Path, *args: str, timeout: float = 600, api_url: str | None = None) -> subprocess.CompletedProcess:
    """``python -m evaltasks.cli ARGS`` in ``cwd`` (against the Prefect server at ``api_url`` when given)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "EVALTASKS_INDEX_DIR")}
    env.update(
        PREFECT_HOME=str(cwd / "prefect-home"),
        HF_HUB_OFFLINE="1",
        DO_NOT_TRACK="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
    )
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return run_cli(*args, cwd=cwd, env=env, timeout=timeout)


@pytest.mark.slow
def test_index_info_checks_the_vector_files(tmp_path, provider, minilm_path) -> None:
    """`index info` once read only meta.json and called truncated or deleted vector files healthy."""
    root = tmp_path / "idx"
    by_path = get_provider("local", str(minilm_path))  # a second namespace
    for p in (provider, by_path):
        ReferenceIndex(root).get_or_embed(p, REFS)
    healthy = _cli(tmp_path, "index", "info", "--index-dir", str(root))
    assert healthy.returncode == 0, healthy.stderr
    assert "BROKEN" not in healthy.stdout and healthy.stdout.count("3 vectors × 384 dims") == 2
    assert [e["problems"] for e in ReferenceIndex(root).check()] == [[], []]

    first, second = namespace_dirs(root)
    size = vector_file(first).stat().st_size
    _corrupt_truncate(vector_file(first))
    vector_file(second).unlink()
    broken = _cli(tmp_path, "index", "info", "--index-dir", str(root))
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "Traceback" not in broken.stdout + broken.stderr
    assert broken.stdout.count("BROKEN") == 2
    assert (
        f"seg-000001.vectors.npy is {size // 2:,} bytes, expected {size:,} for 3 vectors × 384 dimensions"
        in broken.stdout
    )
    assert f"BROKEN ({second}): seg-000001.vectors.npy is missing" in broken.stdout
    assert "2 of 2 reference index namespaces are broken" in broken.stderr

    # the same size, other bytes: only the checksum can tell
    with pytest.warns(UserWarning, match="corrupt"):  # rebuilds both (the truncated one warns)
        for p in (provider, by_path):
            ReferenceIndex(root).get_or_embed(p, REFS)
    assert [e["problems"] for e in ReferenceIndex(root).check()] == [[], []]
    path = vector_file(first)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    problems = [e["problems"] for e in ReferenceIndex(root).check()]  # in folder order, as namespace_dirs
    assert problems == [
        [
            f"the sha256 of {path.name} differs from the one meta.json records",
            f"{path.name}: 1 of 3 vectors differ from their row checksums",
        ],
        [],
    ]
    flipped = _cli(tmp_path, "index", "info", "--index-dir", str(root))
    assert flipped.returncode == 1 and flipped.stdout.count("BROKEN") == 1


def test_corruption_found_by_a_run_is_a_recorded_warning(tmp_path, provider, prefect_api_url) -> None:
    """A run once reported a corrupt index only as a raw UserWarning on stderr, never in its reports."""
    root = tmp_path / "idx"
    ReferenceIndex(root).get_or_embed(provider, REFS)
    (ns,) = namespace_dirs(root)
    _corrupt_truncate(vector_file(ns))
    rows = [
        {"id": f"c{i}", "output": case.actual_output, "references": case.references} for i, case in enumerate(_cases())
    ]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: corrupt-index\ndataset:\n  path: data.jsonl\n"
        "  fields: {id: id, actual_output: output, references: references}\n"
        "metrics:\n  - {metric: ReferenceMatchMetric, embedding_provider: local, threshold: 0.5}\n"
        "gate: {min_pass_rate: 0}\n",
        encoding="utf-8",
    )
    proc = _cli(
        tmp_path,
        "run",
        "suite.yaml",
        "--index-dir",
        str(root),
        "--output-dir",
        "out",
        "--quiet",
        api_url=prefect_api_url,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = f"reference index {ns} is corrupt"
    lines = [line for line in proc.stderr.splitlines() if expected in line]
    assert len(lines) == 1 and lines[0].startswith("evaltasks: warning: "), proc.stderr
    assert "Warning:" not in proc.stderr and "warnings.warn" not in proc.stderr  # no Python warning
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert [w for w in results["warnings"] if expected in w] == [lines[0].removeprefix("evaltasks: warning: ")]
    markdown = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8").replace("\\", "")  # unescaped
    assert f"> ⚠️ {expected}" in markdown
    assert results["summary"]["embeddings"]["references_computed"] == len(UNIQUE)  # rebuilt, not read
    assert results["summary"]["errored_cases"] == 0
    assert ReferenceIndex(root).check()[0]["problems"] == []


@pytest.mark.parametrize("command", ["info", "verify", "compact"])
def test_an_index_dir_that_is_a_file_is_a_user_mistake(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evaltasks index info|verify|compact --index-dir FILE` is exit 2 with one line naming the path (it was an
    aborted run, exit 3 with a traceback file, or a silent exit 0)."""
    from evaltasks.cli import main

    not_a_directory = tmp_path / "README.md"
    not_a_directory.write_text("not an index", encoding="utf-8")
    assert main(["index", command, "--index-dir", str(not_a_directory)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"evaltasks: error: --index-dir {not_a_directory}: {not_a_directory} is a file, not a directory"]
    assert not (tmp_path / "evaltasks-error.log").exists() and not Path("evaltasks-error.log").exists()
