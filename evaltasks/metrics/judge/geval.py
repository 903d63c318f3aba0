"""GEvalMetric: an LLM judge's 0-10 score against the user's criteria, weighted by its token probabilities.

Source: eval-ai-library's G-Eval page (https://library.eval-ai.com/metrics/geval) and its 0.8.2 code, after
the G-Eval paper (Liu et al. 2023, arXiv:2303.16634), and docs/metrics/judge.md#gevalmetric:

1. evaluation steps: the given ``evaluation_steps``, else generated from ``criteria`` by the judge in one
   request per metric (not per case; the judge's answer store keeps it across runs);
2. one scoring request per case: the judge reasons, then answers an integer score 0..10 in JSON, with the 20
   most likely alternatives of every token (``top_logprobs``); the score token's alternatives that are integers
   0..10, renormalised, give p(s), and score = Σ p(s)·s / 10 (the paper's probability-weighted summation);
3. where the judge returns no log-probabilities, ``n_samples`` completions at ``sampling_temperature`` (in one
   request with the chat API's ``n``, topped up by further requests where the endpoint returns fewer) estimate
   p(s) by frequency: score = mean of the sampled scores / 10, which is eval-ai-library's method.

Differences from eval-ai-library 0.8.2, on purpose: it always samples 20 completions (one request each) and
asks a further request for the reason; here the reason comes with the score, and sampling runs only where
log-probabilities are missing. Its judge answers a float 0.0-1.0; here an integer 0-10 (one token's
distribution, as in the paper) divided by 10.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar

from annotated_types import Ge, MinLen

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import quote
from evaltasks.judges.base import (
    BudgetExhausted,
    Choice,
    JudgeError,
    JudgeReply,
    JudgeRequest,
    TokenLogprob,
    as_messages,
)
from evaltasks.judges.prompts import PromptError
from evaltasks.metrics.base import NonEmptyStr
from evaltasks.metrics.judge.base import Asker, Judged, JudgeMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

TOP_LOGPROBS = 20
"""Alternatives per token asked for in the scoring request (the OpenAI API's maximum)."""
SCORE_MAX_TOKENS = 400
"""Completion tokens a score answer may use (a reason of a few sentences and the score): what the budget and
``--max-cost`` reserve per completion."""

STEPS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"steps": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
    "required": ["steps"],
    "additionalProperties": False,
}
"""The answer of a steps request: ``{"steps": ["...", ...]}``."""

SCORE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"reason": {"type": "string"}, "score": {"type": "integer", "enum": list(range(11))}},
    "required": ["reason", "score"],
    "additionalProperties": False,
}
"""The answer of a scoring request: ``{"reason": str, "score": 0..10}`` (reason first: the score follows it)."""

_SCORE_KEY = re.compile(r'"score"\s*:\s*')
_INTEGER = re.compile(r"(\d+)(\D*)")


def _probability(logprob: float) -> float:
    return math.exp(logprob) if math.isfinite(logprob) else 0.0


