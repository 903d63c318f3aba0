"""What ``evaltasks run`` hands to its flow instead of parsing twice, and the engine's garbage-collector setting.

The CLI validates the suite, dataset and baseline before Prefect starts and passes them to the flow as its
``plan`` parameter (:class:`~evaltasks.engine.run.PlannedRun`); the flow takes them once, and parses the files
itself when they changed in between.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
from pathlib import Path

import pytest

from evaltasks.engine.run import PlannedRun, RunPlan, load_parsed_baseline, plan_run, read_baseline
from evaltasks.errors import InputError


def _suite(tmp_path: Path, rows: list[dict]) -> Path:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: handoff\ndataset:\n  path: data.jsonl\nmetrics:\n  - metric: LengthCheckMetric\n    max_length: 5\n",
        encoding="utf-8",
    )
    return suite


def _plans_of(suite: Path) -> list[RunPlan]:
    """The plans of ``suite`` still alive in this process (after a full collection): what a run left behind."""
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, RunPlan) and o.suite.path == suite.resolve()]


def test_a_handed_over_plan_is_taken_once(tmp_path: Path) -> None:
    suite = _suite(tmp_path, [{"actual_output": "one"}, {"actual_output": "two"}])
    plan = plan_run(suite)
    handed = PlannedRun.of(plan)
    assert plan_run(str(suite), planned=handed.take()) is plan  # the same objects: nothing parsed
    again = plan_run(suite, planned=handed.take())  # taken once: a later call parses
    assert again is not plan and [c.actual_output for c in again.dataset.cases] == ["one", "two"]


def test_a_changed_dataset_is_parsed_again(tmp_path: Path) -> None:
    suite = _suite(tmp_path, [{"actual_output": "one"}])
    plan = plan_run(suite)
    handed = PlannedRun.of(plan)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"actual_output": "changed"}) + "\n", encoding="utf-8")
    os.utime(data, ns=(1, 1))  # a different modification time even on a coarse-clock file system
    fresh = plan_run(suite, planned=handed.take())
    assert fresh is not plan and fresh.dataset.cases[0].actual_output == "changed"


def test_a_plan_is_kept_per_credentials_mode(tmp_path: Path) -> None:
    suite = _suite(tmp_path, [{"actual_output": "one"}])
    plan = plan_run(suite, skip_missing_credentials=False)
    assert plan_run(suite, skip_missing_credentials=True, planned=plan) is not plan
    assert plan_run(suite, skip_missing_credentials=False, planned=plan) is plan
    (tmp_path / "other").mkdir()
    other = _suite(tmp_path / "other", [{"actual_output": "one"}])
    assert plan_run(other, planned=plan) is not plan  # another suite file: its own plan


def test_a_handed_over_baseline_is_parsed_once(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"summary": {"cases": 0}, "cases": []}), encoding="utf-8")
    handed = PlannedRun.of(plan_run(_suite(tmp_path, [{"actual_output": "one"}])), read_baseline(path))
    kept = handed._baseline.data
    assert load_parsed_baseline(str(path), handed.take_baseline()) is kept
    assert load_parsed_baseline(path, handed.take_baseline()) is not kept and load_parsed_baseline(path) == kept
    parsed = read_baseline(path)
    path.write_text(json.dumps({"summary": {"cases": 1}, "cases": []}), encoding="utf-8")
    os.utime(path, ns=(2, 2))
    assert load_parsed_baseline(path, parsed)["summary"] == {"cases": 1}
    path.write_text("{", encoding="utf-8")
    with pytest.raises(InputError, match="not JSON"):
        read_baseline(path)


def test_a_dataset_changed_while_it_was_parsed_is_not_handed_over(tmp_path: Path) -> None:
    """The state a hand-over is checked against is taken before the files are read: a change between that
    moment and the hand-over (here: after parsing) makes the flow parse again."""
    suite = _suite(tmp_path, [{"actual_output": "old"}])
    plan = plan_run(suite)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"actual_output": "new"}) + "\n", encoding="utf-8")
    os.utime(data, ns=(3, 3))
    handed = PlannedRun.of(plan)
    assert not plan.unchanged()
    assert plan_run(suite, planned=handed.take()).dataset.cases[0].actual_output == "new"


def test_the_plan_parameter_is_recorded_as_a_short_description_and_read_back_empty(tmp_path: Path) -> None:
    """Prefect records flow parameters as JSON (Flow.serialize_parameters) and validates them with pydantic
    (Flow.validate_parameters): the plan passes through as the same object, its JSON form is a few fields, and
    that JSON validated again (a retried flow run, a deployment) holds no plan."""
    from evaltasks.flows.evaluate_suite import evaluate_suite

    suite = _suite(tmp_path, [{"actual_output": "x" * 1000}] * 200)
    plan = plan_run(suite)
    handed = PlannedRun.of(plan)
    assert evaluate_suite.validate_parameters({"suite_path": str(suite), "plan": handed})["plan"] is handed
    recorded = evaluate_suite.serialize_parameters({"suite_path": str(suite), "plan": handed})["plan"]
    assert recorded == {
        "suite_path": str(suite.resolve()),
        "suite_sha256": plan.suite.sha256,
        "cases": 200,
        "metrics": 1,
    }
    assert len(json.dumps(recorded)) < 300  # the dataset is 200 kB
    again = evaluate_suite.validate_parameters({"suite_path": str(suite), "plan": recorded})["plan"]
    assert isinstance(again, PlannedRun) and again.take() is None
    assert handed.take() is plan and handed.take() is None


def _frozen(obj: object) -> bool:
    """Whether ``obj`` (alive, tracked by the collector) sits in the permanent generation (``gc.freeze``):
    ``gc.get_objects()`` lists generations 0-2 only. Unlike ``gc.get_freeze_count()``, which drops whenever
    another thread frees a frozen object, this does not depend on what other threads do meanwhile."""
    assert gc.is_tracked(obj)
    return not any(o is obj for o in gc.get_objects())


def test_overlapping_flows_share_the_collector_setting_and_keep_a_host_freeze() -> None:
    from evaltasks.engine.stream import GC_THRESHOLDS
    from evaltasks.engine.stream import gc_frozen as _gc_frozen

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
    assert code == 2 and _plans_of(suite) == []
    assert cli.main(["run", str(suite), "--task-runner", "processes:x"]) == 2
    assert cli.main(["run", str(suite), "--task-runner", "threads:0"]) == 2


def test_the_flow_collector_setting_is_restored_even_on_error() -> None:
    from evaltasks.engine.stream import GC_THRESHOLDS
    from evaltasks.engine.stream import gc_frozen as _gc_frozen

    before = gc.get_threshold()
    with pytest.raises(RuntimeError), _gc_frozen():
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
    handed: list[PlannedRun] = []
    real_of = PlannedRun.of.__func__

    def recording_of(cls, *args, **kwargs):  # the real PlannedRun.of, keeping what the CLI hands to its flow
        handed.append(real_of(cls, *args, **kwargs))
        return handed[-1]

    monkeypatch.setattr(PlannedRun, "of", classmethod(recording_of))
    code = cli.main(
        [
            "run",
            str(suite),
            "--output-dir",
            str(tmp_path / "out"),
            "--quiet",
            "--no-cache",
            "--index-dir",
            str(tmp_path / "index"),
        ]
    )
    assert code == 1  # one of two cases is longer than 5 characters: pass rate 50 % < the default gate
    assert len(calls) == 1
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    lengths = [m["evaluation_log"]["length"] for c in results["cases"] for m in c["metrics"]]
    assert lengths == [len(r["actual_output"]) for r in rows] == [5, 13]  # ASCII: one character per code point
    assert len(handed) == 1 and handed[0].take() is None  # taken by the flow, not left behind

    async def recorded() -> list[dict]:
        from prefect.client.orchestration import get_client

        async with get_client() as client:
            return [
                run.parameters
                for run in await client.read_flow_runs(limit=200)
                if run.parameters.get("suite_path") == str(suite)
            ]

    [parameters] = asyncio.run(recorded())  # what Prefect's database (and its UI) shows for the run
    assert parameters["plan"] == {
        "suite_path": str(suite.resolve()),
        "suite_sha256": results["suite_sha256"],
        "cases": 2,
        "metrics": 1,
    }
    assert len(json.dumps(parameters)) < 1000


def test_models_load_in_the_background_and_a_failed_load_is_left_to_the_flow(tmp_path: Path, monkeypatch) -> None:
    """The CLI loads local models in a thread while Prefect starts; a model that cannot load does not crash
    that thread (the flow's tasks load it again and report the error)."""
    from evaltasks.cli.run import load_models_in_background as _load_models_in_background
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
