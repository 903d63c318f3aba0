"""An in-process rate limiter for API providers: requests per minute and tokens per minute.

A token bucket per (endpoint, model) shared by every provider instance and thread of the process. Each bucket
holds one second's worth of budget (limit / 60), refilled continuously, so traffic is smoothed instead of
spent in a burst at the top of each minute. A request larger than one second's token budget waits until the
bucket is full, then goes alone.
"""

from __future__ import annotations

import threading
import time

from evaltasks.errors import quote


class RateLimiter:
    """Blocks callers so that at most ``requests_per_minute`` requests and ``tokens_per_minute`` tokens pass.

    Args:
        requests_per_minute: request budget (None: unlimited).
        tokens_per_minute: token budget (None: unlimited).

    Raises:
        ValueError: a limit that is not a positive number.
    """

    def __init__(self, requests_per_minute: float | None = None, tokens_per_minute: float | None = None) -> None:
        for label, value in (("requests_per_minute", requests_per_minute), ("tokens_per_minute", tokens_per_minute)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise ValueError(f"{label} must be a positive number, got {quote(value)}")
        self._rates = [r / 60.0 if r else None for r in (requests_per_minute, tokens_per_minute)]
        self._levels = [max(1.0, r) if r else 0.0 for r in self._rates]  # start full: one second's budget
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def acquire(self, tokens: int = 0) -> float:
        """Wait until one request of ``tokens`` tokens may go; returns the seconds waited."""
        waited = 0.0
        need = [1.0, float(tokens)]
        while True:
            with self._lock:
                now = time.monotonic()
                elapsed, self._stamp = now - self._stamp, now
                delay = 0.0
                for i, rate in enumerate(self._rates):
                    if rate is None:
                        continue
                    capacity = max(1.0, rate, need[i])
                    self._levels[i] = min(capacity, self._levels[i] + elapsed * rate)
                    if self._levels[i] < need[i]:
                        delay = max(delay, (need[i] - self._levels[i]) / rate)
                if delay == 0.0:
                    for i, rate in enumerate(self._rates):
                        if rate is not None:
                            self._levels[i] -= need[i]
                    return waited
            time.sleep(delay)
            waited += delay


_LIMITERS: dict[tuple[str, str, float | None, float | None], RateLimiter] = {}
_LIMITERS_LOCK = threading.Lock()


def shared_limiter(
    endpoint: str, model: str, requests_per_minute: float | None, tokens_per_minute: float | None
) -> RateLimiter | None:
    """The process-wide limiter of (endpoint, model, limits); None when both limits are None."""
    if requests_per_minute is None and tokens_per_minute is None:
        return None
    key = (endpoint, model, requests_per_minute, tokens_per_minute)
    with _LIMITERS_LOCK:
        if key not in _LIMITERS:
            _LIMITERS[key] = RateLimiter(requests_per_minute, tokens_per_minute)
        return _LIMITERS[key]
