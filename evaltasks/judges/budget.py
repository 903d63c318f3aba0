"""The run's spend limit (``--max-cost``): judge requests reserve their worst case before they are sent.

Before a request goes out, :meth:`Budget.reserve` sets aside what it can cost at most: its prompt's token
upper bound × the input price + ``max_tokens`` × ``n`` × the output price. If what is spent plus this would
pass the limit, the request is refused (:class:`~evaltasks.judges.base.BudgetExhausted`) and never sent; if it
fits beside the spend but not beside what requests in flight have reserved, it waits until they settle. When
the reply arrives,
:meth:`Budget.settle` replaces the reservation with the billed cost (usage × prices), which is at most the
reservation. So the spend never exceeds the limit, however many threads or processes send at once, as long as
the endpoint bills no more than ``max_tokens`` completion tokens and the prices are right (a model without a
price costs 0 and is not limited: :mod:`evaltasks.judges.prices`).

Shared across processes with a ``ledger_path``: a small JSON ledger (``{"spent": USD, "reserved": {id: USD}}``)
read and rewritten under a file lock (``filelock``) on every change; reservations of processes that no longer
run are dropped. Without one, the budget is the process's (thread-safe).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from evaltasks._atomic import atomic_path, pid_alive
from evaltasks.errors import quote
from evaltasks.judges.base import BudgetExhausted

_ids = itertools.count(1)


class Budget:
    """A spend limit in US dollars shared by every judge request of a run.

    Args:
        limit_usd: the most the run may spend (>= 0).
        ledger_path: a JSON file that makes the budget shared by every process using the same path (created
            when absent; its lock file is ``<ledger_path>.lock``); None: this process only.

    Raises:
        ValueError: a negative, infinite or non-numeric limit.
    """

    def __init__(self, limit_usd: float, ledger_path: Path | str | None = None) -> None:
        if (
            isinstance(limit_usd, bool)
            or not isinstance(limit_usd, (int, float))
            or not math.isfinite(limit_usd)
            or limit_usd < 0
        ):
            raise ValueError(f"the budget must be a non-negative number of US dollars, got {quote(limit_usd)}")
        self.limit_usd = float(limit_usd)
        self.ledger_path = Path(ledger_path) if ledger_path is not None else None
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # notified whenever spend or reservations change
        self._spent = 0.0
        self._reserved: dict[str, float] = {}
        self._file_lock: Any = None
        if self.ledger_path is not None:
            import filelock

            self.ledger_path.parent.mkdir(parents=True, exist_ok=True)
            self._file_lock = filelock.FileLock(str(self.ledger_path) + ".lock")

    def __getstate__(self) -> dict[str, Any]:
        """What a copy in another process gets (Prefect / Dask workers): the limit and the ledger path; the locks
        are made anew. Without a ledger the copy starts from this budget's spend and reservations but is its
        own from then on: give a ``ledger_path`` to share one budget between processes."""
        with self._lock:
            return {
                "limit_usd": self.limit_usd,
                "ledger_path": self.ledger_path,
                "spent": self._spent,
                "reserved": dict(self._reserved),
            }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["limit_usd"], state["ledger_path"])  # type: ignore[misc]
        self._spent, self._reserved = float(state["spent"]), dict(state["reserved"])

    # -- the shared state --------------------------------------------------------------------------------
    def _load(self) -> dict[str, Any]:
        """The ledger (call with both locks held); a missing or unreadable one is empty."""
        assert self.ledger_path is not None
        try:
            state = json.loads(self.ledger_path.read_text(encoding="utf-8"))
            spent = float(state["spent"])
            reserved = {str(k): float(v) for k, v in dict(state["reserved"]).items()}
        except (OSError, ValueError, KeyError, TypeError):
            return {"spent": 0.0, "reserved": {}}
        host = socket.gethostname()
        alive = {}
        for rid, usd in reserved.items():  # "<pid>@<host>:<n>": drop reservations of dead processes here
            owner = rid.split(":", 1)[0]
            pid, _, rhost = owner.partition("@")
            if rhost == host and pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
                continue
            alive[rid] = usd
        return {"spent": spent, "reserved": alive}

    def _save(self, state: dict[str, Any]) -> None:
        assert self.ledger_path is not None
        with atomic_path(self.ledger_path, durable=False) as tmp:
            tmp.write_text(json.dumps(state), encoding="utf-8")

    def _change(self, change: Any) -> Any:
        """Run ``change(state) -> result`` on the state under the locks, saving the ledger after it."""
        with self._lock:
            if self._file_lock is None:
                state: dict[str, Any] = {"spent": self._spent, "reserved": self._reserved}
                result = change(state)
                self._spent = float(state["spent"])
                self._settled.notify_all()
                return result
            with self._file_lock:
                state = self._load()
                result = change(state)
                self._save(state)
                return result

    # -- the API -------------------------------------------------------------------------------------------
    @property
    def spent(self) -> float:
        """US dollars spent so far (settled requests and :meth:`add_spent`)."""
        return float(self._change(lambda state: state["spent"]))

    @property
    def reserved(self) -> float:
        """US dollars reserved by requests in flight."""
        return float(self._change(lambda state: math.fsum(state["reserved"].values())))

    def add_spent(self, usd: float) -> None:
        """Count ``usd`` already spent outside the judges (the run's embeddings) against the limit."""
        if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not math.isfinite(usd) or usd < 0:
            raise ValueError(f"spent must be a non-negative number of US dollars, got {quote(usd)}")

        def add(state: dict[str, Any]) -> None:
            state["spent"] += float(usd)

        self._change(add)

    def reserve(self, usd: float) -> str:
        """Set ``usd`` (a request's worst-case cost) aside before sending it; returns the reservation's id for
        :meth:`settle`.

        When it fits beside what is spent but not beside what requests in flight have reserved, it waits for
        them to settle (they usually cost far less than reserved) and tries again; it refuses only when it
        cannot fit even if every request in flight cost nothing.

        Raises:
            BudgetExhausted: spent + ``usd`` passes the limit (nothing is reserved); the message says whether the
                budget is spent or this worst case does not fit in what is left.
        """
        rid = f"{os.getpid()}@{socket.gethostname()}:{next(_ids)}"

        def take(state: dict[str, Any]) -> bool:
            if state["spent"] + usd > self.limit_usd:
                raise BudgetExhausted(_refusal(self.limit_usd, state["spent"], usd))
            if state["spent"] + math.fsum(state["reserved"].values()) + usd > self.limit_usd:
                return False  # wait for requests in flight to settle
            state["reserved"][rid] = float(usd)
            return True

        if self._file_lock is None:
            with self._settled:
                state: dict[str, Any] = {"spent": self._spent, "reserved": self._reserved}
                while not take(state):
                    self._settled.wait(timeout=1.0)
                    state = {"spent": self._spent, "reserved": self._reserved}
            return rid
        while not self._change(take):
            time.sleep(0.05)  # another process may hold the reservations: poll the ledger
        return rid

    def settle(self, reservation: str, usd: float) -> None:
        """Replace ``reservation`` with the cost ``usd`` actually billed (0 when the request failed unbilled)."""

        def close(state: dict[str, Any]) -> None:
            state["reserved"].pop(reservation, None)
            state["spent"] += float(usd)

        self._change(close)


def _refusal(limit: float, spent: float, usd: float) -> str:
    """Why a reservation of ``usd`` is refused with ``spent`` of ``limit`` gone: the budget is spent, or the
    request's worst case does not fit in what is left."""
    if spent >= limit:
        return f"the run's --max-cost budget of {_usd(limit)} is spent ({_usd(spent)} so far)"
    return (
        f"the next request's worst case {_usd(usd)} does not fit in the {_usd(limit - spent)} left of the run's "
        f"--max-cost budget of {_usd(limit)} ({_usd(spent)} spent so far)"
    )


def _usd(amount: float) -> str:
    """``amount`` in US dollars with 4 decimals, or 3 significant digits below a cent (``$0.0000300``)."""
    if amount == 0 or abs(amount) >= 0.01:
        return f"${amount:.4f}"
    return f"${amount:.{min(12, 2 - math.floor(math.log10(abs(amount))))}f}"
