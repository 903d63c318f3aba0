"""Running a target on test cases: the output store first, then the target with retries, backoff and a timeout.

:func:`generate_case` produces one case's output (one sample of it); :func:`generate_batch` does a batch, up to
the target's ``max_concurrency`` cases at once. The rules (docs/targets.md#faults-and-retries):

- A stored output (:class:`~evaltasks.targets.store.OutputStore`, keyed by the target's
  :meth:`~evaltasks.targets.base.Target.case_key` and the sample number) is used unless ``refresh`` or the
  target's ``cache`` is False; no request is made.
- Each case has ``timeout`` seconds (the target's, default 60), all attempts and waits included. A call still
  running then is abandoned (a Python callable cannot be killed: its thread finishes in the background) and the
  case fails with "timed out".
- A :class:`~evaltasks.targets.base.TransientTargetError` (429, 5xx, timeouts, dropped connections) is retried
  up to ``max_attempts`` tries in all (default 4). The wait before retry ``n`` (1-based) is the endpoint's
  ``Retry-After`` when it gave one, else ``0.5 s × 2^(n-1)`` capped at 8 s, less up to 25 % jitter (the judge
  client's schedule, :mod:`evaltasks.judges.openai`). A ``Retry-After`` over :data:`MAX_RETRY_AFTER` (60 s), or
  a wait past the case's deadline, fails the case at once, saying so.
- Any other :class:`~evaltasks.targets.base.TargetError` fails the case at once: the result carries the reason
  and the run goes on. :class:`~evaltasks.errors.CredentialsError` (a 401) propagates: the run stops.
- ``stop`` (a :class:`threading.Event`), when set, ends waits and skips cases not started: Ctrl+C stops
  generation within a second, and what was stored stays stored.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from evaltasks.errors import CredentialsError
from evaltasks.targets.base import Target, TargetError, TargetOutput, TransientTargetError
from evaltasks.targets.store import OutputStore, sample_key
from evaltasks.test_case import EvalTestCase, Generation

BACKOFF_BASE = 0.5
"""Seconds before the first retry without a ``Retry-After``; doubled per retry."""
BACKOFF_CAP = 8.0
"""The longest wait between two tries without a ``Retry-After``."""
MAX_RETRY_AFTER = 60.0
"""The longest ``Retry-After`` waited out; a longer one fails the case."""
_POLL = 0.25  # seconds between checks of ``stop`` while a call runs

log = logging.getLogger("evaltasks.targets")


class EarlyResults(Protocol):
    """Results generated before a batch asked for them (:class:`evaltasks.targets.early.EarlyGeneration`)."""

    def take(self, target: Target, case: EvalTestCase, sample: int) -> GeneratedCase | None:
        """The result of ``sample`` of ``case`` with ``target`` (waiting for it), or None: generate it here."""


class GenerationStopped(Exception):
    """``stop`` was set while a case was waiting or running: the case was not generated."""


@dataclass(frozen=True)
class GeneratedCase:
    """One case's generation.

    Attributes:
        case: the case with ``actual_output`` (and ``retrieval_context``, ``context``, ``tools_called`` where the
            target returned them) filled and ``generation`` set; after a failure, the input case with
            ``actual_output`` ``""`` and a ``generation`` naming the target and sample.
        error: why generation failed (the case is ``errored``), or None.
        requested: True when the target was called (at least one attempt; False for a stored output).
    """

    case: EvalTestCase
    error: str | None = None
    requested: bool = False


def generate_case(
    target: Target,
    case: EvalTestCase,
    *,
    store: OutputStore | None,
    refresh: bool,
    sample: int = 0,
    stop: threading.Event | None = None,
    early: EarlyResults | None = None,
) -> GeneratedCase:
    """Generate sample ``sample`` of ``case``'s output with ``target`` (see the module docstring for the rules).

    Args:
        target: the system under test.
        case: the test case (its ``actual_output`` is ignored).
        store: the output store, or None for none.
        refresh: True to generate even when an output is stored (``--no-cache``); the new one replaces it.
        sample: which of ``repeat: K`` samples (0-based); each sample has its own store entry.
        stop: set it to stop waiting (the case raises GenerationStopped).
        early: the calls started while Prefect starts (:mod:`evaltasks.targets.early`): the case's result is
            taken from there when it holds it, else generated here.

    Raises:
        CredentialsError: the target's endpoint rejected the credentials (401).
        GenerationStopped: ``stop`` was set.
    """
    if early is not None:
        taken = early.take(target, case, sample)
        if taken is not None:
            return taken
    try:
        key = sample_key(target.case_key(case), sample)
    except TargetError as exc:  # a template that does not render for this case
        return _failed(target, case, sample, str(exc), requested=False)
    use_store = store is not None and bool(getattr(target, "cache", True))
    if use_store and not refresh:
        assert store is not None
        stored = store.get(key)
        if stored is not None:
            kept = without_secrets(stored.output)  # stored before outputs were redacted
            return GeneratedCase(_filled(target, case, kept, stored.latency_ms, sample, cached=True))
    try:
        output, latency_ms = _call_with_retries(target, case, stop)
    except TargetError as exc:
        return _failed(target, case, sample, str(exc), requested=True)
    output = without_secrets(output)
    if use_store:
        assert store is not None
        try:
            store.put(key, output, target=target.name, kind=target.kind, latency_ms=latency_ms)
        except OSError as exc:
            log.warning("cannot write the target output store %s: %s", store.directory, exc)
    return GeneratedCase(_filled(target, case, output, latency_ms, sample, cached=False), requested=True)


def generate_batch(
    target: Target,
    cases: Sequence[EvalTestCase],
    *,
    store: OutputStore | None,
    refresh: bool,
    samples: int = 1,
    stop: threading.Event | None = None,
    early: EarlyResults | None = None,
) -> list[GeneratedCase]:
    """Generate ``samples`` outputs of every case of ``cases`` (:func:`generate_case`), up to the target's
    ``max_concurrency`` (default 1) at once.

    Returns:
        One :class:`GeneratedCase` per (case, sample), case-major: ``[c0 s0, c0 s1, ..., c1 s0, ...]``.

    ``early``: results started before the batch was asked for (:class:`EarlyResults`), taken instead of calling
    the target.

    An error that ends the batch (CredentialsError, an interrupt) sets ``stop`` (an event of its own when none is
    given), so the cases in flight end at once instead of running to their timeout.

    Raises:
        CredentialsError: the endpoint rejected the credentials.
        GenerationStopped: ``stop`` was set before every case was generated.
        ValueError: ``samples`` < 1.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    work = [(case, sample) for case in cases for sample in range(samples)]
    workers = min(max_concurrency_of(target), len(work))
    if workers <= 1:
        return [_one(target, case, store, refresh, sample, stop, early) for case, sample in work]
    halt = stop if stop is not None else threading.Event()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"target-{target.name}") as pool:
        futures = [pool.submit(_one, target, case, store, refresh, sample, halt, early) for case, sample in work]
        try:
            return [future.result() for future in futures]
        except BaseException:
            halt.set()  # the calls in flight end within a quarter second, and the pool shuts down at once
            for future in futures:
                future.cancel()
            raise


