"""The generate stage of the Python API: ``evaluate_sync(cases, metrics, target=...)`` runs a real callable
(PythonTarget) on each case, scores its outputs, stores them, and fills each case's ``generation`` and the run's
``targets`` (docs/targets.md#the-generate-stage)."""

from __future__ import annotations

import hashlib
import json
import statistics
import threading
import time
from pathlib import Path

import pytest

from evaltasks import EvalTestCase, ExactMatchMetric, LengthCheckMetric, evaluate_sync
from evaltasks.engine.pipeline import STAGES
from evaltasks.errors import CredentialsError, InputError
from evaltasks.targets import PythonTarget, TargetOutput

QUESTIONS = {"What is 2+2?": "4", "Capital of France?": "Paris", "Colour of the sky?": "blue", "Say hi": "hi"}


class Bot:
    """A small system under test: answers from a table, counting its calls (thread-safe)."""

    def __init__(self, answers: dict[str, str], fail_on: str | None = None, credentials_on: str | None = None):
        self.answers, self.fail_on, self.credentials_on = answers, fail_on, credentials_on
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, case: EvalTestCase) -> dict[str, object]:
        with self.lock:
            self.calls.append(case.input or "")
        if case.input == self.fail_on:
            raise RuntimeError("the bot broke on this question")
        if case.input == self.credentials_on:
            raise CredentialsError("the bot's API key was rejected (401)")
        return {
            "output": self.answers.get(case.input or "", "no idea"),
            "cost": 0.001,
            "tokens": {"input": 3, "output": 1},
        }


def _cases() -> list[EvalTestCase]:
    """Dataset rows without outputs: a target fills them (``actual_output`` is required by the model: empty)."""
    return [
        EvalTestCase(actual_output="", input=q, expected_output=a, name=f"q{i}")
        for i, (q, a) in enumerate(QUESTIONS.items())
    ]


def test_the_generate_stage_sits_between_validate_and_embed() -> None:
    assert STAGES.index("validate") + 1 == STAGES.index("generate") == STAGES.index("embed") - 1


def test_a_target_produces_the_outputs_that_are_scored(tmp_path: Path) -> None:
    answers = {**QUESTIONS, "Colour of the sky?": "green"}  # one wrong answer
    bot = Bot(answers)
    target = PythonTarget(bot, name="bot")
    result = evaluate_sync(_cases(), [ExactMatchMetric()], target=target, index_dir=tmp_path / "index")

    assert sorted(bot.calls) == sorted(QUESTIONS)  # one call per case
    assert [r.actual_output for r in result.test_results] == [answers[q] for q in QUESTIONS]
    assert [r.status for r in result.test_results] == ["passed", "passed", "failed", "passed"]
    assert [r.id for r in result.test_results] == ["q0", "q1", "q2", "q3"]
    for r in result.test_results:
        g = r.generation
        assert g is not None and g.target == "bot" and g.cached is False and g.sample == 0
        assert g.cost == 0.001 and g.input_tokens == 3 and g.output_tokens == 1 and g.latency_ms is not None
    (run,) = result.targets
    assert (run.name, run.kind, run.fingerprint) == ("bot", "python", target.fingerprint())
    assert (run.requests, run.cached, run.errored) == (4, 0, 0)
    assert run.cost == pytest.approx(0.004)
    latencies = [r.generation.latency_ms for r in result.test_results if r.generation]
    assert run.latency_ms_median == pytest.approx(statistics.median(latencies))
    assert run.summary == result.summary and result.summary.passed_cases == 3


def test_a_rerun_with_an_unchanged_target_makes_no_call(tmp_path: Path) -> None:
    index = tmp_path / "index"
    first = Bot(QUESTIONS)
    evaluate_sync(_cases(), [ExactMatchMetric()], target=PythonTarget(first, name="bot"), index_dir=index)
    again = Bot(QUESTIONS)  # same class, same file: the same fingerprint
    result = evaluate_sync(_cases(), [ExactMatchMetric()], target=PythonTarget(again, name="bot"), index_dir=index)

    assert len(first.calls) == 4 and again.calls == []
    assert all(r.generation is not None and r.generation.cached for r in result.test_results)
    assert [r.actual_output for r in result.test_results] == list(QUESTIONS.values())
    (run,) = result.targets
    assert (run.requests, run.cached, run.cost) == (0, 4, 0.0)
    # a new version label is a new target: everything is generated again; refresh too
    third = Bot(QUESTIONS)
    evaluate_sync(_cases(), [ExactMatchMetric()], target=PythonTarget(third, name="bot", version="2"), index_dir=index)
    assert len(third.calls) == 4
    fourth = Bot(QUESTIONS)
    evaluate_sync(
        _cases(), [ExactMatchMetric()], target=PythonTarget(fourth, name="bot"), index_dir=index, refresh=True
    )
    assert len(fourth.calls) == 4


