"""What HarmfulContent, PromptInjectionDetection and JailbreakDetection share: a judge mode (one request, a
validated ``{"detected", "confidence", <type>, ...}`` answer) and a local-classifier mode (a Hugging Face
sequence-classification model run on this machine through ``transformers``, offline).

Both modes produce a risk in [0, 1] (how likely the text is an attack / harmful); the metric's score is
``1 - risk`` (1.0 = clean), so a case passes when ``score >= threshold`` as every evaltasks metric does
(docs/metrics/security.md#detection-metrics). eval-ai-library reports the risk itself and passes when it is
below its threshold: its ``threshold: t`` is ``threshold: 1 - t`` here.

``transformers`` and ``torch`` are imported only when a classifier is first run (``import evaltasks`` and the
judge mode never pay for them). A model is loaded once per process per folder; it is read from disk only
(``HF_HUB_OFFLINE``, ``local_files_only``): a Hugging Face id must already be in the local Hugging Face cache.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from evaltasks._env import set_default_env
from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import bounded, quote
from evaltasks.judges.base import Judge, JudgeError, JudgeReply, JudgeRequest
from evaltasks.judges.function import FunctionJudge
from evaltasks.metrics.judge._verdicts import REASON, first_request
from evaltasks.metrics.judge.base import Asker, Judged, JudgeMetric
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

DETECTION_METHODS = ("llm_judge", "model")
"""``detection_method`` values: an LLM judge (default) or a local classifier."""

SAFE_LABELS = frozenset(
    {
        "safe",
        "benign",
        "neutral",
        "clean",
        "ok",
        "normal",
        "legit",
        "legitimate",
        "non_toxic",
        "not_toxic",
        "nontoxic",
        "negative",
        "no_injection",
        "not_jailbreak",
    }
)
"""Classifier label names (after :func:`normalise_label`) that mean "no harm": every other label of a model that
has one counts as harmful unless ``harmful_labels`` says which do."""

MAX_TOKENS = 400
"""Completion tokens allowed for a judge's detection answer."""

BATCH_SIZE = 16
"""Texts per forward pass of a local classifier."""


def normalise_label(name: object) -> str:
    """A classifier label compared case-insensitively, ``-`` and spaces read as ``_`` (``"Non-Toxic"`` ->
    ``"non_toxic"``)."""
    return str(name).strip().lower().replace("-", "_").replace(" ", "_")


# -- the local classifier -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HeadSpec:
    """A classifier's output head, as its ``config.json`` describes it.

    Attributes:
        labels: label name per output index (``id2label``, in index order).
        multi_label: True when the outputs are independent sigmoids (``problem_type ==
            "multi_label_classification"``, or one output), False for a softmax over the labels; the rule of
            transformers' text-classification pipeline.
        harmful: indices of the labels that count as harm.
    """

    labels: tuple[str, ...]
    multi_label: bool
    harmful: tuple[int, ...]

    def risk(self, probabilities: Sequence[float]) -> float:
        """The risk of one text: the summed probability of the harmful labels (softmax: they exclude each other),
        or the largest one (sigmoids: independent)."""
        values = [float(probabilities[i]) for i in self.harmful]
        risk = max(values) if self.multi_label else math.fsum(values)
        return min(1.0, max(0.0, round(risk, 10)))


def resolve_model_folder(model_name: str) -> Path | None:
    """The folder holding ``model_name``: the path itself when it is a folder here, else the snapshot of that
    Hugging Face id in the local Hugging Face cache; None when neither exists (never downloads)."""
    path = Path(model_name).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.is_absolute() or model_name.startswith((".", "~")):
        return None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model_name, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached, not a repo id, or no huggingface_hub
        return None