def score_distribution(tokens: Sequence[TokenLogprob]) -> dict[int, float]:
    """p(s) for s in 0..10 from the log-probabilities of a scoring answer (``{"reason": ..., "score": N}``).

    The score's token is the one covering the first character after the last ``"score":`` of the answer; its
    ``top`` alternatives (with that token's text before the value, e.g. a space, removed) that read as an
    integer 0..10 keep their probabilities; others (words, punctuation, 11 and up) are ignored. A score of 10
    written as two tokens ``"1"``, ``"0"``: the alternative ``"1"`` of the chosen token ``"1"`` is split into
    10 with the probability of ``"0"`` at the next position and 1 with the rest. The result is renormalised to
    sum to 1.

    Raises:
        JudgeError: no ``"score":`` in the tokens, or no alternative at that position is an integer 0..10.
    """
    text = "".join(t.token for t in tokens)
    matches = list(_SCORE_KEY.finditer(text))
    if not matches:
        raise JudgeError('the judge\'s answer has no "score" among its token log-probabilities')
    start = matches[-1].end()
    position = 0
    for index, token in enumerate(tokens):  # noqa: B007
        if position + len(token.token) > start:
            break
        position += len(token.token)
    else:
        raise JudgeError("the judge's answer ends before the score's token")
    chosen = tokens[index]
    prefix = chosen.token[: start - position]
    following = tokens[index + 1] if index + 1 < len(tokens) else None
    zero_next = 0.0  # p("0" next | "1" here): the chance that a chosen bare "1" is the first half of "10"
    if following is not None:
        alternatives = following.top or ((following.token, following.logprob),)
        zero_next = min(
            1.0,
            math.fsum(_probability(lp) for tok, lp in alternatives if tok.startswith("0") and not tok[1:2].isdigit()),
        )

    def value(token: str) -> tuple[int, bool] | None:
        """(integer, bare) for a token reading as an integer 0..10 after the prefix; bare: nothing after it."""
        if prefix and token.startswith(prefix):
            token = token[len(prefix) :]
        found = _INTEGER.fullmatch(token.strip())
        if found is None or int(found.group(1)) > 10 or len(found.group(1)) > 2:
            return None
        return int(found.group(1)), not found.group(2)

    chosen_value = value(chosen.token)
    chosen_is_bare_one = chosen_value == (1, True)
    mass: dict[int, float] = {}
    for text, logprob in chosen.top or ((chosen.token, chosen.logprob),):
        parsed = value(text)
        if parsed is None:
            continue
        p = _probability(logprob)
        if parsed == (1, True) and chosen_is_bare_one:
            mass[10] = mass.get(10, 0.0) + p * zero_next
            mass[1] = mass.get(1, 0.0) + p * (1.0 - zero_next)
        else:
            mass[parsed[0]] = mass.get(parsed[0], 0.0) + p
    total = math.fsum(mass.values())
    if total <= 0.0:
        raise JudgeError(f"no alternative of the score's token {chosen.token!r} is an integer from 0 to 10")
    return {s: mass[s] / total for s in sorted(mass) if mass[s] > 0.0}


class EvaluationSteps:
    """Evaluation steps generated from criteria once per metric and judge model, shared by its cases.

    The first case that needs them sends the steps request (the others wait for it); the request is the same
    for every case and sample (sample 0), so the judge's answer store serves it in later runs. A failure is
    remembered for the rest of the batch (each of its cases is errored or skipped with it) and forgotten by
    :meth:`forget_failures`. Picklable (the lock and failures are not carried).
    """

    def __init__(self, prompt: str = "steps") -> None:
        self.prompt = prompt
        self._lock = threading.Lock()
        self._steps: dict[str, list[str]] = {}
        self._failures: dict[str, BaseException] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "_steps": dict(self._steps)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["prompt"])  # type: ignore[misc]
        self._steps.update(state["_steps"])

    def known(self, model: str) -> list[str] | None:
        """The steps generated for ``model`` so far, or None."""
        return self._steps.get(model)

    def forget_failures(self) -> None:
        """Let the next batch try the steps request again."""
        with self._lock:
            self._failures.clear()

    def get(self, asker: Asker, criteria: str) -> list[str]:
        """The steps for ``criteria`` from ``asker``'s judge, asking for them (through ``asker``, which is
        charged for the request) when this metric has none yet.

        Raises:
            JudgeError, PromptError: the steps request failed (now or earlier in this batch).
            BudgetExhausted: the budget does not allow it.
        """
        model = asker.judge.model
        with self._lock:
            if model in self._steps:
                return self._steps[model]
            failure = self._failures.get(model)
            if failure is not None:
                raise type(failure)(str(failure))
            try:
                steps = steps_of(asker.ask(self.prompt, {"criteria": criteria}, STEPS_SCHEMA, sample=0))
            except (JudgeError, PromptError) as exc:
                self._failures[model] = type(exc)(f"generating the evaluation steps failed: {exc}")
                raise self._failures[model] from None
            except BudgetExhausted as exc:
                self._failures[model] = exc
                raise
            self._steps[model] = steps
            return steps


def steps_of(reply: JudgeReply) -> list[str]:
    """The evaluation steps of a steps request's answer (``{"steps": [...]}``), stripped, empty ones dropped.

    Raises:
        JudgeError: no step left.
    """
    steps = [str(s).strip() for s in reply.parsed["steps"] if str(s).strip()]
    if not steps:
        raise JudgeError("the judge answered no evaluation steps")
    return steps


def case_variables(case: EvalTestCase) -> dict[str, Any]:
    """The test case's text for a template's user part: input ("" when absent), actual_output,
    expected_output and retrieval_context (None when absent)."""
    return {
        "input": case.input or "",
        "actual_output": case.actual_output,
        "expected_output": case.expected_output,
        "retrieval_context": case.retrieval_context,
    }


