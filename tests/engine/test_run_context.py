"""The run context (``evaltasks.engine.progress.RunContext``): what a run reports (its stages and counts, a stop)
goes to the callbacks of the run's own context, so two runs in one process do not see each other's; the context
follows a run into Prefect's flow run and its thread-pool task runs; and a host that froze its objects says so
through the context, not through a module flag.

Real engine throughout: ``evaluate_sync`` with a real metric, a real Prefect flow run of the ``evaluate-suite``
flow and of a flow with task runs on Prefect's ``ThreadPoolTaskRunner`` (the session's test server).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evaltasks import EvalTestCase, LengthCheckMetric, evaluate_sync
from evaltasks.engine import progress
from evaltasks.engine.progress import RunContext, current_run_context, run_context
from tests.suite_helpers import length_suite

WAIT_S = 120  # a hang guard only: the events below are always set unless the code under test is broken


class Recorder:
    """The callbacks of one run's context: the stages it entered and the units it counted."""

    def __init__(self, on_scoring: Callable[[], None] | None = None) -> None:
        self.stages: list[tuple[str, int | None]] = []
        self.counted: list[int] = []
        self._on_scoring = on_scoring

    def stage(self, description: str, total: int | None) -> None:
        self.stages.append((description, total))
        if description.startswith("scoring") and self._on_scoring is not None:
            self._on_scoring()

    def context(self) -> RunContext:
        return RunContext(on_progress=self.counted.append, on_stage=self.stage)


def test_two_overlapping_runs_in_one_process_see_only_their_own_callbacks() -> None:
    """Two ``evaluate_sync`` runs in two threads, both inside their scoring stage at once (each waits for the other
    to enter it before it scores): each context receives its own run's stage and exactly its own count."""
    entered = {"a": threading.Event(), "b": threading.Event()}
    results: dict[str, Any] = {}
    failures: list[BaseException] = []

    def meet(me: str, other: str) -> Callable[[], None]:
        def scoring() -> None:
            entered[me].set()
            assert entered[other].wait(WAIT_S), f"run {other} never started scoring"

        return scoring

    recorders = {"a": Recorder(meet("a", "b")), "b": Recorder(meet("b", "a"))}
    sizes = {"a": 3, "b": 5}

    def run(name: str) -> None:
        try:
            cases = [EvalTestCase(input=f"q{i}", actual_output="one two " * (i + 1)) for i in range(sizes[name])]
            with run_context(recorders[name].context()):
                results[name] = evaluate_sync(
                    cases,
                    [
                        LengthCheckMetric(max_length=4, unit="words"),
                        LengthCheckMetric(name="short", max_length=2, unit="words"),
                    ],
                    progress=progress.advance,
                )  # as evaltasks calibrate wires it
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(name,)) for name in sizes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert not failures, failures
    for name, size in sizes.items():
        assert recorders[name].stages == [(f"scoring {size} cases × 2 metrics", size * 2)], recorders[name].stages
        assert sum(recorders[name].counted) == size * 2, recorders[name].counted
        assert len(results[name].test_results) == size
    assert current_run_context() == RunContext()  # this thread opened none: it saw nothing


def test_setting_a_callback_in_one_thread_is_not_seen_by_another() -> None:
    """The setters the CLI calls change the caller's context only, not the process."""
    seen: list[int] = []
    set_in_thread = threading.Event()
    checked = threading.Event()
    other: list[RunContext] = []

    def setter() -> None:
        progress.set_progress_callback(seen.append)
        progress.advance(2)
        set_in_thread.set()
        assert checked.wait(WAIT_S)
        progress.advance(3)

    thread = threading.Thread(target=setter)
    thread.start()
    assert set_in_thread.wait(WAIT_S)
    progress.advance(100)  # this thread has no callback: nothing is counted anywhere
    other.append(current_run_context())
    checked.set()
    thread.join(WAIT_S)
    assert seen == [2, 3]
    assert other == [RunContext()]


def test_the_context_follows_a_flow_run_and_its_thread_pool_task_runs(prefect_harness: None) -> None:
    """A Prefect flow run started in a context sees it in its own thread and in each task run Prefect's
    ThreadPoolTaskRunner runs; a context opened by another thread meanwhile is not seen."""
    from prefect import flow, task
    from prefect.task_runners import ThreadPoolTaskRunner

    @task
    def count(units: int) -> str:
        progress.advance(units)
        return threading.current_thread().name

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=3))
    def counting_flow() -> list[str]:
        progress.stage("counting", 6)
        return [future.result() for future in [count.submit(units) for units in (1, 2, 3)]]

    mine, elsewhere = Recorder(), Recorder()
    with run_context(elsewhere.context()):
        done = threading.Event()
        threads: list[str] = []

        def run() -> None:
            with run_context(mine.context()):
                threads.extend(counting_flow())
            done.set()

        worker = threading.Thread(target=run, name="the-run")
        worker.start()
        worker.join(WAIT_S)
        assert done.is_set()
    assert mine.stages == [("counting", 6)] and sorted(mine.counted) == [1, 2, 3]
    assert all(name != "the-run" for name in threads), threads  # the task runs ran in the runner's threads
    assert elsewhere.stages == [] and elsewhere.counted == []


def test_the_evaluate_suite_flow_reports_its_stages_and_counts_to_its_context(
    prefect_harness: None, tmp_path: Path
) -> None:
    from evaltasks.flows.evaluate_suite import evaluate_suite

    suite = length_suite(tmp_path / "s", [1, 2, 9, 3], name="run-context")
    recorder = Recorder()
    with run_context(recorder.context()):
        state = evaluate_suite(
            suite_path=str(suite), output_dir=str(tmp_path / "out"), index_dir=str(tmp_path / "idx"), return_state=True
        )
    assert state.is_completed()
    assert ("scoring 4 cases × 1 metric", 4) in recorder.stages, recorder.stages
    assert sum(recorder.counted) == 4, recorder.counted
    assert current_run_context() == RunContext()


@pytest.mark.parametrize("host_froze", [False, True])
def test_a_host_that_froze_its_objects_says_so_through_the_context(host_froze: bool) -> None:
    """``gc_frozen`` freezes the objects alive at its start, unless the run's host froze them itself (the runs
    ``evaltasks server`` forks: its runner called gc.freeze() before forking)."""
    from evaltasks.engine.stream import gc_frozen

    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    with run_context(RunContext(host_froze_objects=host_froze)), gc_frozen():
        frozen_inside = gc.get_freeze_count()
    assert (frozen_inside == 0) is host_froze, frozen_inside
    assert gc.get_freeze_count() == 0
