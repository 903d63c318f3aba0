"""Run history and drift, without Prefect (docs/history.md#run-history-and-drift).

Each run of a suite appends one compact :class:`RunRecord` (no cases) to a JSON Lines file per suite in a
history directory (:class:`HistoryStore`). :func:`drift_check` tests a run against the pooled previous runs:

- pass rates (overall: passed cases of the evaluated ones; per metric: passed of passed + failed + errored) by
  Fisher's exact test on the 2×2 table (passed, not passed) × (previous runs pooled, this run)
  (``scipy.stats.fisher_exact``, two-sided);
- mean scores by Welch's t-test from the aggregates (``scipy.stats.ttest_ind_from_stats``, ``equal_var=False``):
  each record keeps, per metric, the number of scores, their mean and their sample standard deviation, which
  :class:`ScoreMoments` accumulates from the case results as a run streams them.

Both tests are unpaired (runs need not share cases). A test's verdict follows the comparison's rule
(docs/statistics.md#uncertainty-and-regressions): ``regressed`` when p < alpha and the change is below −min_effect, ``improved``
when p < alpha and above min_effect, else ``no significant change`` (no minimum detectable effect, so never
``inconclusive``). A metric is tested only against previous runs that ran it with the same configuration.
"""

from __future__ import annotations

import logging
import math
import os
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError, model_validator

from evaltasks.results import Interval, TestCaseResult, percent_text

HISTORY_SCHEMA_VERSION = 1
DEFAULT_HISTORY_DIR = ".evaltasks/history"  # relative to the working directory, for a suite with a `history:` block
HISTORY_DIR_ENV = "EVALTASKS_HISTORY_DIR"
REGRESSED_EVENT = "evaltasks.suite.regressed"
OVERALL = "overall"  # the name of the overall pass rate in a drift report
LOCK_TIMEOUT_S = 60.0

logger = logging.getLogger("evaltasks.history")

DriftVerdict = Literal["regressed", "improved", "no significant change"]


class MetricRecord(BaseModel):
    """One metric of a recorded run.

    Attributes:
        config: the metric's suite entry (``metric``, ``name`` and its arguments).
        threshold: the metric's pass threshold.
        passed, failed, errored, skipped: result counts.
        pass_rate: passed / (passed + failed + errored); None when nothing was evaluated.
        pass_rate_interval, mean_score_interval: the summary's intervals (None when the run computed none).
        mean_score: mean of the scores of passed and failed results; None when none was scored.
        scored: how many scores the mean is over; score_sd: their sample standard deviation (ddof 1; None
            below two scores): what Welch's test needs.

    Counts are never negative and numbers are finite (NaN or infinity fails validation), so a damaged line is
    skipped when read (:meth:`HistoryStore.read`) instead of reaching the drift tests.
    """

    model_config = ConfigDict(allow_inf_nan=False)

    config: dict[str, Any] = Field(default_factory=dict)
    threshold: float
    passed: NonNegativeInt = 0
    failed: NonNegativeInt = 0
    errored: NonNegativeInt = 0
    skipped: NonNegativeInt = 0
    pass_rate: float | None = None
    pass_rate_interval: Interval | None = None
    mean_score: float | None = None
    mean_score_interval: Interval | None = None
    scored: NonNegativeInt = 0
    score_sd: float | None = Field(default=None, ge=0)

    @property
    def evaluated(self) -> int:
        """passed + failed + errored (the pass rate's denominator)."""
        return self.passed + self.failed + self.errored