def test_a_failed_generation_errors_its_case_and_the_run_goes_on() -> None:
    bot = Bot(QUESTIONS, fail_on="Capital of France?")
    result = evaluate_sync(_cases(), [ExactMatchMetric(), LengthCheckMetric(min_length=1)], target=PythonTarget(bot))

    statuses = {r.id: r.status for r in result.test_results}
    assert statuses == {"q0": "passed", "q1": "errored", "q2": "passed", "q3": "passed"}
    failed = result.test_results[1]
    assert failed.actual_output == "" and len(failed.metrics) == 2
    for m in failed.metrics:
        assert m.status == "errored" and m.error is not None
        assert m.error.startswith("generation failed: ") and "RuntimeError: the bot broke on this question" in m.error
    assert result.targets[0].errored == 1 and result.summary.errored_cases == 1


def test_rejected_credentials_stop_the_run() -> None:
    bot = Bot(QUESTIONS, credentials_on="Say hi")
    with pytest.raises(CredentialsError, match="rejected"):
        evaluate_sync(_cases(), [ExactMatchMetric()], target=PythonTarget(bot))


def test_a_dataset_without_outputs_validates_with_a_target_and_not_without() -> None:
    cases = [EvalTestCase(actual_output="", input="Say hi")]  # no expected_output: ExactMatch needs one
    with pytest.raises(InputError, match="expected_output"):
        evaluate_sync(cases, [ExactMatchMetric()], target=PythonTarget(Bot(QUESTIONS)))
    with pytest.raises(InputError, match="is not a target"):
        evaluate_sync(_cases(), [ExactMatchMetric()], target=[object()])  # type: ignore[list-item]


def test_every_metric_runs_on_every_targets_outputs() -> None:
    current, candidate = Bot(QUESTIONS), Bot({q: a.upper() for q, a in QUESTIONS.items()})
    targets = [PythonTarget(current, name="current"), PythonTarget(candidate, name="candidate")]
    result = evaluate_sync(_cases(), [ExactMatchMetric(), LengthCheckMetric(min_length=1)], target=targets)

    assert [r.generation.target for r in result.test_results if r.generation] == ["current"] * 4 + ["candidate"] * 4
    assert [r.id for r in result.test_results] == ["q0", "q1", "q2", "q3"] * 2
    assert [t.name for t in result.targets] == ["current", "candidate"]
    assert result.targets[0].summary.passed_cases == 4
    # upper-casing keeps "4" only: ExactMatch is case-sensitive
    assert result.targets[1].summary.passed_cases == 1 and result.targets[1].summary.cases == 4
    assert result.summary == result.targets[0].summary
    assert all(len(r.metrics) == 2 for r in result.test_results)


class Coin:
    """Answers right on even calls of a question and wrong on odd ones: its samples disagree."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, case: EvalTestCase) -> str:
        with self.lock:
            n = self.seen[case.input or ""] = self.seen.get(case.input or "", -1) + 1
        if case.input == "Say hi":  # a stable case
            return "hi"
        return (case.expected_output or "") if n % 2 == 0 else "wrong"


def test_repeat_scores_every_sample_and_flags_cases_whose_verdicts_differ() -> None:
    result = evaluate_sync(_cases(), [ExactMatchMetric()], target=PythonTarget(Coin(), name="coin", repeat=3))

    ids = [r.id for r in result.test_results]
    assert ids == [f"q{i}{s}" for i in range(4) for s in ("", "~2", "~3")]
    assert [r.generation.sample for r in result.test_results if r.generation] == [0, 1, 2] * 4
    assert result.summary.cases == 12
    (run,) = result.targets
    assert run.samples == 3 and run.flaky_cases == ["q0", "q1", "q2"] and run.requests == 12
    unstable = {r.id for r in result.test_results if r.metrics[0].evaluation_log.get("unstable") is True}
    assert unstable == {i for i in ids if not i.startswith("q3")}


class PricedTarget:
    """A Target written here (the protocol, not a library class): a priced echo, so the cost estimate is known."""

    kind = "python"
    cache = True

    def __init__(self, name: str, price: float, repeat: int = 1) -> None:
        self.name, self.price, self.repeat = name, price, repeat
        self.calls = 0

    def fingerprint(self) -> str:
        return hashlib.sha256(f"priced:{self.name}:{self.price}".encode()).hexdigest()

    def case_key(self, case: EvalTestCase) -> str:
        return hashlib.sha256(f"{self.fingerprint()}:{case.input}".encode()).hexdigest()

    def estimate_cost(self, case: EvalTestCase) -> float:
        return self.price * len(case.input or "")

    def generate(self, case: EvalTestCase) -> TargetOutput:
        self.calls += 1
        return TargetOutput(output=(case.input or "").upper(), cost=self.estimate_cost(case))


def test_the_cost_estimate_covers_the_targets_before_anything_is_sent(tmp_path: Path) -> None:
    from evaltasks.engine.run import estimate_cost, plan_run

    (tmp_path / "d.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "input": q, "actual_output": ""}) + "\n" for i, q in enumerate(QUESTIONS)),
        encoding="utf-8",
    )
    (tmp_path / "suite.yaml").write_text(
        "name: priced\ndataset: {path: d.jsonl}\nmetrics:\n  - {metric: LengthCheckMetric, max_length: 9}\n",
        encoding="utf-8",
    )
    plan = plan_run(tmp_path / "suite.yaml")
    assert estimate_cost(plan, tmp_path / "index") == 0.0  # LengthCheck and no target: free
    targets = [PricedTarget("a", 0.01), PricedTarget("b", 0.002, repeat=3)]
    plan.suite.targets = targets
    characters = sum(len(q) for q in QUESTIONS)
    assert estimate_cost(plan, tmp_path / "index") == pytest.approx(characters * 0.01 + 3 * characters * 0.002)
    assert all(t.calls == 0 for t in targets)  # estimated, nothing sent
    plan.use_targets = False  # --no-target
    assert estimate_cost(plan, tmp_path / "index") == 0.0


def test_a_target_written_to_the_protocol_runs_and_its_spend_is_counted(tmp_path: Path) -> None:
    target = PricedTarget("priced", 0.5)
    result = evaluate_sync(_cases(), [LengthCheckMetric(max_length=20)], target=target, index_dir=tmp_path)
    assert target.calls == 4 and [r.actual_output for r in result.test_results] == [q.upper() for q in QUESTIONS]
    assert result.targets[0].cost == pytest.approx(0.5 * sum(len(q) for q in QUESTIONS))
    assert len(list((tmp_path / "outputs").rglob("*.json"))) == 4  # the store beside judgements/


SLOW_SCRIPT = """
import sys, time
from pathlib import Path
from evaltasks import EvalTestCase, LengthCheckMetric, evaluate_sync
from evaltasks.targets import PythonTarget