def check_steps(evaluation_steps: list[str] | None) -> list[str] | None:
    """``evaluation_steps`` stripped. Raises ValueError unless it is None or a non-empty list of non-empty
    strings."""
    if evaluation_steps is None:
        return None
    if (
        not isinstance(evaluation_steps, list)
        or not evaluation_steps
        or not all(isinstance(s, str) and s.strip() for s in evaluation_steps)
    ):
        raise ValueError(
            f"evaluation_steps must be a non-empty list of non-empty strings, got {quote(evaluation_steps)}"
        )
    return [s.strip() for s in evaluation_steps]


class CriteriaMetric(JudgeMetric):
    """A judge metric graded against a user's ``criteria`` by ``evaluation_steps`` (given, or generated from the
    criteria by the judge once per metric): the shared part of GEvalMetric and CustomEvalMetric.

    Args:
        threshold, model: as :class:`~evaltasks.metrics.judge.base.JudgeMetric`.
        criteria: what to evaluate, in words (trusted text: it goes into the instructions). Required unless
            ``evaluation_steps`` are given.
        evaluation_steps: the steps the judge follows; None: generated from ``criteria`` once per metric (the
            metric's ``steps`` prompt).
        samples, judge_options, prompts, name: as :class:`~evaltasks.metrics.judge.base.JudgeMetric`.

    Raises:
        ValueError: neither ``criteria`` nor ``evaluation_steps``, an empty ``criteria``, steps that are not a
            non-empty list of non-empty strings, or an invalid common argument.
    """

    shared_prompts: ClassVar[tuple[str, ...]] = ("steps",)

    def __init__(
        self,
        threshold: float,
        model: str | None = None,
        criteria: str | None = None,
        evaluation_steps: list[str] | None = None,
        *,
        samples: int = 1,
        judge_options: dict[str, Any] | None = None,
        prompts: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, model, samples=samples, judge_options=judge_options, prompts=prompts, name=name)
        if criteria is not None and (not isinstance(criteria, str) or not criteria.strip()):
            raise ValueError(f"criteria must be a non-empty string, got {quote(criteria)}")
        self.criteria = criteria.strip() if criteria is not None else None
        self.evaluation_steps = check_steps(evaluation_steps)
        if self.criteria is None and self.evaluation_steps is None:
            raise ValueError(f"{type(self).__name__} needs criteria or evaluation_steps")
        self._generated = EvaluationSteps()
        self._estimated_steps = False
        self._estimate_with: list[str] = [self.criteria or ""]  # the steps estimate_steps found (per batch)

    def config(self) -> dict[str, Any]:
        """The common judge configuration plus criteria and evaluation_steps."""
        return {**super().config(), "criteria": self.criteria, "evaluation_steps": self.evaluation_steps}

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case needs an ``input`` (the question the output answers; an empty one is allowed)."""
        if case.input is None:
            return [("input", "is missing")]
        return []

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """As :meth:`JudgeMetric.score_batch`; a steps request that failed in an earlier batch is tried again."""
        self._generated.forget_failures()
        self._estimated_steps = False
        return super().score_batch(cases, vectors)

    def steps(self, asker: Asker) -> list[str]:
        """The evaluation steps: the given ones, else those generated from the criteria (once per metric).

        Raises:
            JudgeError, PromptError, BudgetExhausted: the steps request failed or was not allowed.
        """
        if self.evaluation_steps is not None:
            return self.evaluation_steps
        assert self.criteria is not None
        return self._generated.get(asker, self.criteria)

    def estimate_steps(self) -> tuple[list[JudgeRequest], list[str]]:
        """For :meth:`estimate_requests`: the steps request when the steps are not known yet and no earlier call
        in this batch included it (it is sent once per metric), and the steps to estimate the case's request
        with: the steps stored in the run's answer store for that request where there are (so the cases'
        stored answers are found and cost nothing), else the criteria itself standing in for steps not
        generated yet."""
        steps = self.evaluation_steps or self._generated.known(self.model)
        if steps is not None:
            return [], steps
        request = JudgeRequest(
            messages=as_messages(self.template("steps").render({"criteria": self.criteria})),
            schema=STEPS_SCHEMA,
            schema_name="steps",
            temperature=self.request_temperature(shared=True),
        )
        requests = []
        if not self._estimated_steps:
            self._estimated_steps = True
            self._estimate_with = self._stored_steps(request) or [self.criteria or ""]
            requests.append(request)
        return requests, self._estimate_with

    def _stored_steps(self, request: JudgeRequest) -> list[str] | None:
        """The steps the run's answer store holds for the steps ``request``, or None (no store bound, none
        stored, or an answer without steps)."""
        runtime = self.judge_runtime
        if runtime is None or (runtime.store_dir is None and runtime.budget is None):
            return None  # no store: and get_judge would build a client, which needs a key
        stored = getattr(self.judge(), "stored", None)
        reply = stored(request) if stored is not None else None
        try:
            return steps_of(reply) if reply is not None else None
        except (JudgeError, KeyError, TypeError):
            return None

    def judge_has_logprobs(self) -> bool:
        """Whether the judge is expected to return log-probabilities (for estimates): the run's ``judge=``
        function's ``supports_logprobs``, else unless ``judge_options`` says ``logprobs: false``."""
        runtime = self.judge_runtime
        if runtime is not None and runtime.judge is not None:
            return bool(runtime.judge.supports_logprobs)
        return self.judge_options.get("logprobs", "auto") is not False