def without_secrets(output: TargetOutput) -> TargetOutput:
    """``output`` with every configured secret in it replaced by ``***`` (docs/reports.md#secrets-in-reports), as
    it enters the run: the output store, the metrics, Prefect's records and every report only see ``***``. A system
    under test that echoes its key (a debug endpoint, a prompt injection that worked) is a finding, not something to
    hide: such an output gets ``metadata["secrets_redacted"] = True`` (in results.json), and the run says
    how many cases of the target had one (:func:`warn_of_secrets`). The same object when it holds no secret."""
    from evaltasks._redact import redact_nested, secrets_configured

    if not secrets_configured():
        return output
    data = output.model_dump()  # Python values as they are (NaN, tuples, bytes, datetimes): only strings change
    clean = redact_nested(data)
    if clean is data:
        return output
    assert isinstance(clean, dict)
    clean["metadata"] = {**clean.get("metadata", {}), "secrets_redacted": True}
    return TargetOutput.model_validate(clean)


def secrets_redacted(generated: Sequence[GeneratedCase]) -> int:
    """How many of ``generated`` were generated now (not read from the store) with a configured secret in the
    output (:func:`without_secrets` flagged them)."""
    return sum(
        1
        for g in generated
        if g.requested and g.case.generation is not None and g.case.generation.metadata.get("secrets_redacted")
    )


def warn_of_secrets(target: str, flagged: int, total: int) -> None:
    """The one warning of a run for the ``flagged`` of ``total`` outputs of ``target`` that held a configured
    secret (:func:`secrets_redacted`); nothing when none did."""
    if flagged:
        log.warning(
            "the target %s answered %d of %d cases with a configured secret in the output; it was replaced with *** "
            "before anything stored, scored or reported it (docs/reports.md#secrets-in-reports)",
            target,
            flagged,
            total,
        )


def max_concurrency_of(target: Target) -> int:
    """How many of ``target``'s calls may run at once: its ``max_concurrency``, at least 1 (1 when it has none)."""
    return max(1, int(getattr(target, "max_concurrency", 1) or 1))


def _one(
    target: Target,
    case: EvalTestCase,
    store: OutputStore | None,
    refresh: bool,
    sample: int,
    stop: threading.Event | None,
    early: EarlyResults | None,
) -> GeneratedCase:
    if stop is not None and stop.is_set():
        raise GenerationStopped("generation stopped")
    return generate_case(target, case, store=store, refresh=refresh, sample=sample, stop=stop, early=early)


