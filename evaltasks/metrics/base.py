"""The metric protocol: a name, a threshold, required fields, and batch scoring.

A metric scores many test cases in one call (:meth:`BaseMetric.score_batch`); :meth:`BaseMetric.evaluate`
(one case, async) is the eval-ai-library-compatible convenience built on it. Metrics never import Prefect.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar

import numpy as np
from annotated_types import Ge, Interval, MinLen

from evaltasks.embeddings.base import EmbeddingProvider, VectorTable
from evaltasks.errors import quote
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

# Constraints of constructor arguments in their type hints: the suite JSON Schema is generated from them
# (evaltasks.inputs.suite.metric_arguments_schema); the constructors check the same rules themselves.
NonEmptyStr = Annotated[str, MinLen(1)]
"""A string of at least one character."""
UnitFloat = Annotated[float, Interval(ge=0, le=1)]
"""A number in [0, 1]."""
NonNegativeInt = Annotated[int, Ge(0)]
"""An integer >= 0."""


@dataclass
class EmbeddingNeed:
    """The texts one provider must embed for a run: references (index-backed) and outputs.

    Attributes:
        provider: the provider that embeds them.
        options: the keyword arguments the provider was created with (to re-create it in a worker).
        references: unique reference texts (first-seen order) -> number of case × metric uses.
        outputs: unique non-empty outputs (first-seen order) -> number of case × metric uses.
        index_only: texts of ``references`` whose vectors the run's scoring never reads from its vector table:
            a reference set's (its search reads them from the reference index, or from the search's own file),
            unless a case also uses the text as a reference or an output. A flow run embeds them into the index
            without bringing their vectors back (a set of 10^6 texts is 1.5 GB at 384 dimensions).
    """

    provider: EmbeddingProvider
    options: dict[str, Any] = field(default_factory=dict)
    references: Counter[str] = field(default_factory=Counter)
    outputs: Counter[str] = field(default_factory=Counter)
    index_only: set[str] = field(default_factory=set)

    def add_index_only(self, texts: Sequence[str]) -> None:
        """Register a reference set's ``texts``: counted as references, and index-only unless a case uses them."""
        used = self.references.keys() | self.outputs.keys() if self.references or self.outputs else set()
        self.index_only.update(t for t in texts if t not in used)
        self.references.update(texts)

    def share_costs(self, table: VectorTable) -> VectorTable:
        """``table`` with each text's embedding cost divided over its uses, so per-case costs sum to the total."""
        uses = np.array([self.references[t] + self.outputs[t] for t in table.texts], dtype=np.float64)
        return table.with_costs(table.costs / np.maximum(uses, 1.0))


@functools.cache
def _package_digest() -> str:
    root = Path(__file__).resolve().parent.parent  # the evaltasks package
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def source_digest(cls: type) -> str:
    """sha256 (16 hex digits) of evaltasks' source files and of the file defining ``cls`` ("" parts for code
    without a source file, e.g. defined in a REPL)."""
    digest = hashlib.sha256(_package_digest().encode())
    try:
        source = inspect.getsourcefile(cls)
        if source:
            digest.update(Path(source).read_bytes())
    except (OSError, TypeError):
        pass
    return digest.hexdigest()[:16]


