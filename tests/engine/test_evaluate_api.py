"""evaluate() / evaluate_sync() (docs/python-api.md#python-api and docs/metrics/index.md#statuses)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from evaltasks import (
    EvalTestCase,
    EvaluationResult,
    InputError,
    LengthCheckMetric,
    ReferenceMatchMetric,
    evaluate,
    evaluate_sync,
)
from evaltasks.embeddings.local import LocalEmbeddingProvider
from evaltasks.embeddings.openai import OpenAIEmbeddingProvider
from evaltasks.metrics.text import count_words

EPS = 1e-6

REFS = ["The Eiffel Tower is in Paris.", "Paris is the capital of France."]
OUTPUTS = [
    "The Eiffel Tower is located in Paris.",  # similar, short
    "Bananas are a good source of potassium and are eaten all over the world every day.",  # unrelated, long
    "Paris is France's capital.",  # similar, short
    "I like trains.",  # unrelated, short
    "Paris, the French capital, is home to the famous Eiffel Tower and many other sights.",  # similar, long
]


def cases() -> list[EvalTestCase]:
    return [EvalTestCase(actual_output=o, input=f"question {i}") for i, o in enumerate(OUTPUTS)]


def metrics() -> list:
    return [
        ReferenceMatchMetric(threshold=0.6, references=REFS, embedding_provider="local"),
        LengthCheckMetric(max_length=8, unit="words"),
    ]


class RecordingProvider(LocalEmbeddingProvider):
    """The real local provider, recording the texts it embeds."""

    def __init__(self) -> None:
        super().__init__("all-MiniLM-L6-v2")
        self.embedded: list[str] = []
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        self.embedded += list(texts)
        return super().embed(texts)


class ProviderMetric(ReferenceMatchMetric):
    """ReferenceMatchMetric with a given provider instance (real classes; only the wiring differs)."""

    def __init__(self, provider, **kwargs) -> None:
        kwargs.setdefault("name", "ReferenceMatchMetric")
        super().__init__(embedding_provider=provider.provider, **kwargs)
        self._given = provider

    @property
    def provider(self):
        return self._given


def expected_reference_scores(cosine, outputs, refs, aggregation="max") -> list[float]:
    out = []
    for output in outputs:
        sims = np.clip(cosine(output, refs), 0.0, 1.0)
        out.append(float(sims.max() if aggregation == "max" else sims.mean()))
    return out


# -- entry points ----------------------------------------------------------------------------------------
def test_asyncio_run_evaluate(cosine) -> None:
    result = asyncio.run(evaluate(cases(), metrics()))
    assert isinstance(result, EvaluationResult)
    expected = expected_reference_scores(cosine, OUTPUTS, REFS)
    assert [abs(c.metrics[0].score - e) <= EPS for c, e in zip(result.test_results, expected)] == [True] * 5


def test_evaluate_sync_inside_a_running_event_loop(cosine) -> None:
    async def main():
        asyncio.get_running_loop()  # really inside a loop
        from_sync = evaluate_sync(cases(), metrics())
        from_async = await evaluate(cases(), metrics())
        return from_sync, from_async

    from_sync, from_async = asyncio.run(main())
    expected = expected_reference_scores(cosine, OUTPUTS, REFS)
    for a, b, e in zip(from_sync.test_results, from_async.test_results, expected):
        assert abs(a.metrics[0].score - e) <= EPS
        assert abs(b.metrics[0].score - e) <= EPS
        assert a.success is b.success


def test_results_in_input_order_and_success_needs_every_metric(cosine) -> None:
    result = evaluate_sync(cases(), metrics(), batch_size=2)  # batches of 2 over 5 cases
    assert [c.actual_output for c in result.test_results] == OUTPUTS
    assert [c.input for c in result.test_results] == [f"question {i}" for i in range(5)]
    expected_ref = expected_reference_scores(cosine, OUTPUTS, REFS)
    ref_pass = [s >= 0.6 for s in expected_ref]
    len_pass = [count_words(o) <= 8 for o in OUTPUTS]
    # the data covers all four combinations that matter
    assert ref_pass == [True, False, True, False, True], expected_ref
    assert len_pass == [True, False, True, True, False]
    for i, case in enumerate(result.test_results):
        rm, lc = case.metrics
        assert (rm.name, lc.name) == ("ReferenceMatchMetric", "LengthCheckMetric")
        assert abs(rm.score - expected_ref[i]) <= EPS
        assert rm.success is ref_pass[i]
        assert lc.success is len_pass[i]
        assert case.success is (ref_pass[i] and len_pass[i])
        assert case.status == ("passed" if case.success else "failed")
        assert rm.status == ("passed" if rm.success else "failed")


def test_summary_pass_rate_and_means(cosine) -> None:
    result = evaluate_sync(cases(), metrics())
    expected_ref = expected_reference_scores(cosine, OUTPUTS, REFS)
    expected_len = [1.0 if count_words(o) <= 8 else 0.0 for o in OUTPUTS]
    both = [r >= 0.6 and ln == 1.0 for r, ln in zip(expected_ref, expected_len)]
    summary = result.summary
    assert summary.cases == 5
    assert summary.passed_cases == sum(both) == 2
    assert summary.failed_cases == 3
    assert summary.errored_cases == summary.skipped_cases == 0
    assert abs(summary.pass_rate - sum(both) / 5) <= EPS
    assert list(summary.metrics) == ["ReferenceMatchMetric", "LengthCheckMetric"]
    rm, lc = summary.metrics["ReferenceMatchMetric"], summary.metrics["LengthCheckMetric"]
    assert abs(rm.mean_score - float(np.mean(expected_ref))) <= EPS
    assert abs(rm.pass_rate - sum(s >= 0.6 for s in expected_ref) / 5) <= EPS
    assert rm.threshold == 0.6
    assert abs(lc.mean_score - float(np.mean(expected_len))) <= EPS
    assert abs(lc.pass_rate - 3 / 5) <= EPS
    assert lc.threshold == 1.0
    assert summary.evaluation_cost == 0.0


def test_prints_nothing_unless_verbose(capsys) -> None:
    evaluate_sync(cases()[:2], metrics())
    asyncio.run(evaluate(cases()[:2], metrics()))
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_verbose_prints_a_summary(capsys) -> None:
    evaluate_sync(cases()[:2], metrics(), verbose=True)  # case 0 passes both metrics, case 1 fails both
    printed = "".join(capsys.readouterr())
    assert printed.strip()
    assert "50" in printed  # the pass rate, 1 of 2 (the table's layout belongs to evaltasks.reports)


def test_empty_case_list() -> None:
    result = evaluate_sync([], [LengthCheckMetric()])
    assert result.test_results == []
    assert result.summary.cases == 0 and result.summary.pass_rate == 0.0
    assert result.summary.metrics["LengthCheckMetric"].mean_score is None


# -- validation, all at once and before scoring ----------------------------------------------------------
def test_all_invalid_cases_reported_at_once_before_any_scoring() -> None:
    recorder = RecordingProvider()
    metric = ProviderMetric(recorder)  # references=None: each case must bring its own
    bad = [
        EvalTestCase(actual_output="ok", references=["a reference"]),
        EvalTestCase(actual_output="no references"),
        EvalTestCase(actual_output="fine", references=["another"]),
        EvalTestCase(actual_output="empty list", references=[]),
        EvalTestCase(actual_output="blank item", references=["x", " "]),
    ]
    with pytest.raises(ValueError) as info:
        evaluate_sync(bad, [metric, LengthCheckMetric()])
    error = info.value
    assert isinstance(error, InputError)
    assert [p.location for p in error.problems] == ["item 1", "item 3", "item 4"]
    assert all(p.field == "references" for p in error.problems)
    message = str(error)
    for location in ("item 1", "item 3", "item 4"):
        assert location in message
    assert "item 0" not in message and "item 2" not in message
    assert recorder.embedded == []  # nothing was embedded: validation came first


def test_async_evaluate_reports_invalid_cases_too() -> None:
    bad = [EvalTestCase(actual_output="a"), EvalTestCase(actual_output="b")]
    with pytest.raises(ValueError) as info:
        asyncio.run(evaluate(bad, [ReferenceMatchMetric(embedding_provider="local")]))
    assert "item 0" in str(info.value) and "item 1" in str(info.value)


def test_non_test_case_items_are_reported_with_the_others() -> None:
    items = [EvalTestCase(actual_output="a"), {"actual_output": "b"}, "c", EvalTestCase(actual_output="d")]
    with pytest.raises(ValueError) as info:
        evaluate_sync(items, [LengthCheckMetric()])
    assert [p.location for p in info.value.problems] == ["item 1", "item 2"]


def test_duplicate_metric_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="LengthCheckMetric"):
        evaluate_sync(cases(), [LengthCheckMetric(), LengthCheckMetric(max_length=3)])
    with pytest.raises(ValueError, match="same"):
        evaluate_sync(cases(), [LengthCheckMetric(name="same"), LengthCheckMetric(max_length=3, name="same")])
    result = evaluate_sync(cases(), [LengthCheckMetric(name="a"), LengthCheckMetric(max_length=3, name="b")])
    assert list(result.summary.metrics) == ["a", "b"]


def test_non_metric_is_rejected() -> None:
    with pytest.raises(ValueError, match="not a metric"):
        evaluate_sync(cases(), [LengthCheckMetric(), "ReferenceMatchMetric"])


# -- counts of unique texts ------------------------------------------------------------------------------
def test_counts_are_of_unique_texts(tmp_path) -> None:
    recorder = RecordingProvider()
    shared = ["Shared reference one.", "Shared reference two."]
    cases_ = [
        EvalTestCase(actual_output="Output A.", references=[shared[0], "Own reference."]),
        EvalTestCase(actual_output="Output A.", references=[shared[0], shared[1]]),  # repeated output
        EvalTestCase(actual_output="Output B.", references=[shared[1]]),
        EvalTestCase(actual_output="   ", references=[shared[0]]),  # empty: not embedded, not counted
    ]
    two_metrics = [
        ProviderMetric(recorder, name="max"),
        ProviderMetric(recorder, aggregation="mean", name="mean"),
        ProviderMetric(recorder, references=shared, name="own"),  # same texts again
    ]
    unique_refs = {shared[0], shared[1], "Own reference."}
    unique_outputs = {"Output A.", "Output B."}

    first = evaluate_sync(cases_, two_metrics, index_dir=tmp_path)
    counts = first.summary.embeddings
    assert counts.references_computed == len(unique_refs) == 3
    assert counts.references_reused == 0
    assert counts.outputs_computed == len(unique_outputs) == 2
    assert sorted(recorder.embedded) == sorted(unique_refs | unique_outputs)  # each text embedded once
    assert recorder.calls == 1  # batched: one call for the references and outputs not in the index

    recorder.embedded.clear()
    second = evaluate_sync(cases_, two_metrics, index_dir=tmp_path)  # outputs come from the index too
    counts = second.summary.embeddings
    assert (counts.references_computed, counts.references_reused, counts.outputs_computed, counts.outputs_reused) == (
        0,
        3,
        0,
        2,
    )
    assert recorder.embedded == [] and recorder.calls == 1

    recorder.embedded.clear()
    direct = evaluate_sync(cases_, two_metrics)  # no index: references and outputs embedded, none reused
    counts = direct.summary.embeddings
    assert (counts.references_computed, counts.references_reused, counts.outputs_computed, counts.outputs_reused) == (
        3,
        0,
        2,
        0,
    )
    assert recorder.calls == 3  # references, then outputs
    for a, b in zip(first.test_results, second.test_results):
        for x, y in zip(a.metrics, b.metrics):
            assert abs(x.score - y.score) <= EPS and x.success is y.success


def test_embedding_model_info_is_reported() -> None:
    from evaltasks.embeddings import get_provider

    result = evaluate_sync(cases()[:1], metrics())
    (info,) = result.embedding_models
    assert (info.provider, info.model) == ("local", "all-MiniLM-L6-v2")
    assert info.fingerprint == get_provider("local").fingerprint
    assert info.dimensions == 384


# -- run-time provider failure: errored, not a crash -----------------------------------------------------
def test_provider_failure_makes_cases_errored(monkeypatch) -> None:
    # A real OpenAI provider pointed at a closed port on this machine (no retries): the request fails at run
    # time with a connection error, which must become `errored` results, not an exception.
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    broken = OpenAIEmbeddingProvider(
        api_key="sk-test-not-used", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=5
    )
    metric = ProviderMetric(broken, references=REFS)
    result = evaluate_sync(cases()[:3], [metric, LengthCheckMetric(max_length=8, unit="words")])
    for case in result.test_results:
        rm, lc = case.metrics
        assert rm.status == "errored" and rm.score is None and rm.success is False and rm.error
        assert lc.status in ("passed", "failed") and lc.score is not None  # the other metric still ran
        assert case.status == "errored" and case.success is False
    summary = result.summary
    assert (summary.cases, summary.errored_cases, summary.passed_cases) == (3, 3, 0)
    assert summary.pass_rate == 0.0
    assert summary.metrics["ReferenceMatchMetric"].errored == 3
    assert summary.metrics["ReferenceMatchMetric"].mean_score is None


# -- case ids --------------------------------------------------------------------------------------------
def test_case_ids_follow_name_else_input_hash_with_suffixes() -> None:
    import hashlib

    items = [
        EvalTestCase(actual_output="a", input="same question"),
        EvalTestCase(actual_output="b", input="same question"),
        EvalTestCase(actual_output="c", name="named"),
        EvalTestCase(actual_output="no input"),
    ]
    result = evaluate_sync(items, [LengthCheckMetric()])
    digest = hashlib.sha256(b"same question").hexdigest()[:12]
    assert [c.id for c in result.test_results] == [
        digest,
        f"{digest}#2",
        "named",
        hashlib.sha256(b"no input").hexdigest()[:12],
    ]


# -- warm calls: outputs reused from the index across processes ------------------------------------------
@pytest.mark.slow
def test_warm_local_call_in_a_fresh_process_loads_no_model(tmp_path) -> None:
    """With index_dir, the same call in a new process embeds nothing: the model is never loaded (torch and
    sentence-transformers are not even imported) and the scores are bitwise those of the cold call."""
    from tests.fresh_process import evaluate_in_fresh_process

    rows = [{"input": f"question {i}", "actual_output": o, "references": REFS} for i, o in enumerate(OUTPUTS)]
    rows.append({"input": "echo", "actual_output": REFS[1], "references": REFS})  # an output equal to a reference
    kwargs = {"threshold": 0.6, "embedding_provider": "local"}
    cold = evaluate_sync(
        [EvalTestCase(**row) for row in rows], [ReferenceMatchMetric(**kwargs)], index_dir=tmp_path / "idx"
    )
    counts = cold.summary.embeddings
    assert (counts.references_computed, counts.references_reused, counts.outputs_computed, counts.outputs_reused) == (
        2,
        0,
        5,
        0,
    )  # the echoed reference is embedded once, as a reference

    warm = evaluate_in_fresh_process(rows, kwargs, tmp_path / "idx")
    assert warm["imported"] == []  # no torch, no sentence-transformers, no transformers
    assert warm["embeddings"] == {
        "references_computed": 0,
        "references_reused": 2,
        "outputs_computed": 0,
        "outputs_reused": 5,
    }
    assert warm["scores"] == [c.metrics[0].score for c in cold.test_results]
