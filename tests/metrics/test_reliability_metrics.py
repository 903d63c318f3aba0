"""The reliability metrics scored directly (docs/metrics/reliability.md#reliability-metrics): OutcomeConsistency,
PromptRobustness and ContextDecay on hand-built cases, expected values worked out by hand or by an edit distance
computed here (a plain dynamic-programming Levenshtein, not rapidfuzz); each of eval-ai-library 0.8.2's defects
as a regression test, the library's behaviour named in the test's docstring."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from evaltasks import (
    ContextDecayMetric,
    EvalTestCase,
    ExactMatchMetric,
    OutcomeConsistencyMetric,
    PromptRobustnessMetric,
    evaluate_sync,
)
from evaltasks.errors import InputError
from evaltasks.reliability_metrics import OutcomeConsistencyMetric as AliasOutcome
from evaltasks.test_case import ConversationalEvalTestCase, Variant


def levenshtein(a: str, b: str) -> int:
    """Edit distance by the textbook dynamic programme (independent of rapidfuzz)."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def sim(a: str, b: str) -> float:
    """The documented similarity: stripped, lower-cased, 1 - distance / longer length."""
    a, b = a.strip().lower(), b.strip().lower()
    if a == b:
        return 1.0
    return 1 - levenshtein(a, b) / max(len(a), len(b))


def score(metric, case):  # noqa: ANN001, ANN201 - a test helper
    return asyncio.run(metric.evaluate(case))


# -- OutcomeConsistencyMetric ------------------------------------------------------------------------------------


def test_outcome_consistency_is_the_share_of_agreeing_pairs() -> None:
    outputs = ["Paris", "paris ", "Paris, France", "Lyon"]
    case = EvalTestCase(actual_output="Paris", multi_outputs=outputs)
    # by hand: "paris"/"paris" 1.0; paris vs "paris, france": 1 - 8/13; "paris"/"lyon": 1 - 5/5 = 0
    assert levenshtein("paris", "paris, france") == 8 and levenshtein("paris", "lyon") == 5
    expected_sims = [sim(a, b) for a, b in itertools.combinations(outputs, 2)]
    assert expected_sims[0] == 1.0 and expected_sims[1] == pytest.approx(5 / 13)
    result = score(OutcomeConsistencyMetric(), case)
    assert result.score == pytest.approx(1 / 6)  # only the first pair of six reaches 0.85
    assert result.evaluation_log["pairs"] == 6 and result.evaluation_log["agreeing_pairs"] == 1
    assert result.evaluation_log["mean_similarity"] == pytest.approx(sum(expected_sims) / 6)
    assert not result.success and "1 of 6 pairs" in result.reason
    # a lower bar lets "paris, france" agree with both "paris" (5/13 = 0.385): 3 of 6 pairs
    assert score(OutcomeConsistencyMetric(similarity_threshold=0.38), case).score == pytest.approx(3 / 6)


def test_outcome_consistency_reads_multi_outputs_where_the_library_scores_one_output() -> None:
    """eval-ai-library 0.8.2 never reads ``multi_outputs`` (its ``_get_outputs_for_case`` falls back to the one
    ``actual_output``), so every case scores 1.0 whatever the runs said. Here three disagreeing runs fail."""
    case = EvalTestCase(actual_output="yes", multi_outputs=["yes", "no", "maybe later"])
    result = score(OutcomeConsistencyMetric(), case)
    assert result.score == 0.0 and result.status == "failed"


def test_outcome_consistency_without_repeats_is_an_input_error() -> None:
    """eval-ai-library 0.8.2 scores a case with fewer than two outputs 1.0 ("consistency cannot be measured");
    here it is invalid input, named by its field."""
    metric = OutcomeConsistencyMetric()
    for outputs in (None, ["only one"]):
        case = EvalTestCase(actual_output="x", multi_outputs=outputs)
        assert [f for f, _ in metric.validate_case(case)] == ["multi_outputs"]
        with pytest.raises(ValueError, match="multi_outputs"):
            score(metric, case)
    with pytest.raises(InputError, match="multi_outputs"):
        evaluate_sync([EvalTestCase(actual_output="x")], [metric])


def test_outcome_consistency_arguments_and_alias() -> None:
    assert AliasOutcome is OutcomeConsistencyMetric
    metric = OutcomeConsistencyMetric()
    assert (metric.threshold, metric.similarity_threshold) == (0.7, 0.85)
    with pytest.raises(ValueError, match="similarity_threshold"):
        OutcomeConsistencyMetric(similarity_threshold=1.5)


# -- PromptRobustnessMetric -------------------------------------------------------------------------------------