marker = Path(sys.argv[1]) / "stuck"

def respond(case):
    if case.input == "q3":
        while len(list((Path(sys.argv[1]) / "index" / "outputs").rglob("*.json"))) < 3:
            time.sleep(0.01)  # the other three are stored: the interrupt lands on this call alone
        marker.write_text("called")
        time.sleep(3600)  # a call that hangs: only Ctrl+C ends it
    return "answer to " + case.input

cases = [EvalTestCase(actual_output="", input=f"q{i}") for i in range(4)]
evaluate_sync(cases, [LengthCheckMetric(max_length=9)], target=PythonTarget(respond, timeout=7200, max_concurrency=2),
              index_dir=Path(sys.argv[1]) / "index")
"""


@pytest.mark.slow
def test_ctrl_c_during_generation_stops_at_once_keeping_what_is_stored(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from tests.process_env import subprocess_env

    script = tmp_path / "slow.py"
    script.write_text(SLOW_SCRIPT, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        env=subprocess_env(tmp_path / "prefect"),
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300  # generous: only bounds how long a broken run hangs the test
        while not (tmp_path / "stuck").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the target was never called on q3"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)  # the call sleeps an hour: an exit now is the interrupt's
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode in (130, -signal.SIGINT), stderr.decode(errors="replace")[-2000:]
    assert b"KeyboardInterrupt" in stderr
    assert len(list((tmp_path / "index" / "outputs").rglob("*.json"))) == 3  # q0, q1 and q2 stay stored


class Exclusive:
    """A callable that is not thread-safe: it records whether two calls ever overlapped."""

    def __init__(self) -> None:
        self.active = 0
        self.overlapped = False
        self.lock = threading.Lock()

    def __call__(self, case: EvalTestCase) -> str:
        with self.lock:
            self.active += 1
            self.overlapped |= self.active > 1
        try:
            time.sleep(0.002)  # long enough for a second call to overlap, were one made
            return case.input or ""
        finally:
            with self.lock:
                self.active -= 1


def test_generation_is_a_stage_of_its_own_with_its_count() -> None:
    from evaltasks.engine.progress import RunContext, run_context

    stages: list[tuple[str, int | None]] = []
    counted: list[int] = []
    cases = [EvalTestCase(actual_output="", input=f"question {i}") for i in range(300)]  # 5 batches of 64
    bot = Exclusive()
    context = RunContext(on_stage=lambda name, total: stages.append((name, total)), on_progress=counted.append)
    with run_context(context):
        result = evaluate_sync(cases, [LengthCheckMetric(max_length=50)], target=PythonTarget(bot))

    assert stages[0] == ("generating 300 outputs", 300)
    assert stages[1] == ("scoring 300 cases × 1 metric", 300)
    assert sum(counted) == 300  # one unit per output generated (scoring counts through evaluate_sync's progress)
    assert not bot.overlapped
    assert [r.actual_output for r in result.test_results] == [f"question {i}" for i in range(300)]
