"""CustomEvalMetric: the judge's verdict per evaluation criterion on a five-level scale, aggregated with
temperature-controlled strictness.

Source: eval-ai-library's Custom Metrics page (https://library.eval-ai.com/metrics/custom-metric/) and its 0.8.2
code (``metrics/custom_metric/custom_eval.py``, ``utils.score_agg``), and the README's "Metrics and their exact
rules":

1. evaluation criteria: the given ``evaluation_steps``, else generated from the high-level ``criteria`` by the
   judge in one request per metric (not per case; the judge's answer store keeps it across runs);
2. one request per case: a verdict per criterion, ``fully`` / ``mostly`` / ``partial`` / ``minor`` / ``none``,
   weighted 1.0 / 0.9 / 0.7 / 0.3 / 0.0 (eval-ai-library's ``VERDICT_WEIGHTS``);
3. score = score_agg(weights, temperature): the power mean of the weights with the exponent set by
   ``temperature`` (0.1 strict, near the minimum; 0.5 the arithmetic mean; 1.0 lenient, near the maximum),
   times a penalty for the share of ``none`` verdicts (:func:`score_agg`).

The parameters are those of the docs page (``criteria``, ``evaluation_steps``, ``temperature`` = 0.8). The 0.8.2
code's other form (a list of criteria with ``{{placeholders}}``, ``strategy: direct``, ``n_runs`` with
majority/median voting, ``not_applicable`` verdicts, few-shot examples) is not offered: ``samples: K`` repeats a
case, as for every judge metric. A verdict list of the wrong length is an error of that answer (the case is
errored), where eval-ai-library pads it with ``none`` or cuts it.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from evaltasks.errors import quote
from evaltasks.judges.base import JudgeError, JudgeRequest, as_messages
from evaltasks.metrics.base import NonEmptyStr
from evaltasks.metrics.geval import CriteriaMetric, case_variables
from evaltasks.metrics.judge import Asker, Judged
from evaltasks.test_case import EvalTestCase

VERDICT_WEIGHTS: dict[str, float] = {"fully": 1.0, "mostly": 0.9, "partial": 0.7, "minor": 0.3, "none": 0.0}
"""The weight of each verdict (eval-ai-library 0.8.2's ``VERDICT_WEIGHTS``)."""


def _power_exponent(temperature: float) -> float:
    """eval-ai-library's map of an aggregation temperature to a power-mean exponent: clamped to [0.1, 1.0], then
    linear from -8 (0.1) through 1 (0.5) to 12.25 (1.0)."""
    t = max(0.1, min(1.0, temperature))
    return -8.0 + (t - 0.1) / (1.0 - 0.1) * (12.25 - -8.0)  # the same float operations as eval-ai-library


def score_agg(weights: list[float], temperature: float = 0.5) -> float:
    """eval-ai-library 0.8.2's ``utils.score_agg``: the power mean M_p of ``weights`` (p from ``temperature``,
    :func:`_power_exponent`; zeros taken as 1e-9 when p < 0; the geometric mean when p is 0) times the penalty
    (1 - share of zeros) ^ alpha, alpha = (1.5 - temperature) * min(1, (n - 1) / 4); rounded to 4 decimals.
    0.0 for no weights."""
    if not weights:
        return 0.0
    p = _power_exponent(temperature)
    base = [w if w > 0.0 else 1e-9 for w in weights] if p < 0 else list(weights)
    if abs(p) < 1e-12:
        mean = math.exp(sum(math.log(w if w > 0 else 1e-9) for w in base) / len(base))
    else:
        mean = (sum(w ** p for w in base) / len(base)) ** (1.0 / p)  # sum, not fsum: its rounding, bit for bit
    n = len(weights)
    zeros = sum(1 for w in weights if w == 0.0) / n
    alpha = (1.5 - temperature) * min(1.0, (n - 1) / 4.0)
    return round(mean * (1.0 - zeros) ** alpha, 4)


def verdicts_schema(count: int) -> dict[str, Any]:
    """The answer of a verdicts request: ``{"verdicts": [{"verdict": one of VERDICT_WEIGHTS, "reason": str}]}``
    with exactly ``count`` items."""
    return {
        "type": "object",
        "properties": {"verdicts": {
            "type": "array", "minItems": count, "maxItems": count,
            "items": {"type": "object",
                      "properties": {"verdict": {"type": "string", "enum": list(VERDICT_WEIGHTS)},
                                     "reason": {"type": "string"}},
                      "required": ["verdict", "reason"], "additionalProperties": False},
        }},
        "required": ["verdicts"],
        "additionalProperties": False,
    }


def summary(verdicts: list[str]) -> str:
    """eval-ai-library's summary sentence of a case's verdicts: strong when at least 70 % are fully/mostly,
    weak when at least 70 % are none/minor/partial, else mixed."""
    total = len(verdicts)
    positive = sum(v in ("fully", "mostly") for v in verdicts)
    negative = total - positive
    if total and positive >= total * 0.7:
        return f"Strong performance: {positive}/{total} criteria fully or mostly satisfied."
    if total and negative >= total * 0.7:
        return f"Weak performance: {negative}/{total} criteria not satisfied or minimally addressed."
    return f"Mixed performance: {positive}/{total} criteria satisfied, with room for improvement."


class CustomEvalMetric(CriteriaMetric):
    """Your own criteria, judged one by one: score = score_agg(verdict weights, temperature).

    Args:
        threshold: minimum passing score, in [0, 1].
        model: the judge model; None: the suite's ``judge: {model}``, else ``gpt-4o-mini``.
        criteria: what to evaluate, a high-level description (trusted text: it goes into the instructions).
            Required unless ``evaluation_steps`` are given.
        evaluation_steps: the specific criteria the judge gives a verdict on, one each; None: generated from
            ``criteria`` once per metric.
        temperature: aggregation strictness in [0.1, 1.0] (values outside are clamped by the rule): 0.1 close to
            the lowest verdict, 0.5 the mean, 1.0 close to the highest. Not the judge's sampling temperature
            (that is ``judge_options: {temperature}``).
        samples: how many times each case is judged (see :class:`~evaltasks.metrics.judge.JudgeMetric`).
        judge_options: the judge client's options (README, "LLM judges").
        prompts: ``steps`` and/or ``verdicts`` -> a template file replacing the built-in prompt.
        name: the name in results (default ``"CustomEvalMetric"``).

    Raises:
        ValueError: neither ``criteria`` nor ``evaluation_steps``, an empty ``criteria``, invalid steps, a
            ``temperature`` that is not a number >= 0, or an invalid common argument.

    A case needs ``input`` and ``actual_output``; ``expected_output`` and ``retrieval_context`` are shown to the
    judge when present. Requests per case: 1; plus 1 per metric for generated criteria. ``evaluation_log``:
    ``criteria``, ``evaluation_steps``, ``verdicts`` (``criterion``, ``verdict``, ``weight``, ``reason`` each),
    ``temperature``, with the judge's account (see the base).
    """

    version: ClassVar[str] = "1"
    required_fields: ClassVar[tuple[str, ...]] = ("input", "actual_output")
    prompt_names: ClassVar[tuple[str, ...]] = ("steps", "verdicts")

    def __init__(
        self,
        threshold: float,
        model: str | None = None,
        criteria: NonEmptyStr | None = None,
        evaluation_steps: list[NonEmptyStr] | None = None,
        temperature: float = 0.8,
        *,
        samples: int = 1,
        judge_options: dict[str, Any] | None = None,
        prompts: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, model, criteria, evaluation_steps, samples=samples,
                         judge_options=judge_options, prompts=prompts, name=name)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
                or not math.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be a number >= 0, got {quote(temperature)}")
        self.temperature = float(temperature)

    def config(self) -> dict[str, Any]:
        """The criteria metric's configuration plus temperature."""
        return {**super().config(), "temperature": self.temperature}

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """One verdict request for ``case``; the score from its verdicts' weights.

        Raises:
            JudgeError: a request failed or its answer does not parse (a verdict list of the wrong length
                included).
        """
        steps = self.steps(asker)
        variables = {"criteria": self.criteria, "evaluation_steps": steps, **case_variables(case)}
        reply = asker.ask("verdicts", variables, verdicts_schema(len(steps)))
        answers = reply.parsed["verdicts"]
        if len(answers) != len(steps):  # the schema says so; a user's judge= function may not check it
            raise JudgeError(f"the judge answered {len(answers)} verdicts for {len(steps)} criteria")
        labels = [str(a["verdict"]) for a in answers]
        weights = [VERDICT_WEIGHTS[label] for label in labels]
        score = score_agg(weights, temperature=self.temperature)
        log = {"criteria": self.criteria, "evaluation_steps": list(steps), "temperature": self.temperature,
               "verdicts": [{"criterion": step, "verdict": label, "weight": weight, "reason": str(a["reason"])}
                            for step, label, weight, a in zip(steps, labels, weights, answers)]}
        return Judged(min(1.0, max(0.0, score)), summary(labels), log)

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The verdicts request of ``case``, preceded by the steps request as
        :meth:`~evaltasks.metrics.geval.CriteriaMetric.estimate_steps` says (once per metric)."""
        requests, steps = self.estimate_steps()
        messages = as_messages(self.template("verdicts").render(
            {"criteria": self.criteria, "evaluation_steps": steps, **case_variables(case)}))
        requests.append(JudgeRequest(messages=messages, schema=verdicts_schema(len(steps)), schema_name="verdicts",
                                     temperature=float(self.judge_options.get("temperature", 0.0))))
        return requests