class RunRecord(BaseModel):
    """One run of a suite, as the history store keeps it (one JSON line; no cases).

    Attributes:
        schema_version: :data:`HISTORY_SCHEMA_VERSION`.
        suite, suite_sha256, dataset_sha256: what ran (sha256 of the files' bytes).
        metrics: metric name -> :class:`MetricRecord`, in suite order.
        cases, passed_cases, failed_cases, errored_cases, skipped_cases: case counts.
        pass_rate: passed cases / evaluated (not skipped) cases; None when none was evaluated.
        pass_rate_interval: the summary's interval of it (None when the run computed none).
        passed: the gate's verdict; verdict: the comparison's verdict with a baseline, else None.
        drift: names of what drifted worse than the previous runs (``overall`` or ``METRIC pass_rate`` /
            ``METRIC mean_score``), set when the run is recorded.
        commit: ``$GITHUB_SHA``, else ``git rev-parse HEAD`` in the suite's directory, else None.
        started_at, finished_at: ISO 8601 UTC, as in results.json.
        flow_run_id, deployment: the Prefect flow run and its deployment's name, when there is one.
        results_path: the run's results.json.

    Validation refuses what the drift tests cannot use: a negative count, a NaN or infinite number (as
    :class:`MetricRecord`), more passed or skipped cases than cases.
    """

    model_config = ConfigDict(allow_inf_nan=False)

    schema_version: int = HISTORY_SCHEMA_VERSION
    suite: str
    suite_sha256: str = ""
    dataset_sha256: str = ""
    metrics: dict[str, MetricRecord] = Field(default_factory=dict)
    cases: NonNegativeInt = 0
    passed_cases: NonNegativeInt = 0
    failed_cases: NonNegativeInt = 0
    errored_cases: NonNegativeInt = 0
    skipped_cases: NonNegativeInt = 0
    pass_rate: float | None = None
    pass_rate_interval: Interval | None = None
    passed: bool = False
    verdict: str | None = None
    drift: list[str] = Field(default_factory=list)
    commit: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    flow_run_id: str | None = None
    deployment: str | None = None
    results_path: str | None = None

    @model_validator(mode="after")
    def _counts_fit(self) -> RunRecord:
        if self.skipped_cases > self.cases or self.passed_cases > self.cases - self.skipped_cases:
            raise ValueError(f"{self.passed_cases} passed and {self.skipped_cases} skipped of {self.cases} cases")
        return self

    @property
    def evaluated_cases(self) -> int:
        """Cases that were not skipped (the overall pass rate's denominator)."""
        return self.cases - self.skipped_cases


class ScoreMoments:
    """Per-metric count, mean and sum of squared deviations of scores, folded in batch by batch (Welford's
    algorithm), with the summary's rule: scores of ``passed`` and ``failed`` results only.

    Args:
        names: the metric names (in suite order).
    """

    def __init__(self, names: Iterable[str]) -> None:
        self.n: dict[str, int] = {name: 0 for name in names}
        self.mean: dict[str, float] = {name: 0.0 for name in self.n}
        self.m2: dict[str, float] = {name: 0.0 for name in self.n}

    def add(self, test_results: Iterable[TestCaseResult]) -> None:
        """Fold a batch of case results in."""
        for case in test_results:
            for m in case.metrics:
                if m.score is None or m.status not in ("passed", "failed") or m.name not in self.n:
                    continue
                n = self.n[m.name] = self.n[m.name] + 1
                delta = m.score - self.mean[m.name]
                self.mean[m.name] += delta / n
                self.m2[m.name] += delta * (m.score - self.mean[m.name])

    def sd(self, name: str) -> float | None:
        """The sample standard deviation (ddof 1) of ``name``'s scores; None below two scores."""
        n = self.n.get(name, 0)
        return math.sqrt(max(self.m2[name], 0.0) / (n - 1)) if n > 1 else None


NAME_MAX_BYTES = 255
"""The longest file name (one path component) in bytes on common file systems (ext4, APFS, NTFS in UTF-16 units)."""
_LOCK_SUFFIX = ".jsonl.lock"


def path_slug(name: str, max_chars: int = 100, max_bytes: int = NAME_MAX_BYTES) -> str:
    """``name`` as one safe path component: every run of characters other than letters, digits (any script),
    ``_``, ``.`` and ``-`` becomes ``-``; leading and trailing dots and dashes are dropped (so ``..`` cannot climb
    out); at most ``max_chars`` characters and ``max_bytes`` bytes of UTF-8 are kept, cut between characters
    (a CJK character is 3 bytes: 100 of them would be 300, over a file system's 255); ``suite`` when nothing is
    left. E.g. ``"TruthfulQA / davinci"`` -> ``TruthfulQA-davinci``."""
    slug = re.sub(r"[^\w.-]+", "-", name).strip(".-")[:max_chars]
    slug = slug.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")  # a cut character is dropped whole
    return slug.strip(".-") or "suite"


def history_file_name(suite: str) -> str:
    """The store's file of ``suite``: :func:`path_slug` of the name (as report directories are; short enough that
    its lock file, ``.jsonl.lock`` added, still fits :data:`NAME_MAX_BYTES`) + ``.jsonl``. Two names that map to
    one file share it; :meth:`HistoryStore.read` keeps each suite's own records."""
    return f"{path_slug(suite, max_bytes=NAME_MAX_BYTES - len(_LOCK_SUFFIX))}.jsonl"