def _robust_case() -> EvalTestCase:
    return EvalTestCase(
        input="What is the capital of France?",
        actual_output="Paris",
        expected_output="Paris",
        variants=[
            Variant(perturbation="casing", input="what is the capital of France?", actual_output="paris"),
            Variant(perturbation="typos", input="What is teh capital of France?", actual_output="Paris!"),
            Variant(perturbation="punctuation", input="What is the capital of France", actual_output="Lyon"),
        ],
    )


def test_prompt_robustness_compares_each_variant_with_the_original_output() -> None:
    case = _robust_case()
    sims = [sim("Paris", v.actual_output) for v in case.variants or []]
    assert sims == [1.0, pytest.approx(1 - 1 / 6), 0.0]  # "paris!" is one insertion from "paris"
    result = score(PromptRobustnessMetric(), case)  # similarity_threshold 0.6
    assert result.score == pytest.approx(2 / 3)
    details = result.evaluation_log["details"]
    assert [d["agrees"] for d in details] == [True, True, False]
    assert [d["similarity"] for d in details] == [pytest.approx(s) for s in sims]
    assert [d["perturbation"] for d in details] == ["casing", "typos", "punctuation"]
    assert score(PromptRobustnessMetric(similarity_threshold=0.9), case).score == pytest.approx(1 / 3)


def test_prompt_robustness_compare_verdict_compares_pass_fail() -> None:
    """``compare: verdict``: a variant agrees when the verdict metric passes (fails) it as it passes (fails) the
    original: "Paris" passes ExactMatch (case-insensitive); "paris" passes, "Paris!" and "Lyon" fail."""
    metric = PromptRobustnessMetric(
        compare="verdict", verdict_metric={"metric": "ExactMatchMetric", "case_sensitive": False}
    )
    result = score(metric, _robust_case())
    assert result.score == pytest.approx(1 / 3)
    assert [d["verdict"] for d in result.evaluation_log["details"]] == [True, False, False]
    # an original that fails: variants that fail too agree with it
    failing = _robust_case().model_copy(update={"expected_output": "Lyon"})
    assert score(PromptRobustnessMetric(compare="verdict", verdict_metric=ExactMatchMetric()), failing).score == (
        pytest.approx(2 / 3)
    )


def test_prompt_robustness_without_variants_is_an_input_error() -> None:
    """eval-ai-library 0.8.2's ``evaluate`` scores any single case 1.0 ("requires multiple test cases"): a suite
    using it passes without ever testing robustness. Here a case without variants is invalid input."""
    case = EvalTestCase(input="q", actual_output="a")
    assert [f for f, _ in PromptRobustnessMetric().validate_case(case)] == ["variants"]
    with pytest.raises(InputError, match="variants"):
        evaluate_sync([case], [PromptRobustnessMetric()])


def test_prompt_robustness_arguments() -> None:
    with pytest.raises(ValueError, match="compare"):
        PromptRobustnessMetric(compare="paraphrase")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="verdict_metric"):
        PromptRobustnessMetric(compare="verdict")
    with pytest.raises(ValueError, match="verdict_metric"):
        PromptRobustnessMetric(compare="verdict", verdict_metric={"metric": "NoSuchMetric"})
    with pytest.raises(ValueError, match="needs embeddings or a judge"):
        PromptRobustnessMetric(
            compare="verdict", verdict_metric={"metric": "SemanticSimilarityMetric", "embedding_provider": "local"}
        )


# -- ContextDecayMetric -----------------------------------------------------------------------------------------


def _conversation() -> ConversationalEvalTestCase:
    turns = [
        EvalTestCase(input="My name is Ada and I live in Oslo.", actual_output="Nice to meet you, Ada."),
        EvalTestCase(input="I have a cat called Tom.", actual_output="Tom sounds lovely."),
        EvalTestCase(input="What's my name?", actual_output="Your name is Ada."),
        EvalTestCase(input="Where do I live?", actual_output="You live in Bergen."),
        EvalTestCase(input="And my cat?", actual_output="Your cat is called Tom."),
    ]
    return ConversationalEvalTestCase(turns=turns)


FACTS = [
    {"fact": "Ada", "introduced_at": 0, "used_at": 2},  # d=2, found in "Your name is Ada."
    {"fact": "Oslo", "introduced_at": 0, "used_at": 3},  # d=3, missing ("Bergen")
    {"fact": "Tom", "introduced_at": 1, "used_at": 4},  # d=3, found
    {"fact": "x", "introduced_at": 0, "used_at": 8, "correctly_used": False},  # d=8, given
]


def test_context_decay_weights_each_distance_as_the_library() -> None:
    result = score(ContextDecayMetric(context_facts=FACTS), _conversation())
    # CRA: d=2 -> 1, d=3 -> 1/2, d=8 -> 0; weights 1/(1+0.2d): 1/1.4, 1/1.6, 1/2.6
    w = {2: 1 / 1.4, 3: 1 / 1.6, 8: 1 / 2.6}
    expected = (1 * w[2] + 0.5 * w[3] + 0 * w[8]) / sum(w.values())
    assert result.score == pytest.approx(expected)
    assert result.evaluation_log["cra_by_depth"] == {"2": 1.0, "3": 0.5, "8": 0.0}
    assert result.evaluation_log["short_range_avg"] == pytest.approx(0.75)
    assert result.evaluation_log["mid_range_avg"] is None and result.evaluation_log["long_range_avg"] == 0.0
    assert result.status == "failed"  # 0.49 < 0.7


