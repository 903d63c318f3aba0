"""Reports of a run whose cases arrive in batches: nothing but counts, sums and a few highlights stay in memory.

:class:`ReportWriter` appends each batch's cases to two temporary files beside the reports (the ``cases`` of
results.json and the ``<testcase>`` elements of junit.xml) while :class:`~evaltasks.engine.summary.SummaryBuilder`,
:class:`~evaltasks.reports.markdown.Highlights` and, with a baseline,
:class:`~evaltasks.engine.compare.ComparisonBuilder` fold them in. :meth:`ReportWriter.write` then writes the three
reports as one set (all or none replaced): each one's head (which needs the totals), then the streamed part
copied in 1 MiB blocks. Memory does not grow with the number of cases (beyond the baseline's scores when
comparing).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from evaltasks._atomic import atomic_paths, pid_alive, remove_stale_temporaries, synced_writer
from evaltasks.engine.compare import Comparison, ComparisonBuilder
from evaltasks.engine.outcome import RunHeader, RunReport
from evaltasks.engine.side_by_side import SideBySide, SideBySideBuilder
from evaltasks.engine.summary import SummaryBuilder
from evaltasks.reports.json_report import RESULTS_TAIL, results_case, results_head
from evaltasks.reports.junit import JUNIT_TAIL, junit_head, junit_run_metrics, junit_testcases
from evaltasks.reports.markdown import Highlights, render_summary
from evaltasks.results import EmbeddingCounts, EvaluationSummary, TargetRun, TestCaseResult

RESULTS_JSON = "results.json"
JUNIT_XML = "junit.xml"
SUMMARY_MD = "summary.md"
_PART_PREFIX = ".evaltasks-part-"
_BLOCK = 1 << 20


class ReportWriter:
    """Streams case results into ``results.json``, ``junit.xml`` and ``summary.md`` in ``output_dir``.

    Use: :meth:`add` every batch (in case order), :meth:`summarize`, apply the gate, :meth:`write`
    (the :class:`~evaltasks.engine.lifecycle.ReportSink` the run's life writes through); or
    :meth:`close` to give up (temporary files removed, existing reports untouched). A context manager closes.

    Args:
        output_dir: the reports directory (created).
        suite_name: shown in junit.xml and summary.md.
        metric_thresholds: metric name -> threshold, in metric order.
        baseline: a parsed baseline results.json to compare with (see :mod:`evaltasks.engine.compare`), or None.
        tolerance, baseline_label: the comparison's tolerance and how the baseline is named in reports.
        alpha, min_effect, allow_errors: the comparison's significance level, smallest effect and whether errored
            pairs are left out of its pass-rate tests (the suite's ``gate``).
        clusters, cluster_column: the cases' ``dataset.cluster`` values (a list in case order, or a mapping case
            id -> value) and the column's name, for cluster-bootstrap intervals (None: cases are independent).
        targets: the run's targets' names, in the suite's order: with two or more, their cases are kept (texts
            cut short) for :meth:`side_by_side`, which compares each target with the first.

    Raises:
        OSError: the directory or the temporary files cannot be written.
    """

    def __init__(
        self,
        output_dir: Path,
        suite_name: str,
        metric_thresholds: dict[str, float],
        *,
        baseline: Mapping[str, Any] | None = None,
        tolerance: float = 0.01,
        baseline_label: str = "baseline",
        alpha: float = 0.05,
        min_effect: float = 0.01,
        clusters: Sequence[str | None] | Mapping[str, str | None] | None = None,
        cluster_column: str | None = None,
        allow_errors: bool = False,
        targets: Sequence[str] = (),
    ) -> None:
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        _remove_stale_parts(self.output_dir)
        self.suite_name = suite_name
        self.summary_builder = SummaryBuilder(metric_thresholds, clusters=clusters, cluster_column=cluster_column)
        self.highlights = Highlights()
        self.comparison_builder = (
            ComparisonBuilder(
                baseline,
                tolerance=tolerance,
                label=baseline_label,
                alpha=alpha,
                min_effect=min_effect,
                clusters=clusters,
                allow_errors=allow_errors,
            )
            if baseline is not None
            else None
        )
        self.side_by_side_builder = (
            SideBySideBuilder(
                targets,
                alpha=alpha,
                min_effect=min_effect,
                tolerance=tolerance,
                allow_errors=allow_errors,
                clusters=clusters,
            )
            if len(targets) >= 2
            else None
        )
        self._parts: dict[str, tuple[Path, IO[str]]] = {}
        for name in (RESULTS_JSON, JUNIT_XML):
            fd, tmp = tempfile.mkstemp(dir=self.output_dir, prefix=f"{_PART_PREFIX}{os.getpid()}-", suffix=f".{name}")
            self._parts[name] = (Path(tmp), os.fdopen(fd, "w", encoding="utf-8", newline="\n"))
        self.cases = 0
        self._summary: EvaluationSummary | None = None

    def add(self, cases: Iterable[TestCaseResult], compare: bool = True) -> None:
        """Append a batch of case results (in case order). ``compare``: False for cases the baseline comparison
        leaves out (a run with several targets compares the first target's cases only)."""
        cases = list(cases)
        if not cases:
            return
        # One write per file and batch: a write may release the GIL, and taking it back from threads that are
        # scoring the next batches can cost a switch interval (5 ms), so per-case writes were a third of this.
        first = self.cases == 0
        self._parts[RESULTS_JSON][1].write(
            "".join([results_case(case, first and i == 0) for i, case in enumerate(cases)])
        )
        name = self.suite_name
        self._parts[JUNIT_XML][1].write("".join([junit_testcases(name, case) for case in cases]))
        self.cases += len(cases)
        self.summary_builder.add(cases)
        self.highlights.add(cases)
        if self.comparison_builder is not None and compare:
            self.comparison_builder.add(cases)
        if self.side_by_side_builder is not None:
            self.side_by_side_builder.add(cases)

    def summarize(self, embeddings: EmbeddingCounts | None = None) -> EvaluationSummary:
        """The run's summary so far (call after the last :meth:`add`)."""
        self._summary = self.summary_builder.finish(embeddings)
        return self._summary

    def comparison(self) -> Comparison | None:
        """The comparison with the baseline (None without one); call after :meth:`summarize`."""
        if self.comparison_builder is None:
            return None
        return self.comparison_builder.finish(self._summary or self.summarize())

    def side_by_side(self, targets: Sequence[TargetRun]) -> SideBySide | None:
        """The run's ``targets`` (in the suite's order) side by side, each compared with the first
        (:class:`~evaltasks.engine.side_by_side.SideBySideBuilder`); None when the writer was not opened with two or
        more targets or ``targets`` has fewer than 2. Call after the last :meth:`add`."""
        if self.side_by_side_builder is None:
            return None
        return self.side_by_side_builder.finish(targets)

    def write(
        self,
        header: RunHeader,
        summary: EvaluationSummary | None = None,
        comparison: Comparison | None = None,
        side_by_side: SideBySide | None = None,
    ) -> dict[str, Path]:
        """Write the three reports of a run as a set and remove the temporary parts; their paths by file name.

        ``header`` is results.json's header (:class:`~evaltasks.engine.lifecycle.RunHeader`: the gate's verdict,
        the warnings, the timing; its ``duration_s`` is junit.xml's ``time``); ``summary`` the summary to write
        (default :meth:`summarize`'s); ``comparison`` the comparison with the baseline, written as the
        ``comparison`` key and adding deltas and changes to summary.md; ``side_by_side`` the targets compared
        (:meth:`side_by_side`), written as the ``side_by_side`` key and rendered in summary.md. See
        :meth:`write_results`.
        """
        summary = summary or self._summary or self.summarize()
        report = RunReport(
            suite=self.suite_name,
            summary=summary,
            passed=header.passed,
            gate=header.gate,
            comparison=comparison,
            warnings=header.warnings,
            side_by_side=side_by_side,
        )
        return self.write_results(header.model_dump(), report, duration_s=header.duration_s)

    def write_results(
        self, header: Mapping[str, Any], report: RunReport, *, duration_s: float = 0.0
    ) -> dict[str, Path]:
        """Write the three reports as a set and remove the temporary parts; return their paths by file name.

        ``header`` holds the top-level keys of results.json before ``comparison``, ``summary`` and ``cases``, as
        given; ``report`` is what summary.md renders (:class:`~evaltasks.engine.lifecycle.RunReport`: the
        verdict, the gate, the warnings), its ``summary`` the one written, its ``comparison`` (with a
        baseline) written as the ``comparison`` key and its ``side_by_side`` (several targets) as the
        ``side_by_side`` key. ``duration_s``: junit.xml's ``time``.

        The set is replaced as a whole or not at all (:func:`~evaltasks._atomic.atomic_paths`): each report is
        written in full and fsynced under a temporary name first, and when any write fails (disk full) the
        temporaries are removed and the previous reports stay as they were. Then junit.xml and summary.md are
        renamed in and results.json last: a crash between the renames leaves the temporary of results.json
        beside the reports, the mark of an unfinished set (the next run removes it).
        """
        summary = report.summary
        if report.comparison is not None:
            header = {**header, "comparison": report.comparison.model_dump()}
        if report.side_by_side is not None:
            header = {**header, "side_by_side": report.side_by_side.model_dump()}
        for _, handle in self._parts.values():
            handle.flush()
        paths = {name: self.output_dir / name for name in (RESULTS_JSON, JUNIT_XML, SUMMARY_MD)}
        markdown = render_summary(report, self.highlights)
        with atomic_paths([paths[JUNIT_XML], paths[SUMMARY_MD], paths[RESULTS_JSON]]) as (junit, md, results):
            with synced_writer(results) as out:
                out.write(results_head(header, summary))
                _copy(self._parts[RESULTS_JSON][0], out)
                out.write(RESULTS_TAIL)
            with synced_writer(junit) as out:
                out.write(junit_head(self.suite_name, summary, duration_s))
                _copy(self._parts[JUNIT_XML][0], out)
                out.write(junit_run_metrics(self.suite_name, summary))
                out.write(JUNIT_TAIL)
            with synced_writer(md) as out:
                out.write(markdown)
        self.close()
        return paths

    def close(self) -> None:
        """Remove the temporary parts (idempotent)."""
        for path, handle in self._parts.values():
            if not handle.closed:
                handle.close()
            path.unlink(missing_ok=True)

    def __enter__(self) -> ReportWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _copy(part: Path, out: IO[str]) -> None:
    with open(part, encoding="utf-8", newline="\n") as handle:
        shutil.copyfileobj(handle, out, _BLOCK)


def _remove_stale_parts(directory: Path) -> None:
    """Remove temporary files killed runs left behind: parts of this module and the reports' temporaries
    (:func:`~evaltasks._atomic.remove_stale_temporaries`), except those of processes still running."""
    remove_stale_temporaries(directory, (RESULTS_JSON, JUNIT_XML, SUMMARY_MD))
    for path in directory.glob(f"{_PART_PREFIX}*"):
        pid = path.name[len(_PART_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and pid_alive(int(pid)):
            continue
        path.unlink(missing_ok=True)