class HistoryStore:
    """Run records in ``directory``: one JSON Lines file per suite (:func:`history_file_name`).

    Appends take a lock file beside the suite's file (``filelock``), so runs on one machine or a shared
    file system append whole lines, and are fsynced. A line that cannot be read (a run that crashed mid-write
    leaves a torn last line, or a hand-edited one with a NaN or a negative count) is skipped with a warning naming
    the file, line and field (logged and kept in :attr:`warnings`), never fatal.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.warnings: list[str] = []

    def path(self, suite: str) -> Path:
        """The JSON Lines file of ``suite``."""
        return self.directory / history_file_name(suite)

    def append(self, record: RunRecord) -> Path:
        """Append ``record`` as one line; returns the file. Raises OSError when the directory cannot be written
        and ``filelock.Timeout`` when the lock is held for :data:`LOCK_TIMEOUT_S` seconds."""
        path = self.path(record.suite)
        path.parent.mkdir(parents=True, exist_ok=True)
        line = record.model_dump_json().encode("utf-8") + b"\n"
        with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S), open(path, "ab") as out:
            if out.tell() > 0:  # a torn last line (no newline) stays its own line, skipped on read
                with open(path, "rb") as tail:
                    tail.seek(-1, os.SEEK_END)
                    if tail.read(1) != b"\n":
                        line = b"\n" + line
            out.write(line)
            out.flush()
            os.fsync(out.fileno())
        return path

    def read(self, suite: str, last: int | None = None) -> list[RunRecord]:
        """``suite``'s records, oldest first (the ``last`` N when given); [] when it has none."""
        path = self.path(suite)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return []
        records = []
        for number, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = RunRecord.model_validate_json(line)
            except ValidationError as exc:
                error = exc.errors()[0]
                field = ".".join(str(part) for part in error["loc"])
                message = (
                    f"{path}: line {number} is not a run record, skipped "
                    f"({field + ': ' if field else ''}{error['msg']})"
                )
                self.warnings.append(message)
                logger.warning("%s", message)
                continue
            if record.suite == suite:
                records.append(record)
        return records[-last:] if last else records


