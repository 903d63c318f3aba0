"""What ``evaltasks run`` hands to its flow instead of parsing twice, and the flow's garbage-collector setting.

The CLI validates the suite, dataset and baseline before Prefect starts; the flow takes those parsed objects
(:mod:`evaltasks._handoff`) once, and parses the files itself when they changed in between.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import pytest

from evaltasks import _handoff
from evaltasks.errors import InputError
from evaltasks.engine.run import hand_over_plan, load_parsed_baseline, plan_run


def _suite(tmp_path: Path, rows: list[dict]) -> Path:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: handoff\ndataset:\n  path: data.jsonl\nmetrics:\n  - metric: LengthCheckMetric\n    max_length: 5\n",
        encoding="utf-8",
    )
    return suite


@pytest.fixture(autouse=True)
def _nothing_kept():
    _handoff.forget()
    yield
    _handoff.forget()


def test_a_handed_over_plan_is_taken_once(tmp_path: Path) -> None:
    suite = _suite(tmp_path, [{"actual_output": "one"}, {"actual_output": "two"}])
    plan = plan_run(suite)
    hand_over_plan(plan, suite)
    assert plan_run(str(suite)) is plan  # the same objects: nothing parsed
    again = plan_run(suite)  # taken once: a later call parses
    assert again is not plan and [c.actual_output for c in again.dataset.cases] == ["one", "two"]


def test_a_changed_dataset_is_parsed_again(tmp_path: Path) -> None:
    suite = _suite(tmp_path, [{"actual_output": "one"}])
    plan = plan_run(suite)
    hand_over_plan(plan, suite)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"actual_output": "changed"}) + "\n", encoding="utf-8")
    os.utime(data, ns=(1, 1))  # a different modification time even on a coarse-clock file system
    fresh = plan_run(suite)
    assert fresh is not plan and fresh.dataset.cases[0].actual_output == "changed"


def test_a_plan_is_kept_per_credentials_mode(tmp_path: Path) -> None:
    suite = _suite(tmp_path, [{"actual_output": "one"}])
    plan = plan_run(suite)
    hand_over_plan(plan, suite, skip_missing_credentials=False)
    assert plan_run(suite, skip_missing_credentials=True) is not plan
    assert plan_run(suite, skip_missing_credentials=False) is plan


def test_a_handed_over_baseline_is_parsed_once(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"summary": {"cases": 0}, "cases": []}), encoding="utf-8")
    kept = load_parsed_baseline(path, hand_over=True)
    assert load_parsed_baseline(str(path)) is kept
    assert load_parsed_baseline(path) is not kept and load_parsed_baseline(path) == kept
    load_parsed_baseline(path, hand_over=True)
    path.write_text(json.dumps({"summary": {"cases": 1}, "cases": []}), encoding="utf-8")
    os.utime(path, ns=(2, 2))
    assert load_parsed_baseline(path)["summary"] == {"cases": 1}
    path.write_text("{", encoding="utf-8")
    with pytest.raises(InputError, match="not JSON"):
        load_parsed_baseline(path, hand_over=True)


def test_a_dataset_changed_while_it_was_parsed_is_not_handed_over(tmp_path: Path) -> None:
    """The state a hand-over is checked against is taken before the files are read: a change between that
    moment and the hand-over (here: after parsing) makes the flow parse again."""
    suite = _suite(tmp_path, [{"actual_output": "old"}])
    plan = plan_run(suite)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"actual_output": "new"}) + "\n", encoding="utf-8")
    os.utime(data, ns=(3, 3))
    hand_over_plan(plan, suite)
    assert _handoff._KEPT == {}
    assert plan_run(suite).dataset.cases[0].actual_output == "new"


def _frozen(obj: object) -> bool:
    """Whether ``obj`` (alive, tracked by the collector) sits in the permanent generation (``gc.freeze``):
    ``gc.get_objects()`` lists generations 0-2 only. Unlike ``gc.get_freeze_count()``, which drops whenever
    another thread frees a frozen object, this does not depend on what other threads do meanwhile."""
    assert gc.is_tracked(obj)
    return not any(o is obj for o in gc.get_objects())


def test_overlapping_flows_share_the_collector_setting_and_keep_a_host_freeze() -> None:
    from flows.evaluate_suite import GC_THRESHOLDS, _gc_frozen

    before = gc.get_threshold()
    alive = [object()]  # alive before the runs start: frozen by the first one
    assert not _frozen(alive)
    first, second = _gc_frozen(), _gc_frozen()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first run ends while the second still scores
    assert _frozen(alive) and gc.get_freeze_count() > 0
    assert gc.get_threshold() == tuple(max(a, b) for a, b in zip(before, GC_THRESHOLDS))
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0 and not _frozen(alive)
    gc.freeze()  # a host program's own freeze
    try:
        with _gc_frozen():
            assert gc.get_threshold() == tuple(max(a, b) for a, b in zip(before, GC_THRESHOLDS))
        assert _frozen(alive) and gc.get_freeze_count() > 0  # the run left the host's freeze in place
        assert gc.get_threshold() == before
    finally:
        gc.unfreeze()


def test_the_cli_leaves_nothing_behind_when_it_stops_early(tmp_path: Path) -> None:
    from evaltasks import cli

    suite = _suite(tmp_path, [{"actual_output": "one"}])
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"summary": {}, "cases": []}), encoding="utf-8")
    (tmp_path / "file").write_text("x", encoding="utf-8")
    code = cli.main(["run", str(suite), "--baseline", str(baseline), "--output-dir", str(tmp_path / "file" / "out")])
    assert code == 2 and _handoff._KEPT == {}
    assert cli.main(["run", str(suite), "--task-runner", "processes:x"]) == 2
    assert cli.main(["run", str(suite), "--task-runner", "threads:0"]) == 2


def test_the_flow_collector_setting_is_restored_even_on_error() -> None:
    from flows.evaluate_suite import GC_THRESHOLDS, _gc_frozen

    before = gc.get_threshold()
    with pytest.raises(RuntimeError):
        with _gc_frozen():
            assert gc.get_freeze_count() > 0
            assert all(now >= wanted for now, wanted in zip(gc.get_threshold(), GC_THRESHOLDS))
            raise RuntimeError("boom")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_cli_parses_the_dataset_once(tmp_path: Path, prefect_harness, monkeypatch) -> None:
    """``evaltasks run`` in-process (the session's Prefect server): the dataset file is read once, by the CLI's
    validation; the flow runs on that plan (a spy counts the real loader's calls)."""
    import evaltasks.engine.run as run_module
    from evaltasks import cli

    rows = [{"actual_output": "a b c"}, {"actual_output": "a b c d e f g"}]
    suite = _suite(tmp_path, rows)
    calls = []
    real = run_module.load_dataset

    def counting_load_dataset(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(run_module, "load_dataset", counting_load_dataset)
    code = cli.main(["run", str(suite), "--output-dir", str(tmp_path / "out"), "--quiet", "--no-cache",
                     "--index-dir", str(tmp_path / "index")])
    assert code == 1  # one of two cases is longer than 5 characters: pass rate 50 % < the default gate
    assert len(calls) == 1
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    lengths = [m["evaluation_log"]["length"] for c in results["cases"] for m in c["metrics"]]
    assert lengths == [len(r["actual_output"]) for r in rows] == [5, 13]  # ASCII: one character per code point
    assert _handoff._KEPT == {}  # taken by the flow, not left behind


def test_models_load_in_the_background_and_a_failed_load_is_left_to_the_flow(tmp_path: Path, monkeypatch) -> None:
    """The CLI loads local models in a thread while Prefect starts; a model that cannot load does not crash
    that thread (the flow's tasks load it again and report the error)."""
    from evaltasks.cli import _load_models_in_background
    from evaltasks.embeddings import local
    from evaltasks.errors import ConfigError

    monkeypatch.setattr(local, "_MODELS", {})  # a model of its own, gone after the test (others count them)
    missing = local.LocalEmbeddingProvider(str(tmp_path / "no-such-model"))
    bundled = local.LocalEmbeddingProvider(device="cpu")
    assert _load_models_in_background([]) is None
    thread = _load_models_in_background([missing, bundled])
    thread.join(timeout=300)
    assert not thread.is_alive()
    assert (bundled.model_path, "cpu") in local._MODELS  # loaded after the failed one
    assert bundled.embed(["a test"]).shape == (1, 384)
    with pytest.raises(ConfigError, match="cannot load local embedding model"):
        missing.embed(["x"])  # what the flow's task would raise
