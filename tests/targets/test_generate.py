"""generate_case / generate_batch on real callables: store hits, retries of transient failures (Retry-After
honoured, a long one refused), permanent failures, per-case timeouts, credentials, stop, concurrency, samples."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from evaltasks.errors import CredentialsError
from evaltasks.targets import (
    GeneratedCase,
    GenerationStopped,
    OutputStore,
    PythonTarget,
    TargetError,
    TargetOutput,
    TransientTargetError,
    generate_batch,
    generate_case,
)
from evaltasks.test_case import EvalTestCase


def cases(n: int) -> list[EvalTestCase]:
    return [EvalTestCase(actual_output="stale", input=f"q{i}", name=f"c{i}", vars={"n": i}) for i in range(n)]


class Counting:
    """A callable that counts its calls per input and answers with a mapping."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, case: EvalTestCase) -> dict[str, object]:
        with self.lock:
            self.calls[case.input or ""] = self.calls.get(case.input or "", 0) + 1
        return {"output": f"answer {case.input}", "retrieval_context": ["ctx"], "cost": 0.5, "tokens": {"output": 3}}


def test_outputs_fill_the_case_and_a_rerun_reads_the_store(tmp_path: Path) -> None:
    bot = Counting()
    target = PythonTarget(bot, name="bot")
    store = OutputStore(tmp_path)
    first = generate_batch(target, cases(3), store=store, refresh=False)
    assert [g.case.actual_output for g in first] == ["answer q0", "answer q1", "answer q2"]
    assert all(g.requested and g.error is None for g in first)
    gen = first[0].case.generation
    assert gen is not None and (gen.target, gen.cached, gen.cost, gen.output_tokens) == ("bot", False, 0.5, 3)
    assert gen.latency_ms is not None and gen.latency_ms >= 0
    assert first[0].case.retrieval_context == ["ctx"] and first[0].case.vars == {"n": 0}

    again = generate_batch(PythonTarget(bot, name="bot"), cases(3), store=OutputStore(tmp_path), refresh=False)
    assert bot.calls == {"q0": 1, "q1": 1, "q2": 1}  # 0 calls on the rerun
    assert [g.case.actual_output for g in again] == ["answer q0", "answer q1", "answer q2"]
    assert all(not g.requested and g.case.generation and g.case.generation.cached for g in again)
    assert again[0].case.generation.latency_ms == gen.latency_ms  # the producing call's latency is kept

    generate_batch(target, cases(3), store=store, refresh=True)  # --no-cache
    generate_batch(PythonTarget(bot, name="bot", cache=False), cases(3), store=store, refresh=False)  # cache: false
    assert bot.calls == {"q0": 3, "q1": 3, "q2": 3}


def test_a_new_row_or_an_edited_row_regenerates_only_that_case(tmp_path: Path) -> None:
    bot = Counting()
    store = OutputStore(tmp_path)
    generate_batch(PythonTarget(bot), cases(3), store=store, refresh=False)
    edited = cases(3)
    edited[1] = edited[1].model_copy(update={"vars": {"n": 99}})
    generate_batch(PythonTarget(bot), edited, store=store, refresh=False)
    assert bot.calls == {"q0": 1, "q1": 2, "q2": 1}


def test_samples_are_stored_separately_case_major(tmp_path: Path) -> None:
    bot = Counting()
    store = OutputStore(tmp_path)
    out = generate_batch(PythonTarget(bot), cases(2), store=store, refresh=False, samples=3)
    assert [(g.case.name, g.case.generation.sample) for g in out if g.case.generation] == [
        ("c0", 0),
        ("c0", 1),
        ("c0", 2),
        ("c1", 0),
        ("c1", 1),
        ("c1", 2),
    ]
    assert bot.calls == {"q0": 3, "q1": 3}
    generate_batch(PythonTarget(bot), cases(2), store=store, refresh=False, samples=3)
    assert bot.calls == {"q0": 3, "q1": 3}
    with pytest.raises(ValueError, match="samples"):
        generate_batch(PythonTarget(bot), cases(1), store=store, refresh=False, samples=0)


class Flaky:
    """Fails transiently ``failures`` times (asking to wait ``retry_after``), then answers."""

    def __init__(self, failures: int, retry_after: float | None = 0.0) -> None:
        self.failures, self.retry_after, self.calls = failures, retry_after, 0

    def __call__(self, case: EvalTestCase) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise TransientTargetError("HTTP 429", retry_after=self.retry_after)
        return "ok"