def check_threshold(threshold: float) -> float:
    """Return ``threshold`` as float. Raises ValueError unless it is a number in [0, 1]."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be a number in [0, 1], got {quote(threshold)}")
    return float(threshold)


def check_flag(label: str, value: bool) -> bool:
    """Return ``value``. Raises ValueError unless it is a bool (``"false"`` or 0 are mistakes, not False)."""
    if not isinstance(value, bool):
        raise ValueError(f"{label} must be true or false, got {quote(value)}")
    return value


class BaseMetric(ABC):
    """Base class of every metric, evaltasks' own and a user's (docs/metrics/custom.md#your-own-metrics).

    A user's metric subclasses it and provides: ``__init__(self, threshold, ..., *, name=None)`` calling
    ``super().__init__(threshold, name=name)`` (raise ValueError/TypeError for bad arguments: the suite loader
    reports them located at the metric entry); :meth:`score_batch` (one :class:`MetricResult` per case, in
    order; an exception errors only the cases that raise); optionally :meth:`validate_case` (problems reported
    before anything is scored) and :meth:`config` (what the cache key holds; default: public attributes).

    Attributes:
        name: the metric's name in results (default: the class name).
        threshold: minimum passing score, in [0, 1].
        required_fields: test-case fields that must be present (strings) for this metric.
        version: bumped when scoring changes, so cached results of an older version are not reused.
        case_kind: which test cases it scores: ``"single"`` (single-turn :class:`EvalTestCase`), ``"conversation"``
            (:class:`~evaltasks.test_case.ConversationalEvalTestCase`) or ``"any"`` (both; docs/conversations.md).

    Raises:
        ValueError: at construction, for invalid parameters.
    """

    required_fields: ClassVar[tuple[str, ...]] = ("actual_output",)
    version: ClassVar[str] = "1"
    case_kind: ClassVar[str] = "single"

    def __init__(self, threshold: float, *, name: str | None = None) -> None:
        self.threshold = check_threshold(threshold)
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ValueError(f"name must be a non-empty string, got {quote(name)}")
        self.name = name or type(self).__name__

    # -- validation and planning ------------------------------------------------------------------------
    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """Problems that make ``case`` unusable for this metric, as ``(field, message)`` pairs."""
        return []

    @property
    def embedding_namespace(self) -> str | None:
        """The provider namespace whose vectors this metric reads, or None for metrics without embeddings."""
        return None

    def embedding_texts(self, case: EvalTestCase) -> tuple[list[str], list[str]]:
        """(reference texts, output texts) of ``case`` that this metric needs embedded; none by default."""
        return [], []

    def add_embedding_needs(self, cases: Sequence[EvalTestCase], needs: dict[str, EmbeddingNeed]) -> None:
        """Register the texts this metric needs embedded for ``cases`` into ``needs`` (keyed by namespace)."""
        provider = getattr(self, "provider", None)
        if provider is None:
            return
        options = dict(getattr(self, "provider_options", {}) or {})
        need = needs.setdefault(provider.namespace, EmbeddingNeed(provider, options))
        for case in cases:
            references, outputs = self.embedding_texts(case)
            need.references.update(references)
            need.outputs.update(outputs)
            if need.index_only:  # a text a case uses is read from the run's vector table
                need.index_only.difference_update(references)
                need.index_only.difference_update(outputs)

    # -- scoring -----------------------------------------------------------------------------------------
    @abstractmethod
    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Score ``cases``; one :class:`MetricResult` per case, in order.

        Args:
            cases: validated test cases.
            vectors: namespace -> embeddings of the texts registered by :meth:`add_embedding_needs`; metrics
                that need embeddings compute them directly when it is None.
        """

    async def evaluate(self, test_case: EvalTestCase) -> MetricResult:
        """Score one test case (eval-ai-library's API). Raises ValueError when the case is invalid for it."""
        problems = self.validate_case(test_case)
        if problems:
            raise ValueError("; ".join(f"field '{f}': {m}" for f, m in problems))
        return (await asyncio.to_thread(self.score_batch, [test_case]))[0]

    def config(self) -> dict[str, Any]:
        """What defines this metric's behaviour (for cache keys and reports).

        The default is every public instance attribute, so a user's metric that stores its parameters as
        attributes gets a correct cache key without overriding this; built-in metrics list theirs explicitly.
        """
        return {k: v for k, v in sorted(vars(self).items()) if not k.startswith("_")}

    def cache_key(self) -> str:
        """A stable string identifying this metric's class (module-qualified), version, configuration and code.

        The code part is a digest of the class's source file and of evaltasks' own sources
        (:func:`source_digest`): a change to how a metric scores invalidates cached results even when nobody
        bumped ``version`` (e.g. a pull request that edits a metric is never scored with the base branch's cache).
        """
        cls = type(self)
        items = ",".join(f"{k}={v!r}" for k, v in sorted(self.config().items()))
        return f"{cls.__module__}.{cls.__qualname__}@{self.version}({items})#code={source_digest(cls)}"

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({args})"


class SkippedMetric(BaseMetric):
    """Stands in for a metric that cannot run, e.g. its provider's credentials are missing on a fork's pull
    request: every case gets a ``skipped`` result carrying ``reason``, which the gate leaves out.

    Args:
        name: the name of the metric it replaces.
        threshold: that metric's threshold, in [0, 1].
        reason: why it is skipped (shown in every result and in the run's warnings).
    """

    def __init__(self, name: str, threshold: float, reason: str) -> None:
        super().__init__(threshold, name=name)
        self.reason = reason

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """One ``skipped`` result per case; nothing is computed."""
        return [MetricResult.skipped(self.name, self.threshold, self.reason) for _ in cases]