def resolve_history_dir(
    suite_path: str | Path,
    history: Any,
    history_dir: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Path | None:
    """Where a run of the suite at ``suite_path`` records its history, or None when it records none.

    ``history`` is the suite's ``history:`` block (a :class:`~evaltasks.inputs.suite.HistorySpec` or None). Order: its
    ``dir`` (relative to the suite file) > ``history_dir`` (``--history-dir``) > ``$EVALTASKS_HISTORY_DIR`` >
    :data:`DEFAULT_HISTORY_DIR` (relative to the working directory) when the suite has a ``history:`` block.
    """
    env = os.environ if env is None else env
    if history is not None and getattr(history, "dir", None):
        return Path(suite_path).resolve().parent / str(history.dir)
    if history_dir:
        return Path(history_dir)
    from evaltasks.settings import get_settings

    configured = get_settings(env, only=["history_dir"]).history_dir
    if configured is not None:
        return configured
    if history is not None:
        return Path(DEFAULT_HISTORY_DIR)
    return None


def current_commit(directory: str | Path, env: Mapping[str, str] | None = None) -> str | None:
    """The commit a run evaluated: ``$GITHUB_SHA``, else ``git rev-parse HEAD`` in ``directory`` when it is in a
    git checkout, else None (no git, not a checkout, or git did not answer within 10 s)."""
    env = os.environ if env is None else env
    if env.get("GITHUB_SHA"):
        return env["GITHUB_SHA"]
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", sha) else None


class DriftTest(BaseModel):
    """One statistic of a run tested against the pooled previous runs.

    Attributes:
        name: a metric name, or ``overall`` (the case pass rate).
        statistic: ``pass_rate`` or ``mean_score``.
        test: ``Fisher exact`` or ``Welch t``.
        runs: how many previous runs were pooled.
        before: the pooled previous runs' statistic; after: this run's; delta: after − before.
        p_value: two-sided p-value of "no change" (None when the test cannot run, e.g. fewer than two scores).
        verdict: see the module docstring.
    """

    name: str
    statistic: Literal["pass_rate", "mean_score"]
    test: str
    runs: int
    before: float | None = None
    after: float | None = None
    delta: float | None = None
    p_value: float | None = None
    verdict: DriftVerdict = "no significant change"

    @property
    def label(self) -> str:
        """``overall`` for the overall pass rate, else ``METRIC pass_rate`` / ``METRIC mean_score``."""
        return OVERALL if self.name == OVERALL else f"{self.name} {self.statistic}"


class DriftReport(BaseModel):
    """A run tested against the pooled previous runs (:func:`drift_check`).

    Attributes:
        alpha, min_effect: the gate's significance level and smallest change that counts.
        window: how many previous runs were available to pool (at most the suite's ``history.window``).
        tests: the overall pass-rate test first, then per metric its pass-rate and mean-score tests.
        verdict: ``regressed`` when any test regressed, else ``improved`` when any improved, else ``no
            significant change``.
    """

    alpha: float
    min_effect: float
    window: int
    tests: list[DriftTest] = Field(default_factory=list)
    verdict: DriftVerdict = "no significant change"

    @property
    def regressed(self) -> list[DriftTest]:
        """The tests whose verdict is ``regressed``."""
        return [t for t in self.tests if t.verdict == "regressed"]


def _verdict(p_value: float | None, delta: float | None, alpha: float, min_effect: float) -> DriftVerdict:
    if p_value is None or delta is None or p_value >= alpha:
        return "no significant change"
    if delta < -min_effect:
        return "regressed"
    if delta > min_effect:
        return "improved"
    return "no significant change"


def _fisher(
    name: str, runs: int, before: tuple[int, int], after: tuple[int, int], alpha: float, min_effect: float
) -> DriftTest | None:
    """Fisher's exact test of (passed, evaluated) ``after`` against ``before``; None when a side is empty."""
    from scipy.stats import fisher_exact

    (b_pass, b_n), (a_pass, a_n) = before, after
    if not b_n or not a_n:
        return None
    p_value = float(fisher_exact([[a_pass, a_n - a_pass], [b_pass, b_n - b_pass]]).pvalue)
    delta = a_pass / a_n - b_pass / b_n
    return DriftTest(
        name=name,
        statistic="pass_rate",
        test="Fisher exact",
        runs=runs,
        before=b_pass / b_n,
        after=a_pass / a_n,
        delta=delta,
        p_value=min(p_value, 1.0),
        verdict=_verdict(p_value, delta, alpha, min_effect),
    )


def _pooled_moments(parts: list[tuple[int, float, float | None]]) -> tuple[int, float, float | None]:
    """(n, mean, sample sd) of the union of samples given as (n, mean, sample sd) each."""
    n = sum(k for k, _, _ in parts)
    if not n:
        return 0, 0.0, None
    mean = sum(k * m for k, m, _ in parts) / n
    ss = sum((k - 1) * (s or 0.0) ** 2 + k * (m - mean) ** 2 for k, m, s in parts)
    return n, mean, math.sqrt(ss / (n - 1)) if n > 1 else None


def _welch(
    name: str,
    runs: int,
    before: list[tuple[int, float, float | None]],
    after: tuple[int, float, float | None],
    alpha: float,
    min_effect: float,
) -> DriftTest | None:
    """Welch's t-test of ``after`` (n, mean, sd) against the pooled ``before``; None when a side has no score."""
    from scipy.stats import ttest_ind_from_stats

    b_n, b_mean, b_sd = _pooled_moments(before)
    a_n, a_mean, a_sd = after
    if not b_n or not a_n:
        return None
    delta = a_mean - b_mean
    p_value: float | None = None
    if a_n > 1 and b_n > 1 and a_sd is not None and b_sd is not None:
        if a_sd == 0 and b_sd == 0:  # no spread on either side: any difference is certain, none is none
            p_value = 1.0 if delta == 0 else 0.0
        else:
            p = float(ttest_ind_from_stats(a_mean, a_sd, a_n, b_mean, b_sd, b_n, equal_var=False).pvalue)
            p_value = None if math.isnan(p) else min(p, 1.0)
    return DriftTest(
        name=name,
        statistic="mean_score",
        test="Welch t",
        runs=runs,
        before=b_mean,
        after=a_mean,
        delta=delta,
        p_value=p_value,
        verdict=_verdict(p_value, delta, alpha, min_effect),
    )


def drift_check(
    current: RunRecord, previous: list[RunRecord], alpha: float = 0.05, min_effect: float = 0.01
) -> DriftReport:
    """Test ``current`` against ``previous`` (the previous window of runs, pooled): the overall pass rate, and
    per metric its pass rate and mean score (rules in the module docstring). A metric is pooled only over the
    previous runs that ran it with the same configuration and threshold; tests with no data on a side are
    left out.
    """
    tests: list[DriftTest] = []
    overall = _fisher(
        OVERALL,
        len(previous),
        (sum(r.passed_cases for r in previous), sum(r.evaluated_cases for r in previous)),
        (current.passed_cases, current.evaluated_cases),
        alpha,
        min_effect,
    )
    if overall is not None:
        tests.append(overall)
    for name, m in current.metrics.items():
        same = [
            r.metrics[name]
            for r in previous
            if name in r.metrics and r.metrics[name].config == m.config and r.metrics[name].threshold == m.threshold
        ]
        rate = _fisher(
            name,
            len(same),
            (sum(p.passed for p in same), sum(p.evaluated for p in same)),
            (m.passed, m.evaluated),
            alpha,
            min_effect,
        )
        score = _welch(
            name,
            len(same),
            [(p.scored, p.mean_score or 0.0, p.score_sd) for p in same if p.scored],
            (m.scored, m.mean_score or 0.0, m.score_sd),
            alpha,
            min_effect,
        )
        tests += [t for t in (rate, score) if t is not None]
    verdicts = {t.verdict for t in tests}
    verdict: DriftVerdict = next((v for v in ("regressed", "improved") if v in verdicts), "no significant change")
    return DriftReport(alpha=alpha, min_effect=min_effect, window=len(previous), tests=tests, verdict=verdict)


def event_payload(test: DriftTest, window: int, results_path: str | None) -> dict[str, Any]:
    """The payload of the :data:`REGRESSED_EVENT` event for a regressed ``test``: metric (a metric name or
    ``overall``), statistic, before, after, p_value, test, window, results_path."""
    return {
        "metric": test.name,
        "statistic": test.statistic,
        "before": test.before,
        "after": test.after,
        "p_value": test.p_value,
        "test": test.test,
        "window": window,
        "results_path": results_path,
    }


def event_resource(suite: str) -> dict[str, str]:
    """The Prefect event resource of ``suite``: ``{"prefect.resource.id": "evaltasks.suite.<suite>",
    "prefect.resource.name": <suite>}``."""
    return {"prefect.resource.id": f"evaltasks.suite.{suite}", "prefect.resource.name": suite}


def _bar(value: float | None, width: int = 20) -> str:
    if value is None:
        return ""
    filled = max(0, min(width, round(value * width)))
    return "#" * filled + "." * (width - filled)


def render_history_markdown(suite: str, records: list[RunRecord], drift: DriftReport | None = None) -> str:
    """Markdown of ``records`` (oldest first) for the flow's ``<suite>-history`` artifact: a table per run (time,
    commit, pass rate with its interval and an ASCII bar as the trend chart, each metric's mean score, gate,
    verdict, drift), then the latest run's drift tests. Plain ASCII bars: Prefect's UI renders markdown tables,
    not Mermaid charts."""
    names = list(dict.fromkeys(name for r in records for name in r.metrics))
    head = [
        "run (UTC)",
        "commit",
        "pass rate",
        "95% interval",
        "trend",
        *[f"{n} mean" for n in names],
        "gate",
        "verdict",
        "drift",
    ]
    lines = [
        f"# Run history of {_md(suite)}",
        "",
        "| " + " | ".join(_md(h) for h in head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in records:
        interval = r.pass_rate_interval
        cells = [
            (r.started_at or "")[:19].replace("T", " "),
            (r.commit or "—")[:8],
            percent_text(r.pass_rate, 1, "—"),
            f"{percent_text(interval.low, 1, '—')} – {percent_text(interval.high, 1, '—')}" if interval else "—",
            f"`{_bar(r.pass_rate)}`",
            *[
                "—" if n not in r.metrics or r.metrics[n].mean_score is None else f"{r.metrics[n].mean_score:.3f}"
                for n in names
            ],
            "passed" if r.passed else "FAILED",
            r.verdict or "—",
            ", ".join(r.drift) or "—",
        ]
        lines.append("| " + " | ".join(_md(c) if not c.startswith("`") else c for c in cells) + " |")
    if drift is not None and drift.tests:
        lines += [
            "",
            f"## Drift of the latest run against the previous {drift.window} (alpha {drift.alpha:g}, "
            f"min effect {drift.min_effect:g}): {drift.verdict}",
            "",
            "| tested | test | before | after | p-value | verdict |",
            "|---|---|---|---|---|---|",
        ]
        for t in drift.tests:
            fmt: Callable[[float | None], str] = (
                (lambda v: percent_text(v, 1, "—"))
                if t.statistic == "pass_rate"
                else (lambda v: "—" if v is None else f"{v:.3f}")
            )
            lines.append(
                f"| {_md(t.label)} | {t.test} | {fmt(t.before)} | {fmt(t.after)} | "
                f"{'—' if t.p_value is None else f'{t.p_value:.3g}'} | {t.verdict} |"
            )
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    """``text`` safe in a markdown table cell."""
    return re.sub(r"([\\`*_{}\[\]<>|#])", r"\\\1", str(text)).replace("\n", " ")