def _call_with_retries(target: Target, case: EvalTestCase, stop: threading.Event | None) -> tuple[TargetOutput, float]:
    """Call ``target.generate(case)`` until it succeeds, fails for good, or the case's time is up; returns the
    output and the successful call's latency (ms). Raises TargetError (with the last reason), CredentialsError
    or GenerationStopped."""
    timeout = float(getattr(target, "timeout", 60.0) or 60.0)
    attempts = max(1, int(getattr(target, "max_attempts", 4) or 1))
    deadline = time.monotonic() + timeout
    label = f"the target {target.name}"
    for attempt in range(1, attempts + 1):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TargetError(f"{label} timed out: the case took more than {timeout:g} s")
        started = time.perf_counter()
        try:
            output = _call(target, case, remaining, stop)
        except TransientTargetError as exc:
            if attempt >= attempts:
                tries = f"{attempts} attempts" if attempts > 1 else "1 attempt"
                named = str(exc) if f"target {target.name}" in str(exc) else f"{label}: {exc}"  # the target once
                raise TargetError(f"{named} (still failing after {tries})") from exc
            wait = _wait_before_retry(attempt, exc.retry_after)
            if exc.retry_after is not None and exc.retry_after > MAX_RETRY_AFTER:
                raise TargetError(
                    f"{label} asked to wait {exc.retry_after:g} s before retrying, more than the "
                    f"{MAX_RETRY_AFTER:g} s evaltasks waits: {exc}"
                ) from exc
            if time.monotonic() + wait >= deadline:
                raise TargetError(
                    f"{label} timed out: the case took more than {timeout:g} s (last try: {exc})"
                ) from exc
            if stop is not None and stop.wait(wait):
                raise GenerationStopped("generation stopped") from None
            if stop is None:
                time.sleep(wait)
            continue
        return output, (time.perf_counter() - started) * 1000.0
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _wait_before_retry(attempt: int, retry_after: float | None) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): ``retry_after`` when given (>= 0), else the
    exponential backoff with jitter."""
    if retry_after is not None:
        return max(0.0, retry_after)
    delay: float = min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** (attempt - 1))
    return delay * (1 - 0.25 * random.random())


def _call(target: Target, case: EvalTestCase, remaining: float, stop: threading.Event | None) -> TargetOutput:
    """One ``target.generate(case)`` in a daemon thread, waited for at most ``remaining`` seconds (checking
    ``stop`` every quarter second). Raises what it raised, TargetError on a timeout, GenerationStopped."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = target.generate(case)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=f"target-{target.name}-call", daemon=True).start()
    deadline = time.monotonic() + remaining
    while not done.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            raise TargetError(
                f"the target {target.name} timed out: the case took more than {getattr(target, 'timeout', 60.0):g} s"
            )
        done.wait(min(_POLL, left) if stop is not None else left)
        if stop is not None and stop.is_set() and not done.is_set():
            raise GenerationStopped("generation stopped")
    if "error" in box:
        error = box["error"]
        if isinstance(error, (TargetError, CredentialsError)):
            raise error
        raise TargetError(f"the target {target.name} failed: {type(error).__name__}: {error}") from error
    value = box["value"]
    if not isinstance(value, TargetOutput):
        raise TargetError(
            f"the target {target.name} returned {type(value).__name__}, not a TargetOutput (a Target's generate "
            "must return one)"
        )
    return value


def _filled(
    target: Target,
    case: EvalTestCase,
    output: TargetOutput,
    latency_ms: float | None,
    sample: int,
    *,
    cached: bool,
) -> EvalTestCase:
    """``case`` with the target's output in it: ``actual_output``, and ``retrieval_context`` / ``context`` /
    ``tools_called`` / ``execution_trace`` / ``tool_calls`` / ``agent_confidence`` where the target returned them (the dataset's otherwise), and ``generation``. A stored
    output keeps the cost, tokens and latency of the call that produced it (``cached`` True says none was
    spent in this run)."""
    generation = Generation(
        target=target.name,
        latency_ms=latency_ms,
        cost=output.cost,
        input_tokens=output.input_tokens,
        output_tokens=output.output_tokens,
        cached=cached,
        sample=sample,
        metadata=dict(output.metadata),
    )
    update: dict[str, Any] = {"actual_output": output.output, "generation": generation}
    for field in ("retrieval_context", "context", "tools_called", "execution_trace", "tool_calls"):
        value = getattr(output, field)
        if value is not None:
            update[field] = list(value)
    if output.agent_confidence is not None:  # CalibrationMetric's confidence
        update["agent_confidence"] = output.agent_confidence
    return case.model_copy(update=update)


def _failed(target: Target, case: EvalTestCase, sample: int, reason: str, *, requested: bool) -> GeneratedCase:
    """The result of a case whose generation failed: the input case with ``actual_output`` ``""``."""
    generation = Generation(target=target.name, sample=sample)
    return GeneratedCase(
        case.model_copy(update={"actual_output": "", "generation": generation}), error=reason, requested=requested
    )