@register_metric("GEvalMetric")
class GEvalMetric(CriteriaMetric):
    """G-Eval: the judge scores the case 0..10 against ``criteria`` by ``evaluation_steps``; the score is the
    probability-weighted mean of the score's token, divided by 10.

    score = Σ_s p(s)·s / 10 over s in 0..10, p from the score token's ``top_logprobs`` (renormalised over
    the integers 0..10); without log-probabilities, the mean of ``n_samples`` sampled scores / 10.

    Args:
        threshold: minimum passing score, in [0, 1].
        model: the judge model; None: the suite's ``judge: {model}``, else ``gpt-4o-mini``.
        criteria: what to evaluate, in words (trusted text: it goes into the instructions). Required unless
            ``evaluation_steps`` are given.
        evaluation_steps: the steps the judge follows; None: generated from ``criteria`` once per metric.
        n_samples: completions sampled per case where the judge has no log-probabilities (>= 1).
        sampling_temperature: the judge's sampling temperature for those completions (>= 0).
        samples: how many times each case is judged (see :class:`~evaltasks.metrics.judge.base.JudgeMetric`).
        judge_options: the judge client's options (docs/judges.md#llm-judges).
        prompts: ``steps`` and/or ``score`` -> a template file replacing the built-in prompt.
        name: the name in results (default ``"GEvalMetric"``).

    Raises:
        ValueError: neither ``criteria`` nor ``evaluation_steps``, an empty ``criteria``, invalid steps,
            ``n_samples`` < 1, a negative ``sampling_temperature``, or an invalid common argument.

    A case needs ``input`` and ``actual_output``; ``expected_output`` and ``retrieval_context`` are shown to the
    judge when present. Requests per case: 1 (the judge returns log-probabilities), else 1 plus one per
    completion the endpoint leaves out of ``n``; plus 1 per metric for generated steps. ``evaluation_log``:
    ``method`` (``"logprobs"`` or ``"sampling"``), ``score_distribution`` (score -> probability, or frequency of
    the samples), ``evaluation_steps``, ``criteria``, ``reason``, with the judge's account (see the base).
    """

    version: ClassVar[str] = "1"
    required_fields: ClassVar[tuple[str, ...]] = ("input", "actual_output")
    prompt_names: ClassVar[tuple[str, ...]] = ("steps", "score")

    def __init__(
        self,
        threshold: float,
        model: str | None = None,
        criteria: NonEmptyStr | None = None,
        evaluation_steps: Annotated[list[NonEmptyStr], MinLen(1)] | None = None,
        n_samples: Annotated[int, Ge(1)] = 20,
        sampling_temperature: Annotated[float, Ge(0)] = 2.0,
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
        if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
            raise ValueError(f"n_samples must be an integer >= 1, got {quote(n_samples)}")
        if (
            isinstance(sampling_temperature, bool)
            or not isinstance(sampling_temperature, (int, float))
            or not math.isfinite(sampling_temperature)
            or sampling_temperature < 0
        ):
            raise ValueError(f"sampling_temperature must be a number >= 0, got {quote(sampling_temperature)}")
        self.n_samples = n_samples
        self.sampling_temperature = float(sampling_temperature)

    def config(self) -> dict[str, Any]:
        """The criteria metric's configuration plus n_samples and sampling_temperature."""
        return {**super().config(), "n_samples": self.n_samples, "sampling_temperature": self.sampling_temperature}

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """Score one sample of ``case``: by log-probabilities, else by sampling (see the class docstring).

        Raises:
            JudgeError: a request failed, or an answer does not parse or carries no readable score token.
        """
        steps = self.steps(asker)
        variables = {"criteria": self.criteria, "evaluation_steps": steps, **case_variables(case)}
        probe = getattr(asker.judge, "probing_logprobs", None)
        with probe() if probe is not None else contextlib.nullcontext():  # one request learns the endpoint's
            if asker.judge.supports_logprobs:  # logprobs: one wasted in all, at most
                reply = asker.ask(
                    "score", variables, SCORE_SCHEMA, top_logprobs=TOP_LOGPROBS, max_tokens=SCORE_MAX_TOKENS
                )
                tokens = reply.logprobs
                if tokens is not None:
                    distribution = score_distribution(tokens)
                    score = math.fsum(p * s for s, p in distribution.items()) / 10.0
                    return self._judged(
                        score,
                        "logprobs",
                        distribution,
                        steps,
                        str(reply.parsed["reason"]),
                        "probability-weighted over the score token's alternatives",
                    )
        choices = self._sample(asker, variables)
        counts = Counter(int(c.parsed["score"]) for c in choices)
        frequency = {s: counts[s] / len(choices) for s in sorted(counts)}
        score = math.fsum(int(c.parsed["score"]) for c in choices) / len(choices) / 10.0
        return self._judged(
            score,
            "sampling",
            frequency,
            steps,
            str(choices[0].parsed["reason"]),
            f"mean of {len(choices)} sampled scores",
        )

    def _sample(self, asker: Asker, variables: dict[str, Any]) -> list[Choice]:
        """``n_samples`` completions at ``sampling_temperature``: one request with ``n``, then requests for the
        rest while the endpoint returns fewer (each asks ``n`` = the number still missing, so each is a
        different stored answer).

        Raises:
            JudgeError: a request returned no completion.
        """
        choices: list[Choice] = []
        while len(choices) < self.n_samples:
            missing = self.n_samples - len(choices)
            reply = asker.ask(
                "score",
                variables,
                SCORE_SCHEMA,
                temperature=self.sampling_temperature,
                n=missing,
                max_tokens=SCORE_MAX_TOKENS,
            )
            if not reply.choices:
                raise JudgeError("the judge returned no completion")
            choices.extend(reply.choices[:missing])
        return choices

    def _judged(
        self, score: float, method: str, distribution: dict[int, float], steps: list[str], reason: str, how: str
    ) -> Judged:
        """The :class:`Judged` of one sample, with its evaluation_log (``how``: the method, in words)."""
        score = min(1.0, max(0.0, score))
        log = {
            "method": method,
            "score_distribution": {str(s): round(p, 6) for s, p in distribution.items()},
            "evaluation_steps": list(steps),
            "criteria": self.criteria,
            "reason": reason,
        }
        return Judged(score, f"G-Eval score {score:.4f} ({how}). {reason}", log)

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The scoring request of ``case`` (with top_logprobs; where the judge has no log-probabilities, the
        sampling request with ``n`` = ``n_samples``), preceded by the steps request as
        :meth:`CriteriaMetric.estimate_steps` says (once per metric)."""
        requests, steps = self.estimate_steps()
        messages = as_messages(
            self.template("score").render(
                {"criteria": self.criteria, "evaluation_steps": steps, **case_variables(case)}
            )
        )
        if self.judge_has_logprobs():
            requests.append(
                JudgeRequest(
                    messages=messages,
                    schema=SCORE_SCHEMA,
                    schema_name="score",
                    temperature=self.request_temperature(),
                    top_logprobs=TOP_LOGPROBS,
                    max_tokens=SCORE_MAX_TOKENS,
                )
            )
        else:
            requests.append(
                JudgeRequest(
                    messages=messages,
                    schema=SCORE_SCHEMA,
                    schema_name="score",
                    temperature=self.sampling_temperature,
                    n=self.n_samples,
                    max_tokens=SCORE_MAX_TOKENS,
                )
            )
        return requests
