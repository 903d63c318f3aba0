"""CustomEvalMetric: the judge's verdict per evaluation criterion on a five-level scale, aggregated with
temperature-controlled strictness.

Source: eval-ai-library's Custom Metrics page (https://library.eval-ai.com/metrics/custom-metric/) and its 0.8.2
code (``metrics/custom_metric/custom_eval.py``, ``utils.score_agg``), and
docs/metrics/judge.md#customevalmetric:

1. evaluation criteria: the given ``evaluation_steps``, else generated from the high-level ``criteria`` by the
   judge in one request per metric (not per case; the judge's answer store keeps it across runs);
2. one request per case: a verdict per criterion, ``fully`` / ``mostly`` / ``partial`` / ``minor`` / ``none``,
   weighted 1.0 / 0.9 / 0.7 / 0.3 / 0.0 (eval-ai-library's ``VERDICT_WEIGHTS``);
3. score = score_agg(weights, temperature): the power mean of the weights with the exponent set by
   ``temperature`` (0.1 strict, near the minimum; 0.5 the arithmetic mean; 1.0 lenient, near the maximum),
   times a penalty for the share of ``none`` verdicts (:func:`evaltasks.metrics.judge._aggregation.score_agg`).

The parameters are those of the docs page (``criteria``, ``evaluation_steps``, ``temperature`` = 0.8). The 0.8.2
code's other form (a list of criteria with ``{{placeholders}}``, ``strategy: direct``, ``n_runs`` with
majority/median voting, ``not_applicable`` verdicts, few-shot examples) is not offered: ``samples: K`` repeats a
case, as for every judge metric. A verdict list of the wrong length is asked again within ``content_retries``,
as by every verdict metric, then errors the case, where eval-ai-library pads it with ``none`` or cuts it.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar

from annotated_types import Ge, MinLen

from evaltasks.errors import quote
from evaltasks.judges.base import JudgeRequest, as_messages
from evaltasks.metrics.base import NonEmptyStr
from evaltasks.metrics.judge._aggregation import VERDICT_WEIGHTS, score_agg
from evaltasks.metrics.judge._verdicts import ask_verdicts, max_tokens_for
from evaltasks.metrics.judge.base import Asker, Judged
from evaltasks.metrics.judge.geval import CriteriaMetric, case_variables
from evaltasks.metrics.registry import register_metric
from evaltasks.test_case import EvalTestCase


def verdicts_schema(count: int) -> dict[str, Any]:
    """The answer of a verdicts request: ``{"verdicts": [{"verdict": one of VERDICT_WEIGHTS, "reason": str}]}``
    with exactly ``count`` items."""
    return {
        "type": "object",
        "properties": {
            "verdicts": {
                "type": "array",
                "minItems": count,
                "maxItems": count,
                "items": {
                    "type": "object",
                    "properties": {
                        "verdict": {"type": "string", "enum": list(VERDICT_WEIGHTS)},
                        "reason": {"type": "string"},
                    },
                    "required": ["verdict", "reason"],
                    "additionalProperties": False,
                },
            }
        },
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


@register_metric("CustomEvalMetric")
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
        samples: how many times each case is judged (see :class:`~evaltasks.metrics.judge.base.JudgeMetric`).
        judge_options: the judge client's options (docs/judges.md#llm-judges).
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
        evaluation_steps: Annotated[list[NonEmptyStr], MinLen(1)] | None = None,
        temperature: Annotated[float, Ge(0)] = 0.8,
        *,
        samples: int = 1,
        judge_options: dict[str, Any] | None = None,
        prompts: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(
            threshold,
            model,
            criteria,
            evaluation_steps,
            samples=samples,
            judge_options=judge_options,
            prompts=prompts,
            name=name,
        )
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not math.isfinite(temperature)
            or temperature < 0
        ):
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
        _, answers = ask_verdicts(
            asker,
            "verdicts",
            variables,
            verdicts_schema(len(steps)),
            len(steps),
            "criterion",
            max_tokens=max_tokens_for(len(steps)),
            plural="criteria",
        )
        labels = [str(a["verdict"]) for a in answers]
        weights = [VERDICT_WEIGHTS[label] for label in labels]
        score = score_agg(weights, temperature=self.temperature)
        log = {
            "criteria": self.criteria,
            "evaluation_steps": list(steps),
            "temperature": self.temperature,
            "verdicts": [
                {"criterion": step, "verdict": label, "weight": weight, "reason": str(a["reason"])}
                for step, label, weight, a in zip(steps, labels, weights, answers)
            ],
        }
        return Judged(min(1.0, max(0.0, score)), summary(labels), log)

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The verdicts request of ``case``, preceded by the steps request as
        :meth:`~evaltasks.metrics.judge.geval.CriteriaMetric.estimate_steps` says (once per metric)."""
        requests, steps = self.estimate_steps()
        messages = as_messages(
            self.template("verdicts").render(
                {"criteria": self.criteria, "evaluation_steps": steps, **case_variables(case)}
            )
        )
        requests.append(
            JudgeRequest(
                messages=messages,
                schema=verdicts_schema(len(steps)),
                schema_name="verdicts",
                temperature=self.request_temperature(),
                max_tokens=max_tokens_for(len(steps)),
            )
        )
        return requests