def read_head(folder: Path, harmful_labels: Sequence[str] | None, model_name: str) -> HeadSpec:
    """The :class:`HeadSpec` of the model in ``folder`` from its ``config.json`` (no ``transformers`` import).

    Harmful labels: ``harmful_labels`` when given (each must be one of the model's labels, compared by
    :func:`normalise_label`); else every label that is not a safe label (:data:`SAFE_LABELS`); a one-output
    model's only label.

    Raises:
        ValueError: no readable ``config.json``, no labels, a ``harmful_labels`` entry the model lacks, or no safe
            label to tell harm from (a ``LABEL_0``/``LABEL_1`` head: pass ``harmful_labels``).
    """
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        raw = config.get("id2label") or {}
        labels = tuple(str(raw[key]) for key in sorted(raw, key=int))
    except (OSError, ValueError, AttributeError, TypeError, KeyError) as exc:
        raise ValueError(f"model_name {quote(model_name)}: cannot read its config.json in {folder}: {exc}") from None
    if not labels:  # transformers leaves its default labels out of config.json: LABEL_0 ... (2 of them)
        try:
            labels = tuple(f"LABEL_{i}" for i in range(int(config.get("num_labels") or 2)))
        except (TypeError, ValueError):
            raise ValueError(f"model_name {quote(model_name)}: its config.json has no usable labels") from None
    multi_label = config.get("problem_type") == "multi_label_classification" or len(labels) == 1
    names = [normalise_label(label) for label in labels]
    if harmful_labels:
        unknown = [h for h in harmful_labels if normalise_label(h) not in names]
        if unknown:
            raise ValueError(
                f"harmful_labels: {', '.join(map(quote, unknown))} not among the labels of {model_name} "
                f"({', '.join(labels)})"
            )
        wanted = {normalise_label(h) for h in harmful_labels}
        harmful = tuple(i for i, n in enumerate(names) if n in wanted)
    elif len(labels) == 1:
        harmful = (0,)
    else:
        harmful = tuple(i for i, n in enumerate(names) if n not in SAFE_LABELS)
        if len(harmful) == len(labels) and not multi_label:
            raise ValueError(
                f"model_name {quote(model_name)}: none of its labels ({', '.join(labels)}) is a safe label "
                f"({', '.join(sorted(SAFE_LABELS))}), so which ones mean harm is a guess; name them with "
                "harmful_labels"
            )
        if not harmful:
            raise ValueError(f"model_name {quote(model_name)}: all its labels ({', '.join(labels)}) are safe labels")
    return HeadSpec(labels, multi_label, harmful)


_MODELS: dict[str, tuple[Any, Any, Any]] = {}  # folder -> (tokenizer, model, device), once per process
_MODELS_LOCK = threading.Lock()
_RUNNER: ThreadPoolExecutor | None = None  # the one thread every classification runs on (see classify)
_RUNNER_LOCK = threading.Lock()


def _runner() -> ThreadPoolExecutor:
    """The process's classification thread, started on first use."""
    global _RUNNER
    with _RUNNER_LOCK:
        if _RUNNER is None:
            _RUNNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evaltasks-classifier")
        return _RUNNER


def _forget_runner_after_fork() -> None:
    """A forked child has none of its parent's threads (nor the OpenMP team torch started on them): it starts its
    own classification thread."""
    global _RUNNER, _RUNNER_LOCK
    _RUNNER, _RUNNER_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_runner_after_fork)


def _loaded(folder: Path, model_name: str) -> tuple[Any, Any, Any]:
    """The tokenizer, model and device of ``folder``, loaded on first use (offline).

    Raises:
        ValueError: transformers/torch missing, or the model does not load.
    """
    key = str(folder)
    with _MODELS_LOCK:
        if key not in _MODELS:
            set_default_env("HF_HUB_OFFLINE", "1")
            set_default_env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            try:
                import torch
                from transformers import AutoModelForSequenceClassification, AutoTokenizer
            except ImportError as exc:
                raise ValueError(f"the classifier mode needs transformers and torch: {exc}") from None
            try:
                tokenizer = AutoTokenizer.from_pretrained(key, local_files_only=True)
                model = AutoModelForSequenceClassification.from_pretrained(key, local_files_only=True)
            except Exception as exc:  # noqa: BLE001 - any load failure is the model's problem
                raise ValueError(f"cannot load the classifier {model_name} ({folder}): {exc}") from None
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model.to(device)
            model.eval()
            _MODELS[key] = (tokenizer, model, device)
        return _MODELS[key]