def test_transient_failures_are_retried_up_to_max_attempts() -> None:
    flaky = Flaky(3)
    result = generate_case(PythonTarget(flaky, max_attempts=4), cases(1)[0], store=None, refresh=False)
    assert (result.error, result.case.actual_output, flaky.calls) == (None, "ok", 4)

    flaky = Flaky(4)
    result = generate_case(PythonTarget(flaky, max_attempts=4), cases(1)[0], store=None, refresh=False)
    assert flaky.calls == 4 and result.requested
    assert (
        result.error is not None
        and result.error.startswith("the target python: HTTP 429")
        and "(still failing after 4 attempts)" in result.error
    )
    assert result.case.actual_output == "" and result.case.generation is not None


def test_a_retry_after_over_the_cap_fails_at_once() -> None:
    flaky = Flaky(1, retry_after=3600)
    result = generate_case(PythonTarget(flaky), cases(1)[0], store=None, refresh=False)
    assert flaky.calls == 1
    assert result.error is not None and "asked to wait 3600 s" in result.error


def test_permanent_failures_are_not_retried_and_not_stored(tmp_path: Path) -> None:
    calls = []

    def wrong(case: EvalTestCase) -> list[str]:
        calls.append(case)
        return ["seven"]

    store = OutputStore(tmp_path)
    result = generate_case(PythonTarget(wrong, name="bot"), cases(1)[0], store=store, refresh=False)
    assert len(calls) == 1 and result.error is not None and "type list" in result.error
    assert not any(tmp_path.glob("*/*.json"))


def test_a_case_that_takes_too_long_times_out_and_the_batch_goes_on() -> None:
    release = threading.Event()

    def hang_on_first(case: EvalTestCase) -> str:
        if case.input == "q0":
            release.wait(30)
        return "done"

    try:
        out = generate_batch(PythonTarget(hang_on_first, timeout=0.2), cases(2), store=None, refresh=False)
    finally:
        release.set()
    assert out[0].error is not None and "timed out" in out[0].error and "0.2 s" in out[0].error
    assert (out[1].error, out[1].case.actual_output) == (None, "done")


def test_credentials_error_stops_the_batch() -> None:
    def rejected(case: EvalTestCase) -> str:
        raise CredentialsError("the endpoint rejected the key (HTTP 401)")

    with pytest.raises(CredentialsError, match="401"):
        generate_batch(PythonTarget(rejected), cases(2), store=None, refresh=False)


def test_stop_ends_a_running_call_and_skips_the_rest() -> None:
    stop = threading.Event()
    started = threading.Event()
    calls = []

    def hang(case: EvalTestCase) -> str:
        calls.append(case.input)
        started.set()
        threading.Event().wait(30)
        return "late"

    threading.Thread(target=lambda: (started.wait(30), stop.set()), daemon=True).start()
    with pytest.raises(GenerationStopped):
        generate_batch(PythonTarget(hang), cases(3), store=None, refresh=False, stop=stop)
    assert calls == ["q0"]


def test_max_concurrency_runs_cases_at_once() -> None:
    barrier = threading.Barrier(4, timeout=20)

    def together(case: EvalTestCase) -> str:
        barrier.wait()  # passes only when 4 calls are in flight at once
        return "met"

    out = generate_batch(PythonTarget(together, max_concurrency=4), cases(8), store=None, refresh=False)
    assert [g.case.actual_output for g in out] == ["met"] * 8


def test_a_custom_target_returning_a_wrong_type_errs() -> None:
    class Custom:
        name, kind, cache = "custom", "python", True

        def fingerprint(self) -> str:
            return "f"

        def case_key(self, case: EvalTestCase) -> str:
            return "k" + (case.input or "")

        def estimate_cost(self, case: EvalTestCase) -> float:
            return 0.0

        def generate(self, case: EvalTestCase) -> TargetOutput:
            return "plain"  # type: ignore[return-value]

    result = generate_case(Custom(), cases(1)[0], store=None, refresh=False)
    assert isinstance(result, GeneratedCase)
    assert result.error is not None and "returned str, not a TargetOutput" in result.error


def test_target_error_from_case_key_fails_the_case() -> None:
    class BadKey(PythonTarget):
        def case_key(self, case: EvalTestCase) -> str:
            raise TargetError("prompt.md, line 3: 'missing' is undefined")

    result = generate_case(BadKey(str), cases(1)[0], store=None, refresh=False)
    assert result.error == "prompt.md, line 3: 'missing' is undefined" and not result.requested