def test_context_decay_without_facts_or_with_a_fact_used_before_it_is_introduced_is_an_input_error() -> None:
    """eval-ai-library 0.8.2 scores a conversation without ``context_facts`` 1.0 and silently drops a fact whose
    ``used_at`` precedes its ``introduced_at``; both are invalid input here."""
    metric = ContextDecayMetric()
    assert [f for f, _ in metric.validate_case(_conversation())] == ["context_facts"]
    backward = [{"fact": "Ada", "introduced_at": 3, "used_at": 1}]
    with pytest.raises(ValueError, match=r"context_facts\[0\]: used_at 1 is before introduced_at 3"):
        ContextDecayMetric(context_facts=backward)  # the suite's mistake, named once at the metric
    own = _conversation().model_copy(update={"vars": {"context_facts": backward}})  # a row's own column
    (problem,) = ContextDecayMetric().validate_case(own)
    assert "before introduced_at" in problem[1]
    with pytest.raises(ValueError, match="context_facts"):
        score(metric, _conversation())
    past = ContextDecayMetric(context_facts=[{"fact": "Ada", "introduced_at": 0, "used_at": 9}])
    assert "past the conversation" in past.validate_case(_conversation())[0][1]
    assert ContextDecayMetric.case_kind == "conversation"


def test_context_decay_scores_a_conversation_through_evaluate_sync() -> None:
    result = evaluate_sync([_conversation()], [ContextDecayMetric(context_facts=FACTS)])
    (case,) = result.test_results
    w = {2: 1 / 1.4, 3: 1 / 1.6, 8: 1 / 2.6}
    assert case.metrics[0].score == pytest.approx((w[2] + 0.5 * w[3]) / sum(w.values()))
    assert case.status == "failed"


def test_evaluate_sync_runs_the_target_on_perturbed_variants() -> None:
    from evaltasks.reliability_metrics import PerturbationSpec
    from evaltasks.targets import PythonTarget

    def bot(case: EvalTestCase) -> str:
        return "Paris" if (case.input or "")[:1].isupper() else "I am not sure"

    cases = [EvalTestCase(input="Capital of France?", actual_output="")]
    casing = evaluate_sync(
        cases, [PromptRobustnessMetric()], target=PythonTarget(bot), perturbations=PerturbationSpec(kinds=["casing"])
    )
    (case,) = casing.test_results
    assert len(case.variants or []) == 3  # the default count; casing lowers all or the first letter
    assert all(v.input in ("capital of france?", "capital of France?") for v in case.variants or [])
    assert [v.actual_output for v in case.variants or []] == ["I am not sure"] * 3
    assert case.metrics[0].score == 0.0  # sim("paris", "i am not sure") < 0.6
    punctuation = evaluate_sync(
        cases,
        [PromptRobustnessMetric()],
        target=PythonTarget(bot),
        perturbations=PerturbationSpec(kinds=["punctuation"], count=2),
    )
    (case,) = punctuation.test_results
    assert [(v.perturbation, v.input, v.actual_output) for v in case.variants or []] == [
        ("punctuation", "Capital of France", "Paris")
    ] * 2
    assert case.metrics[0].score == 1.0


def test_context_decay_reads_each_conversation_rows_own_facts_through_a_suite(tmp_path: Path) -> None:
    """A conversation dataset's ``context_facts`` column is that conversation's facts (it wins over the metric's):
    two rows with different facts score differently through the CLI's plan and the in-process engine."""
    import json

    from evaltasks.engine.run import plan_run

    turns = [{"input": t.input, "actual_output": t.actual_output} for t in _conversation().turns]
    rows = [
        {"id": "kept", "turns": turns, "context_facts": [{"fact": "Ada", "introduced_at": 0, "used_at": 2}]},
        {"id": "lost", "turns": turns, "context_facts": [{"fact": "Oslo", "introduced_at": 0, "used_at": 3}]},
    ]
    (tmp_path / "chats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: decay\ndataset: chats.jsonl\nmetrics:\n  - metric: ContextDecayMetric\n", encoding="utf-8"
    )
    plan = plan_run(tmp_path / "suite.yaml")
    result = evaluate_sync(plan.dataset.cases, plan.suite.metrics, ids=plan.dataset.ids)
    assert [(r.id, r.metrics[0].score) for r in result.test_results] == [("kept", 1.0), ("lost", 0.0)]