def classify(folder: Path, model_name: str, multi_label: bool, texts: Sequence[str]) -> list[list[float]]:
    """Each text's label probabilities (sigmoid or softmax, as ``multi_label``), ``BATCH_SIZE`` texts per
    forward pass, each truncated to the model's input limit (at most 512 tokens).

    Every classification of the process runs on one thread of its own, one at a time: a fast tokenizer is not
    safe to call from several threads at once, and a child forked after its parent ran torch on a thread hangs
    when it runs torch on that same thread (GNU OpenMP's thread team does not survive a fork; the embedding
    model's encodes run on their own thread for the same reason).

    Raises:
        ValueError: the model does not load or fails on the texts.
    """
    return _runner().submit(_classify, folder, model_name, multi_label, list(texts)).result()


def _classify(folder: Path, model_name: str, multi_label: bool, texts: Sequence[str]) -> list[list[float]]:
    tokenizer, model, device = _loaded(folder, model_name)
    import torch

    limit = min(512, int(getattr(tokenizer, "model_max_length", 512) or 512))
    found: list[list[float]] = []
    try:
        for start in range(0, len(texts), BATCH_SIZE):
            batch = [str(t) for t in texts[start : start + BATCH_SIZE]]
            encoded = tokenizer(batch, truncation=True, padding=True, max_length=limit, return_tensors="pt")
            with torch.no_grad():
                logits = model(**encoded.to(device)).logits.float()
            probabilities = torch.sigmoid(logits) if multi_label else torch.softmax(logits, dim=-1)
            found += probabilities.cpu().tolist()
    except Exception as exc:  # noqa: BLE001 - a model that fails on the input errors the cases
        raise ValueError(f"the classifier {model_name} failed: {type(exc).__name__}: {exc}") from None
    return found


def _fingerprint(folder: Path) -> str:
    """A digest of the model's config and weight files (hashed once per process while they are unchanged)."""
    from evaltasks.embeddings.local import _local_fingerprint

    return _local_fingerprint(folder)


def _no_requests(messages: list[dict[str, str]]) -> str:
    raise RuntimeError("the classifier mode sends no judge requests")