def test_a_credentials_error_ends_the_calls_in_flight() -> None:
    release, finished = threading.Event(), threading.Event()
    started = threading.Barrier(2, timeout=20)

    def one_rejects(case: EvalTestCase) -> str:
        started.wait()  # both calls are in flight
        if case.input == "q0":
            raise CredentialsError("HTTP 401")
        release.wait(30)  # would hold the batch for 30 s if the batch waited for it
        finished.set()
        return "late"

    try:
        with pytest.raises(CredentialsError):
            generate_batch(
                PythonTarget(one_rejects, max_concurrency=2, timeout=60), cases(2), store=None, refresh=False
            )
        assert not finished.is_set()  # the batch ended while the other call was still running
    finally:
        release.set()


def test_targets_implement_the_protocol_and_pickle(tmp_path: Path) -> None:
    import cloudpickle

    from evaltasks.targets import ChatTarget, HttpTarget, Target

    prompt = tmp_path / "p.md"
    prompt.write_text("### system\nBe brief.\n### user\n{{ input }}\n", encoding="utf-8")
    chat = ChatTarget(model="m", prompt=prompt, options={"base_url": "http://127.0.0.1:9/v1"})
    http = HttpTarget("http://127.0.0.1:9/ask")
    for target in (PythonTarget(str), chat, http):
        assert isinstance(target, Target)
        copy = cloudpickle.loads(cloudpickle.dumps(target))
        assert copy.fingerprint() == target.fingerprint()
        assert copy.case_key(cases(1)[0]) == target.case_key(cases(1)[0])
    assert cloudpickle.loads(cloudpickle.dumps(chat)).render(cases(1)[0]) == chat.render(cases(1)[0])


def test_an_output_holding_a_secret_is_redacted_and_said_once_per_target(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/reports.md#secrets-in-reports: a python target echoing a token (only the credentials of a ``Bearer``
    value) on 130 cases, generated in several batches: every output holds ``***``, every other value of the
    output keeps its Python value (NaN, tuples, bytes, a datetime; a redacted key is kept beside the one it now
    names), and the run says it once for the target, with the whole count."""
    import datetime
    import math

    from evaltasks import LengthCheckMetric, evaluate_sync

    monkeypatch.setenv("MY_TOKEN", "Bearer tok-0123456789abcdef")
    monkeypatch.setenv("EVALTASKS_SECRET_VARIABLES", "MY_TOKEN")
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)

    def bot(case: EvalTestCase) -> TargetOutput:
        return TargetOutput(
            output=f"{case.input}: your token is tok-0123456789abcdef",
            metadata={"nan": math.nan, "pair": (1, 2), "raw": b"ab", "at": when, "tok-0123456789abcdef": 1, "***": 2},
        )

    cases = [EvalTestCase(input=f"q{i}", actual_output="") for i in range(130)]
    with caplog.at_level("WARNING", logger="evaltasks.targets"):
        result = evaluate_sync(cases, [LengthCheckMetric(max_length=50)], target=PythonTarget(bot, name="bot"))
    outputs = [r.actual_output for r in result.test_results]
    assert outputs == [f"q{i}: your token is ***" for i in range(130)]
    generation = result.test_results[0].generation
    assert generation is not None
    metadata = generation.metadata
    assert math.isnan(metadata["nan"]) and metadata["pair"] == (1, 2) and metadata["raw"] == b"ab"
    assert metadata["at"] == when and metadata["***"] == 1 and metadata["*** (2)"] == 2
    assert metadata["secrets_redacted"] is True
    said = [r.getMessage() for r in caplog.records if "configured secret" in r.getMessage()]
    assert said == [
        "the target bot answered 130 of 130 cases with a configured secret in the output; it was replaced with *** "
        "before anything stored, scored or reported it (docs/reports.md#secrets-in-reports)"
    ]


def test_an_output_without_a_secret_is_the_very_same_object(monkeypatch: pytest.MonkeyPatch) -> None:
    from evaltasks.targets.generate import without_secrets

    output = TargetOutput(output="nothing secret", metadata={"k": [1, "v"]})
    monkeypatch.delenv("EVALTASKS_SECRET_VARIABLES", raising=False)
    for name in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "PREFECT_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert without_secrets(output) is output  # none configured: not even walked
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-in-this-output")
    assert without_secrets(output) is output  # configured, but absent: unchanged and unflagged
