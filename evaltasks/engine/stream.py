"""The streaming engine: cases in batches, a bounded window of batches in flight, results folded in case order.

Shared by the ``evaluate-suite`` flow (a batch is a Prefect task run per metric, submitted to its task runner)
and the Python API (:func:`~evaltasks.engine.evaluate.evaluate_sync`: a batch is scored by a direct call).
How a batch is scored is the caller's ``submit``; this module decides the batch sizes, how many batches are in
flight (so memory holds a few batches of results, never the whole run: 10^6 cases stream through), the
embedding chunks, how often progress is reported, and the garbage collector's setting while scoring. It never
imports Prefect.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from evaltasks.engine.progress import current_run_context
from evaltasks.results import MetricResult, TestCaseResult, conversation_turns, expected_text
from evaltasks.test_case import EvalTestCase

# A task run costs Prefect 5-10 ms here (API calls, states, and the GIL it shares with the scoring threads);
# LengthCheck scores a case in ~20 µs, so 1,000-case batches spent a sixth of a 100,000-case run on task
# runs. 5,000 keeps that under 5 % and a batch's results at a few MB.
DEFAULT_BATCH_SIZE = 5000
MAX_BATCHES = 100  # per metric: Prefect's API (SQLite by default) handles hundreds of task runs, not thousands
IN_FLIGHT = 8  # batches scored at once; results of at most this many batches are held in memory
# With in-process threads, scoring and report writing share one interpreter lock: two batches in flight keep
# one scoring while the other is written, and more only hold more results (measured: same speed, 20 % less RSS).
IN_FLIGHT_THREADS = 2
PROGRESS_EVERY_S = 1.0  # the progress artifact is one API call: at most one update a second
EMBED_CHUNK = 4096  # texts per embed-references / embed-outputs task run at most
# ... and at least this many (the local model's encode chunk), so that a small run's embedding still advances the
# progress in up to EMBED_PROGRESS_STEPS steps per kind of text instead of one jump (embed_chunk)
MIN_EMBED_CHUNK = 512
EMBED_PROGRESS_STEPS = 8

T = TypeVar("T")


def auto_batch_size(cases: int) -> int:
    """Cases per score-batch task run when none is given: :data:`DEFAULT_BATCH_SIZE` (5,000), or more so that
    a metric has at most :data:`MAX_BATCHES` task runs (10^6 cases: 10,000 per batch)."""
    return max(DEFAULT_BATCH_SIZE, -(-cases // MAX_BATCHES))


def chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """``items`` in consecutive slices of ``size`` (the last one shorter); ``size`` must be at least 1."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def embed_chunk(texts: int) -> int:
    """Texts per embedding task run for ``texts`` texts of one kind: an :data:`EMBED_PROGRESS_STEPS`-th of them,
    within [:data:`MIN_EMBED_CHUNK`, :data:`EMBED_CHUNK`] (2,000 texts: 4 task runs of 512; 10^6: 245 of 4,096)."""
    return min(EMBED_CHUNK, max(MIN_EMBED_CHUNK, -(-texts // EMBED_PROGRESS_STEPS)))


def stream_batches(
    batches: Sequence[Sequence[int]],
    submit: Callable[[Sequence[int]], Callable[[], T]],
    in_flight: int,
) -> Iterator[tuple[Sequence[int], T]]:
    """Score ``batches`` (sequences of case positions) with at most ``in_flight`` submitted and not yet collected,
    yielding ``(rows, collected)`` in batch order as each is collected.

    ``submit(rows)`` starts scoring a batch (a task run's ``.submit``, or nothing yet for a direct call) and
    returns a function that waits for it and returns its results (e.g. one list of
    :class:`~evaltasks.results.MetricResult` per metric). Whatever a collected batch held is dropped before the
    next one is submitted, so memory holds at most ``in_flight`` batches of results. Errors raised by
    ``submit`` or by a collect function propagate.
    """
    pending: collections.deque[tuple[Sequence[int], Callable[[], T]]] = collections.deque()
    window = max(1, in_flight)
    for b, rows in enumerate(batches):
        pending.append((rows, submit(rows)))
        while pending and (len(pending) >= window or b == len(batches) - 1):
            rows_done, collect = pending.popleft()
            collected = collect()
            del collect
            yield rows_done, collected
            del collected


def case_results(
    rows: Sequence[int],
    cases: Sequence[EvalTestCase],
    ids: Sequence[str],
    per_metric: Sequence[Sequence[MetricResult]],
) -> list[TestCaseResult]:
    """The :class:`~evaltasks.results.TestCaseResult` of each case at the positions ``rows``; ``per_metric``:
    one result list per metric, aligned with ``rows``."""
    return [
        TestCaseResult.from_metrics(
            ids[i],
            cases[i].input,
            cases[i].actual_output,
            [r[j] for r in per_metric],
            expected_text(cases[i].expected_output, cases[i].references),
            cases[i].generation,
            cases[i].variants,
            conversation_turns(cases[i]),
            getattr(cases[i], "chatbot_role", None),
        )
        for j, i in enumerate(rows)
    ]


class ProgressMeter:
    """Units of work done out of ``total``, reported as a percentage through ``report`` (e.g. a Prefect progress
    artifact: one API call, so at most one update per :data:`PROGRESS_EVERY_S` unless asked) and counted through
    ``advance`` (e.g. the terminal's bar, every time)."""

    def __init__(
        self, total: int, report: Callable[[float], None] | None = None, advance: Callable[[int], None] | None = None
    ) -> None:
        """``total``: units of the whole run (at least 1 is assumed); ``report(percent)``, ``advance(units)``."""
        self.total, self.done = total, 0
        self._report, self._advance = report, advance
        self._last = time.monotonic()

    def add(self, units: int, *, now: bool = False, finished: bool = False) -> None:
        """``units`` more are done: report the percentage when ``now``, when ``finished`` (100 %, even when some
        units were never counted, e.g. texts of a provider that failed) or when :data:`PROGRESS_EVERY_S` passed."""
        self.done += units
        if self._report is not None and (now or finished or time.monotonic() - self._last >= PROGRESS_EVERY_S):
            self._report(100.0 if finished else min(100.0, 100.0 * self.done / max(self.total, 1)))
            self._last = time.monotonic()
        if self._advance is not None:
            self._advance(units)


GC_THRESHOLDS = (10_000, 10, 100)  # while scoring; Python's defaults are (700, 10, 10)
_GC_LOCK = threading.Lock()
_gc_users = 0  # runs inside gc_frozen in this process
_gc_saved: tuple[tuple[int, ...], bool] | None = None


@contextlib.contextmanager
def gc_frozen() -> Iterator[None]:
    """Run the block with a cheaper cyclic garbage collector, then restore it.

    Scoring allocates millions of small objects (results), a batch of which stays alive until it is written.
    With Python's defaults the collector ran ~2,500 times during a 100,000-case LengthCheck run, and each
    full collection walked the whole dataset: 2.5 s of a 7 s flow run. Here every object alive at the start
    (the dataset, imported modules) is exempt (``gc.freeze``: Python docs, "gc — Garbage Collector
    interface"), young collections wait for 10,000 new objects instead of 700 (most results are written
    and freed by then), and full collections come 10 times less often (:data:`GC_THRESHOLDS`). Objects are
    still freed by reference counting meanwhile; cycles among the frozen ones wait for the first full
    collection after the block. Measured: GC time in that run 3.0 s -> 0.2 s, flow run 6.7 s -> 3.2 s.
    Overlapping runs in one process share the setting (the last to finish restores it), and objects a host
    program froze itself (``gc.freeze()`` before forking, say) stay frozen.
    """
    global _gc_users, _gc_saved
    with _GC_LOCK:
        _gc_users += 1
        if _gc_users == 1:  # the first of overlapping runs in this process sets, the last one restores
            # a host program's own gc.freeze() is left alone (counting frozen objects walks them all: 50 ms after
            # the imports of `evaltasks server`'s runner, which says so instead)
            froze = not current_run_context().host_froze_objects and gc.get_freeze_count() == 0
            _gc_saved = (gc.get_threshold(), froze)
            gc.set_threshold(*(max(a, b) for a, b in zip(_gc_saved[0], GC_THRESHOLDS)))
            if froze:
                gc.freeze()
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_users -= 1
            if _gc_users == 0 and _gc_saved is not None:
                thresholds, froze = _gc_saved
                if froze:
                    gc.unfreeze()
                gc.set_threshold(*thresholds)
                _gc_saved = None


def score_directly(score: Callable[[Sequence[int]], T]) -> Callable[[Sequence[int]], Callable[[], T]]:
    """A ``submit`` for :func:`stream_batches` that scores a batch by calling ``score(rows)`` in this thread
    when the batch is collected (the Python API; one batch in flight is then enough)."""
    return lambda rows: lambda: score(rows)