# -- the metric ------------------------------------------------------------------------------------------------
class DetectionMetric(JudgeMetric):
    """Base of the detection metrics: a risk from an LLM judge or a local classifier, scored ``1 - risk``.

    Subclasses set ``subject`` (the case field judged: ``"input"`` or ``"actual_output"``), ``what`` (a phrase
    for reasons: "prompt injection"), ``type_key`` and ``types`` (the judge's kind label and its values, ``"none"``
    last), ``default_model_name`` (the classifier used with ``detection_method="model"``), and ship the prompt
    ``evaltasks/judges/prompts/<ClassName>/detect.md``.

    Raises:
        ValueError: an unknown ``detection_method``; ``harmful_labels`` in the judge mode; with ``"model"``:
            ``samples`` > 1, a ``model_name`` that is neither a folder nor in the local Hugging Face cache, or
            labels that cannot be resolved (:func:`read_head`); and what :class:`JudgeMetric` raises.
    """

    prompt_names: ClassVar[tuple[str, ...]] = ("detect",)
    subject: ClassVar[str] = "input"
    what: ClassVar[str] = "attack"
    type_key: ClassVar[str] = "type"
    types: ClassVar[tuple[str, ...]] = ("none",)
    default_model_name: ClassVar[str] = ""

    def __init__(
        self,
        threshold: float,
        model: str | None = None,
        *,
        detection_method: str = "llm_judge",
        model_name: str | None = None,
        harmful_labels: list[str] | None = None,
        samples: int = 1,
        judge_options: dict[str, Any] | None = None,
        prompts: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, model, samples=samples, judge_options=judge_options, prompts=prompts, name=name)
        if detection_method not in DETECTION_METHODS:
            raise ValueError(
                f"detection_method must be one of {', '.join(DETECTION_METHODS)}, got {quote(detection_method)}"
            )
        if model_name is not None and (not isinstance(model_name, str) or not model_name.strip()):
            raise ValueError(f"model_name must be a Hugging Face model id or a folder, got {quote(model_name)}")
        if harmful_labels is not None and (
            not isinstance(harmful_labels, list)
            or not harmful_labels
            or not all(isinstance(h, str) for h in harmful_labels)
        ):
            raise ValueError(f"harmful_labels must be a non-empty list of label names, got {quote(harmful_labels)}")
        if harmful_labels is not None and detection_method != "model":
            raise ValueError("harmful_labels applies to the classifier mode (detection_method: model)")
        self.detection_method = detection_method
        self.model_name = model_name or self.default_model_name
        self.harmful_labels = list(harmful_labels) if harmful_labels else None
        self._folder: Path | None = None
        self._head: HeadSpec | None = None
        if detection_method == "model":
            if samples != 1:
                raise ValueError("samples applies to the judge mode; a classifier gives one answer per text")
            folder = resolve_model_folder(self.model_name)
            if folder is None:
                raise ValueError(
                    f"model_name {quote(self.model_name)} is neither a folder here nor in the local Hugging Face "
                    f"cache; the classifier mode never downloads: fetch it first (huggingface-cli download "
                    f"{self.model_name}) or give the folder's path"
                )
            self._folder, self._head = folder, read_head(folder, self.harmful_labels, self.model_name)

    # -- configuration -----------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """The judge mode: threshold, name, the judge's configuration (:meth:`JudgeMetric.judge_config`) and
        ``detection_method``; the classifier mode: threshold, name, ``model_name``, a digest of its files and the
        harmful labels (so a retrained model is another cache key)."""
        if self._folder is None or self._head is None:
            return {**super().config(), "detection_method": self.detection_method}
        harmful = [self._head.labels[i] for i in self._head.harmful]
        return {
            "threshold": self.threshold,
            "name": self.name,
            "detection_method": self.detection_method,
            "model_name": self.model_name,
            "model_fingerprint": _fingerprint(self._folder),
            "harmful_labels": harmful,
        }

    def judge(self) -> Judge:
        """The judge mode: the configured judge (:meth:`JudgeMetric.judge`); the classifier mode: a stand-in
        that is never asked (no credentials needed, no price, no cost)."""
        if self.detection_method == "model":
            return FunctionJudge(_no_requests, model=f"local:{self.model_name}")
        return super().judge()

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """The judged field (``subject``) must be present."""
        return [(self.subject, "is missing")] if getattr(case, self.subject) is None else []

    # -- judge mode ----------------------------------------------------------------------------------------
    def answer_schema(self) -> dict[str, Any]:
        """The judge's answer: ``detected``, ``confidence``, the kind label (``type_key``, one of ``types``),
        ``indicators`` (quoted phrases) and ``reason``; every property required."""
        properties: dict[str, Any] = {
            "detected": {"type": "boolean"},
            "confidence": {"type": "number"},
            self.type_key: {"type": "string", "enum": list(self.types)},
            "indicators": {"type": "array", "items": {"type": "string"}},
            "reason": REASON,
        }
        return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}

    def prompt_variables(self, case: EvalTestCase) -> dict[str, Any]:
        """The prompt's variables: the judged field (subclasses add their configuration)."""
        return {self.subject: getattr(case, self.subject) or ""}

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The judge mode's one request; none for the classifier mode."""
        if self.detection_method == "model":
            return []
        return [first_request(self, "detect", self.prompt_variables(case), self.answer_schema(), max_tokens=MAX_TOKENS)]

    def checked_answer(self, answer: Mapping[str, Any]) -> float:
        """The risk the answer states: ``confidence`` when ``detected``, else ``1 - confidence``.

        Raises:
            JudgeError: ``confidence`` outside [0, 1], or a kind label that contradicts ``detected`` ("none" for a
                detection, another kind for none): an unusable answer, asked again (``content_retries``).
        """
        confidence = float(answer["confidence"])
        if not 0.0 <= confidence <= 1.0:
            raise JudgeError(f"the judge's confidence {confidence!r} is outside [0, 1]")
        kind = answer[self.type_key]
        if bool(answer["detected"]) == (kind == "none"):
            raise JudgeError(
                f"the judge's answer contradicts itself: detected {str(answer['detected']).lower()} with "
                f"{self.type_key} {kind!r}"
            )
        return confidence if answer["detected"] else 1.0 - confidence

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """One request; the score is ``1 - risk`` (:meth:`checked_answer`).

        Raises:
            JudgeError: still an unusable answer after ``content_retries``, or a failed request.
        """

        def check(reply: JudgeReply) -> None:
            self.checked_answer(reply.parsed)

        reply = asker.ask(
            "detect", self.prompt_variables(case), self.answer_schema(), max_tokens=MAX_TOKENS, check=check
        )
        answer = reply.parsed
        risk = self.checked_answer(answer)
        score = round(1.0 - risk, 10)
        verdict = f"{self.what} detected" if answer["detected"] else f"no {self.what}"
        reason = f"{verdict[0].upper()}{verdict[1:]} (risk {risk:.2f}): {bounded(str(answer['reason']), 300)}"
        log = {
            "detection_method": "llm_judge",
            "judged_field": self.subject,
            "detected": bool(answer["detected"]),
            "confidence": float(answer["confidence"]),
            "risk": risk,
            self.type_key: answer[self.type_key],
            "indicators": list(answer["indicators"]),
            **self.extra_log(answer),
        }
        return Judged(score, reason, log)

    def extra_log(self, answer: Mapping[str, Any]) -> dict[str, Any]:
        """More ``evaluation_log`` entries from a judge's answer (subclasses); none by default."""
        return {}

    # -- scoring -------------------------------------------------------------------------------------------
    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """The judge mode: :meth:`JudgeMetric.score_batch`. The classifier mode: the batch's texts through the
        local model, each case scored ``1 - risk``; a model that fails to load or run errors every case of the
        batch (the reason says why)."""
        if self._folder is None or self._head is None:
            return super().score_batch(cases, vectors)
        if not cases:
            return []
        head = self._head
        try:
            found = classify(self._folder, self.model_name, head.multi_label, [self._text(c) for c in cases])
        except ValueError as exc:
            return [MetricResult.errored(self.name, self.threshold, f"ValueError: {exc}") for _ in cases]
        return [self._classified(head, probabilities) for probabilities in found]

    def _text(self, case: EvalTestCase) -> str:
        return str(getattr(case, self.subject) or "")

    def _classified(self, head: HeadSpec, probabilities: Sequence[float]) -> MetricResult:
        risk = head.risk(probabilities)
        per_label = {label: round(float(p), 6) for label, p in zip(head.labels, probabilities, strict=True)}
        harmful = [head.labels[i] for i in head.harmful]
        top = max(harmful, key=lambda label: per_label[label])
        how = "largest" if head.multi_label else "summed"
        reason = (
            f"Classifier {self.model_name}: risk {risk:.3f} ({how} probability of {', '.join(harmful)}; "
            f"highest {top} {per_label[top]:.3f})."
        )
        log = {
            "detection_method": "model",
            "judged_field": self.subject,
            "model_name": self.model_name,
            "multi_label": head.multi_label,
            "harmful_labels": harmful,
            "label_probabilities": per_label,
            "risk": risk,
        }
        return MetricResult.scored(self.name, round(1.0 - risk, 10), self.threshold, reason, log)
