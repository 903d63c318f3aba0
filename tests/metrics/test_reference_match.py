"""ReferenceMatchMetric (eval-ai-library's ReferenceMatch, docs/metrics/vector.md#referencematchmetric), on the real bundled all-MiniLM-L6-v2.

Every expected score is computed here, independently of evaltasks, with the ``cosine`` fixture
(sentence-transformers' own encode + numpy), then clamped and aggregated as the rule says.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from evaltasks import CredentialsError, EvalTestCase, ReferenceMatchMetric, evaluate, evaluate_sync
from evaltasks.embeddings import get_provider
from evaltasks.embeddings.local import LocalEmbeddingProvider
from evaltasks.engine.evaluate import collect_embedding_needs

EPS = 1e-6  # the project's equality rule for scores

SEED_REFS = [
    "Для сброса пароля перейдите в Настройки.",
    "Перейдите в Настройки > Безопасность для смены пароля.",
]
SEED_HIGH = "Перейдите в Настройки > Безопасность, чтобы сбросить пароль."
SEED_LOW = "Наша компания была основана в 2020 году и базируется в Сан-Франциско."


def expected_score(cosine, output: str, refs: list[str], aggregation: str) -> float:
    sims = np.clip(cosine(output, refs), 0.0, 1.0)
    return float(sims.max() if aggregation == "max" else sims.mean())


def local(**kwargs) -> ReferenceMatchMetric:
    return ReferenceMatchMetric(embedding_provider="local", **kwargs)


class RecordingProvider(LocalEmbeddingProvider):
    """The real local provider (same shared model), recording every text it is asked to embed."""

    def __init__(self) -> None:
        super().__init__("all-MiniLM-L6-v2")
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        return super().embed(texts)

    @property
    def embedded(self) -> list[str]:
        return [t for call in self.calls for t in call]


class RecordingMetric(ReferenceMatchMetric):
    """ReferenceMatchMetric whose provider is a :class:`RecordingProvider` (everything else unchanged)."""

    def __init__(self, recorder: RecordingProvider, **kwargs) -> None:
        super().__init__(embedding_provider="local", **kwargs)
        self._recorder = recorder

    @property
    def provider(self):
        return self._recorder


# -- parameters ------------------------------------------------------------------------------------------
def test_defaults_match_the_seed(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    metric = ReferenceMatchMetric(references=["a reference"])  # constructing needs no credentials
    assert metric.threshold == 0.7
    assert metric.aggregation == "max"
    assert metric.embedding_provider == "openai"
    assert metric.model_name == "text-embedding-3-small"
    assert metric.references == ["a reference"]
    assert metric.name == "ReferenceMatchMetric"
    assert ReferenceMatchMetric().references is None
    assert local().model_name == "all-MiniLM-L6-v2"
    assert local(model_name="sentence-transformers/all-MiniLM-L6-v2").model_name == (
        "sentence-transformers/all-MiniLM-L6-v2"
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"references": []}, "empty"),
        ({"references": [""]}, "empty"),
        ({"references": ["fine", "   "]}, "empty"),
        ({"references": "not a list"}, "list"),
        ({"references": ["ok", 3]}, "list"),
        ({"aggregation": "median"}, "aggregation"),
        ({"aggregation": "MAX"}, "aggregation"),
        ({"embedding_provider": "cohere"}, "embedding_provider"),
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": -0.1}, "threshold"),
        ({"model_name": ""}, "model_name"),
    ],
)
def test_invalid_parameters_raise_value_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ReferenceMatchMetric(**kwargs)


# -- eval-ai-library's documented examples, with the local model --------------------------------------------
def test_seed_high_example(cosine) -> None:
    metric = local(references=SEED_REFS, aggregation="max")
    result = asyncio.run(metric.evaluate(EvalTestCase(actual_output=SEED_HIGH)))
    expected = expected_score(cosine, SEED_HIGH, SEED_REFS, "max")
    assert abs(result.score - expected) <= EPS
    assert result.success is (expected >= 0.7)
    assert (
        abs(expected - 0.899) < 0.001
    )  # the figure docs/metrics/vector.md#referencematchmetric quotes for all-MiniLM-L6-v2
    assert result.evaluation_cost == 0.0


def test_seed_low_example(cosine) -> None:
    metric = local(references=SEED_REFS, aggregation="mean")
    result = asyncio.run(metric.evaluate(EvalTestCase(actual_output=SEED_LOW)))
    expected = expected_score(cosine, SEED_LOW, SEED_REFS, "mean")
    assert abs(result.score - expected) <= EPS
    assert result.success is (expected >= 0.7)
    assert abs(expected - 0.618) < 0.001


def test_seed_usage_example_through_evaluate(cosine) -> None:
    refs = [
        "Париж — столица и крупнейший город Франции.",
        "Столицей Франции является Париж.",
        "Париж, расположенный на Сене, является столицей Франции.",
    ]
    output = "Столица Франции — Париж, расположенный на берегу Сены."
    metric = local(threshold=0.75, references=refs, aggregation="max")
    results = asyncio.run(evaluate([EvalTestCase(actual_output=output)], [metric]))
    got = results.test_results[0].metrics[0]
    expected = expected_score(cosine, output, refs, "max")
    assert abs(got.score - expected) <= EPS
    assert got.success is (expected >= 0.75)
    assert results.test_results[0].success is got.success


# -- the score rule --------------------------------------------------------------------------------------
def test_max_and_mean_of_clamped_cosines(cosine) -> None:
    refs = ["The cat sat on the mat.", "A cat is sitting on a rug.", "Stock prices fell sharply today."]
    output = "A cat was sitting on the mat."
    case = EvalTestCase(actual_output=output)
    raw = cosine(output, refs)
    for aggregation in ("max", "mean"):
        result = local(references=refs, aggregation=aggregation).score_batch([case])[0]
        expected = expected_score(cosine, output, refs, aggregation)
        assert abs(result.score - expected) <= EPS
        assert result.evaluation_log["aggregation"] == aggregation
        assert len(result.evaluation_log["similarities"]) == 3
        for got, want in zip(result.evaluation_log["similarities"], np.clip(raw, 0, 1)):
            assert abs(got - want) <= EPS
    assert expected_score(cosine, output, refs, "max") - expected_score(cosine, output, refs, "mean") > 0.05


def test_negative_cosine_is_clamped_to_zero(cosine) -> None:
    output = "Paris is the capital of France."
    refs = ["apple", "The capital of France is Paris."]
    raw = cosine(output, refs)
    assert raw[0] < -0.01, f"the pair must have a negative cosine for this test to mean anything: {raw}"
    result = local(references=refs, aggregation="mean").score_batch([EvalTestCase(actual_output=output)])[0]
    clamped_mean = (0.0 + min(max(raw[1], 0.0), 1.0)) / 2
    assert abs(result.score - clamped_mean) <= EPS
    assert abs(result.score - raw.mean()) > 0.005  # without the clamp the score would differ
    assert result.evaluation_log["similarities"][0] == 0.0
    assert 0.0 <= result.score <= 1.0
    only_negative = local(references=["apple"]).score_batch([EvalTestCase(actual_output=output)])[0]
    assert only_negative.score == 0.0
    assert only_negative.success is False


def test_references_none_uses_the_case_references(cosine) -> None:
    metric = local(aggregation="mean")
    cases = [
        EvalTestCase(
            actual_output="Water boils at 100 degrees Celsius.",
            references=["Water boils at 100 °C at sea level.", "Ice melts at 0 °C."],
        ),
        EvalTestCase(actual_output="The Moon orbits the Earth.", references=["The Earth's satellite is the Moon."]),
    ]
    results = metric.score_batch(cases)
    for case, result in zip(cases, results):
        expected = expected_score(cosine, case.actual_output, case.references, "mean")
        assert abs(result.score - expected) <= EPS
        assert result.evaluation_log["reference_count"] == len(case.references)


def test_metric_references_take_precedence_over_the_case(cosine) -> None:
    own = ["Berlin is the capital of Germany."]
    case = EvalTestCase(actual_output="Berlin is Germany's capital.", references=["Bananas are yellow."])
    result = local(references=own).score_batch([case])[0]
    expected = expected_score(cosine, case.actual_output, own, "max")
    assert abs(result.score - expected) <= EPS
    assert abs(expected - expected_score(cosine, case.actual_output, case.references, "max")) > 0.1


@pytest.mark.parametrize("case_refs", [None, []])
def test_case_without_references_is_invalid(case_refs) -> None:
    metric = local()
    case = EvalTestCase(actual_output="Something.", references=case_refs)
    with pytest.raises(ValueError, match="references"):
        asyncio.run(metric.evaluate(case))
    with pytest.raises(ValueError, match="references"):
        evaluate_sync([case], [metric])


def test_case_with_an_empty_reference_is_invalid() -> None:
    case = EvalTestCase(actual_output="Something.", references=["fine", "  "])
    with pytest.raises(ValueError, match="references"):
        evaluate_sync([case], [local()])


# -- empty outputs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("output", ["", "   ", "\n\t "])
def test_empty_output_scores_zero_and_is_never_embedded(output: str) -> None:
    recorder = RecordingProvider()
    refs = ["A reference sentence.", "Another reference."]
    metric = RecordingMetric(recorder, references=refs)
    empty, full = metric.score_batch([EvalTestCase(actual_output=output), EvalTestCase(actual_output="Real text.")])
    assert empty.score == 0.0
    assert empty.success is False
    assert "empty" in empty.reason.lower()
    assert empty.evaluation_log["similarities"] == []
    assert full.score > 0.0
    assert output not in recorder.embedded
    assert "Real text." in recorder.embedded
    assert set(refs) <= set(recorder.embedded)


def test_empty_output_is_not_sent_to_the_provider_by_evaluate() -> None:
    recorder = RecordingProvider()
    metric = RecordingMetric(recorder, references=["A reference sentence."])
    cases = [EvalTestCase(actual_output=""), EvalTestCase(actual_output="  "), EvalTestCase(actual_output="Text.")]
    needs = collect_embedding_needs(cases, [metric])
    assert [list(n.outputs) for n in needs.values()] == [["Text."]]
    result = evaluate_sync(cases, [metric])
    assert recorder.embedded.count("") == 0 and recorder.embedded.count("  ") == 0
    assert sorted(recorder.embedded) == sorted(["A reference sentence.", "Text."])
    assert result.summary.embeddings.outputs_computed == 1
    assert [c.metrics[0].score for c in result.test_results][:2] == [0.0, 0.0]


def test_only_empty_outputs_embed_no_output() -> None:
    recorder = RecordingProvider()
    metric = RecordingMetric(recorder, references=["A reference sentence."])
    result = metric.score_batch([EvalTestCase(actual_output=" ")])[0]
    assert result.score == 0.0
    assert "" not in recorder.embedded and " " not in recorder.embedded


# -- result shape ----------------------------------------------------------------------------------------
def test_evaluation_log_keys_and_values() -> None:
    refs = ["One reference.", "Two references.", "Three references."]
    result = local(references=refs, name="rm").score_batch([EvalTestCase(actual_output="References.")])[0]
    log = result.evaluation_log
    assert {"similarities", "aggregation", "model", "provider", "reference_count"} <= set(log)
    assert log["aggregation"] == "max"
    assert log["model"] == "all-MiniLM-L6-v2"
    assert log["provider"] == "local"
    assert log["reference_count"] == 3
    assert len(log["similarities"]) == 3
    assert abs(result.score - max(log["similarities"])) <= EPS
    assert result.name == "rm"
    assert result.threshold == 0.7
    assert result.status == ("passed" if result.score >= 0.7 else "failed")
    assert f"{result.score:.4f}" in result.reason


def test_batch_scores_equal_one_by_one_scores(cosine) -> None:
    refs = ["Dogs are loyal animals.", "Cats like to sleep."]
    outputs = [
        "My dog is very loyal.",
        "The cat sleeps all day.",
        "Quantum computers use qubits.",
        "Dogs are loyal animals.",
    ]
    metric = local(references=refs, aggregation="mean")
    batch = metric.score_batch([EvalTestCase(actual_output=o) for o in outputs])
    for output, result in zip(outputs, batch):
        single = asyncio.run(metric.evaluate(EvalTestCase(actual_output=output)))
        assert abs(result.score - single.score) <= EPS and result.success is single.success
        assert abs(result.score - expected_score(cosine, output, refs, "mean")) <= EPS


# -- providers -------------------------------------------------------------------------------------------
def test_openai_without_key_is_a_clear_credentials_error(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    metric = ReferenceMatchMetric(references=["Paris is the capital of France."])  # default provider: openai
    case = EvalTestCase(actual_output="Paris.")
    with pytest.raises(CredentialsError) as info:
        evaluate_sync([case], [metric])
    message = str(info.value)
    assert "OPENAI_API_KEY" in message
    assert "local" in message
    assert isinstance(info.value, ValueError)
    with pytest.raises(CredentialsError, match="OPENAI_API_KEY"):
        asyncio.run(metric.evaluate(case))
    with pytest.raises(CredentialsError, match="OPENAI_API_KEY"):
        get_provider("openai")


def test_local_model_is_loaded_once_and_shared() -> None:
    import evaltasks.embeddings.local as local_module

    first, second = local(references=["x"]), local(references=["y"], aggregation="mean")
    assert first.provider is second.provider
    assert get_provider("local") is get_provider("local", "all-MiniLM-L6-v2") is first.provider
    first.score_batch([EvalTestCase(actual_output="warm up")])
    loaded = dict(local_module._MODELS)
    model = first.provider._model()
    second.score_batch([EvalTestCase(actual_output="again")])
    assert second.provider._model() is model
    # the hub-style name resolves to the same bundled files and so to the same loaded model
    aliased = local(model_name="sentence-transformers/all-MiniLM-L6-v2", references=["z"])
    aliased.score_batch([EvalTestCase(actual_output="alias")])
    assert aliased.provider._model() is model
    assert loaded == local_module._MODELS  # nothing new was loaded
    assert len([k for k in local_module._MODELS if k[0] == first.provider.model_path]) == 1


def test_local_provider_vectors_are_unit_norm_float32(st_model) -> None:
    provider = get_provider("local")
    texts = ["first text", "second, longer text about embeddings", "ß"]
    vectors = provider.embed(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    reference = st_model.encode(texts, normalize_embeddings=True)
    assert np.all(np.abs(np.sum(vectors * reference, axis=1) - 1.0) <= EPS)
    assert provider.embed([]).shape == (0, 384)


def test_concurrent_local_embeds_run_one_at_a_time_on_one_thread(st_model) -> None:
    """Embeds from many threads (a flow's concurrent embedding tasks) all run ``encode`` on one thread, in turn.

    The loaded model's ``encode`` is wrapped (then restored) only to record which thread ran it and whether two
    ran at once; the vectors come from the real model and are compared with sentence-transformers' own.
    """
    import threading
    from concurrent.futures import ThreadPoolExecutor

    provider = get_provider("local")
    model = provider._model()
    real_encode = model.encode
    threads, running, overlaps = set(), [0], []
    guard = threading.Lock()

    def recording_encode(*args, **kwargs):
        with guard:
            threads.add(threading.get_ident())
            running[0] += 1
            overlaps.append(running[0])
        try:
            return real_encode(*args, **kwargs)
        finally:
            with guard:
                running[0] -= 1

    groups = [[f"text {g}-{i} about topic {g * i}" for i in range(40)] for g in range(6)]
    model.encode = recording_encode
    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            callers = list(pool.map(lambda texts: (threading.get_ident(), provider.embed(texts)), groups))
    finally:
        del model.encode  # the instance attribute: back to the class's method
    assert len(threads) == 1 and max(overlaps) == 1 and len(overlaps) == 6
    assert threads.isdisjoint(ident for ident, _ in callers)  # not the callers' threads
    for texts, (_, vectors) in zip(groups, callers):
        expected = st_model.encode(texts, normalize_embeddings=True)
        assert np.all(np.abs(np.sum(vectors * expected, axis=1) - 1.0) <= EPS)


def test_local_embed_works_in_a_forked_child(st_model) -> None:
    """A child forked after the parent embedded starts its own encoder thread (the parent's does not exist there)."""
    import multiprocessing

    provider = get_provider("local")
    texts = ["a text embedded before the fork", "and another"]
    provider.embed(texts)
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        vectors = pool.apply_async(provider.embed, (texts,)).get(timeout=120)
    expected = st_model.encode(texts, normalize_embeddings=True)
    assert np.all(np.abs(np.sum(vectors * expected, axis=1) - 1.0) <= EPS)


def test_cancel_queued_encodes_fails_the_waiting_calls_only(st_model) -> None:
    """Ctrl+C in the CLI cancels encodes still waiting for their turn; the running one finishes, later ones work."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from evaltasks import ProviderError
    from evaltasks.embeddings import local as local_module

    provider = get_provider("local")
    device = str(provider._model().device)
    release = threading.Event()
    running = local_module._encoder(device)[0].submit(release.wait, 60)  # holds the encoder's turn
    with ThreadPoolExecutor(max_workers=3) as pool:
        waiting = [pool.submit(provider.embed, [f"queued text {i}"]) for i in range(3)]
        while local_module._encoder(device)[0]._work_queue.qsize() < 3:  # all three queued behind `running`
            threading.Event().wait(0.01)
        assert local_module.cancel_queued_encodes() == 1
        for future in waiting:
            with pytest.raises(ProviderError, match="failed to embed"):
                future.result(timeout=10)
    release.set()
    assert running.result(timeout=10) is True
    texts = ["embedded after the cancel"]
    expected = st_model.encode(texts, normalize_embeddings=True)
    assert np.all(np.abs(np.sum(provider.embed(texts) * expected, axis=1) - 1.0) <= EPS)


def test_local_encode_errors_still_become_provider_errors() -> None:
    """An error inside encode (here: a non-string text the tokenizer rejects) reaches the caller as ProviderError."""
    from evaltasks import ProviderError

    with pytest.raises(ProviderError, match="failed to embed"):
        get_provider("local").embed([None])  # type: ignore[list-item]


def test_local_truncation_is_flagged(st_model) -> None:
    """Texts longer than the model's max_seq_length (256 word pieces for all-MiniLM-L6-v2) are flagged."""
    from evaltasks import EvalTestCase, ReferenceMatchMetric, evaluate_sync

    long_output = "word " * 600
    assert len(st_model.tokenizer(long_output)["input_ids"]) > st_model.max_seq_length
    metric = ReferenceMatchMetric(embedding_provider="local", references=["a short reference", "word " * 300])
    [short, long] = evaluate_sync(
        [EvalTestCase(actual_output="a short answer"), EvalTestCase(actual_output=long_output)], [metric]
    ).test_results
    assert short.metrics[0].evaluation_log["output_truncated"] is False
    assert long.metrics[0].evaluation_log["output_truncated"] is True
    assert short.metrics[0].evaluation_log["references_truncated"] == 1
