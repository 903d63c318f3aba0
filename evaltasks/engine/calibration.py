"""Threshold calibration against human pass/fail labels (docs/calibration.md#threshold-calibration).

``evaltasks calibrate SUITE --labels COLUMN`` scores every case of a suite with every metric (the Python API,
:func:`~evaltasks.engine.evaluate.evaluate_sync`, through the same reference index as a run) and, per metric, finds the
threshold whose verdicts (a case passes when ``score >= threshold``, as in :mod:`evaltasks.results`) agree best
with the labels.

Rules (the definitions the docs and tests use):

- Labels: ``pass``/``fail``, ``passed``/``failed``, ``true``/``false``, ``yes``/``no``, ``1``/``0``, any case,
  surrounding blanks ignored. Anything else is a :class:`~evaltasks.errors.DatasetError` naming file, row and
  column; an empty cell leaves the case out (counted as ``unlabelled``).
- Per metric, a case counts when it is labelled and the metric scored it (``passed`` or ``failed``); errored and
  skipped results are left out (counted).
- Candidate thresholds: every distinct score, and one above the highest (nobody passes; only when the highest
  score is below 1, since a threshold is in [0, 1]). Each candidate stands for all thresholds giving the same
  split, the interval ``(next lower score, score]``. The best candidate maximises agreement (accuracy), F1 or
  Cohen's κ; ties go to the candidate whose interval is nearest the metric's current threshold (equally near:
  the higher threshold). The threshold
  reported is the current one when it lies in the winning interval (no change), else the shortest decimal in it
  (``0.62`` rather than ``0.6213``), which gives exactly the same verdicts.
- Statistics come from scikit-learn: ``roc_curve`` (``drop_intermediate=False``) gives the confusion counts at
  every candidate for the search; the reported agreement, precision, recall, F1 and κ at a chosen threshold are
  ``accuracy_score``, ``precision_recall_fscore_support`` (binary, "pass" positive, 0 when undefined) and
  ``cohen_kappa_score``; the ROC AUC is ``roc_auc_score`` on the raw scores, n/a (with the reason) when only one
  label class is present. κ is n/a where undefined (labels and verdicts all one class), and no best-κ threshold
  is chosen when the labels are all one class (κ is then never above 0).

The module never imports Prefect and never edits the suite file: it only suggests the change.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from evaltasks.errors import DatasetError, Problem, quote

PASS_LABELS = frozenset({"pass", "passed", "true", "yes", "1"})
FAIL_LABELS = frozenset({"fail", "failed", "false", "no", "0"})


def parse_labels(
    values: Sequence[str | None],
    locations: Sequence[str],
    *,
    source: str,
    column: str,
) -> list[bool | None]:
    """The labels of a dataset column as booleans (True = pass), None where the cell is empty.

    Args:
        values: one cell per case (:attr:`~evaltasks.inputs.datasets.LoadedDataset.columns`), None when empty.
        locations: one location per case (``line N`` / ``item N``), for the error.
        source: the dataset file, for the error.
        column: the label column, for the error.

    Raises:
        DatasetError: one problem per cell that is not a label (see the module docstring), named by file,
            row and column.
    """
    labels: list[bool | None] = []
    problems: list[Problem] = []
    for value, where in zip(values, locations):
        word = value.strip().lower() if value is not None else ""
        if not word:
            labels.append(None)
        elif word in PASS_LABELS:
            labels.append(True)
        elif word in FAIL_LABELS:
            labels.append(False)
        else:
            labels.append(None)
            problems.append(
                Problem(
                    source,
                    where,
                    column,
                    f"must be a pass/fail label (pass, fail, passed, failed, "
                    f"true, false, yes, no, 1, 0), got {quote(value)}",
                )
            )
    if problems:
        raise DatasetError(problems, title="invalid labels")
    return labels


class ThresholdChoice(BaseModel):
    """The verdicts of one threshold against the labels.

    Attributes:
        threshold: the threshold (a case passes when ``score >= threshold``), in [0, 1].
        agreement: the share of cases whose verdict matches the label (accuracy), in [0, 1].
        agreed: how many cases that is.
        predicted_pass: cases passing at this threshold.
        precision, recall, f1: of the "pass" label (0.0 where undefined).
        kappa: Cohen's κ of verdicts and labels; None where undefined (both all one class).
    """

    threshold: float
    agreement: float
    agreed: int
    predicted_pass: int
    precision: float
    recall: float
    f1: float
    kappa: float | None


class MetricCalibration(BaseModel):
    """The calibration of one metric of the suite.

    Attributes:
        index: the metric's position in the suite (``metrics[index]``).
        metric: its class name; name: its result name.
        current_threshold: the threshold the suite gives it now.
        cases: labelled cases it scored (the ones counted); label_pass / label_fail: their labels.
        errored, skipped: labelled cases left out because the metric errored or was skipped on them.
        unlabelled: cases left out for an empty label.
        roc_auc: ROC AUC of the scores against the labels; None with ``roc_auc_note`` saying why.
        current: the verdicts at the current threshold (None without cases).
        best_agreement, best_f1, best_kappa: the thresholds maximising each (None without cases; best_kappa
            None when κ is undefined everywhere).
        suggestion: one line, e.g. ``metrics[0] (ReferenceMatchMetric): threshold 0.7 → 0.62``; None when the
            best-agreement threshold is the current one, when ``note`` is set, or when there are no cases.
        note: set when the best agreement passes every case or none: the metric's scores do not separate the
            labels better than giving every case the majority label (no threshold is suggested then).
    """

    index: int
    metric: str
    name: str
    current_threshold: float
    cases: int
    label_pass: int
    label_fail: int
    errored: int
    skipped: int
    unlabelled: int
    roc_auc: float | None
    roc_auc_note: str | None = None
    current: ThresholdChoice | None = None
    best_agreement: ThresholdChoice | None = None
    best_f1: ThresholdChoice | None = None
    best_kappa: ThresholdChoice | None = None
    suggestion: str | None = None
    note: str | None = None


class CalibrationReport(BaseModel):
    """What ``evaltasks calibrate`` reports (its ``--json`` output).

    Attributes:
        suite: the suite's name; suite_path: its file; dataset: the dataset file; labels: the label column.
        cases: cases in the dataset; unlabelled: cases with an empty label.
        metrics: one calibration per metric, in suite order.
        suggested_yaml: the suite change as a YAML snippet (the changed thresholds only), or None.
        duration_s: seconds spent scoring and calibrating (loading included).
    """

    suite: str
    suite_path: str
    dataset: str
    labels: str
    cases: int
    unlabelled: int
    metrics: list[MetricCalibration]
    suggested_yaml: str | None = None
    duration_s: float = 0.0


def shortest_decimal(low: float, high: float) -> float:
    """The number with the fewest decimals in the interval ``(low, high]`` (``low`` may be ``-inf``), in
    [0, 1]; ``high`` itself when none has fewer (e.g. ``(0.6, 0.6213]`` → ``0.61``; ``(-inf, 0.3]`` → ``0.0``).
    """
    for digits in range(0, 17):
        scale = 10.0**digits
        below = math.floor(high * scale)  # high * scale may fall just below an integer (0.57 * 100): try one up
        for step in (below, below + 1):
            candidate = round(step / scale, digits)
            if low < candidate <= high and candidate >= 0.0:
                return candidate
    return high


def _choice(scores: np.ndarray, labels: np.ndarray, threshold: float) -> ThresholdChoice:
    """The verdicts ``scores >= threshold`` against ``labels`` (booleans), with scikit-learn's statistics."""
    import warnings

    from sklearn.metrics import accuracy_score, cohen_kappa_score, precision_recall_fscore_support

    predicted = scores >= threshold
    precision, recall, f1, _ = precision_recall_fscore_support(
        labels, predicted, average="binary", pos_label=True, zero_division=0.0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 0/0 when labels and verdicts are all one class: reported as n/a
        kappa = float(cohen_kappa_score(labels, predicted))
    agreement = float(accuracy_score(labels, predicted))
    return ThresholdChoice(
        threshold=threshold,
        agreement=agreement,
        agreed=int(np.sum(predicted == labels)),
        predicted_pass=int(predicted.sum()),
        precision=float(precision),
        recall=float(recall),
        f1=float(f1),
        kappa=None if math.isnan(kappa) else kappa,
    )


def calibrate_scores(
    scores: Sequence[float],
    labels: Sequence[bool],
    current_threshold: float,
) -> tuple[ThresholdChoice, ThresholdChoice, ThresholdChoice | None, ThresholdChoice, float | None, str | None]:
    """Search the thresholds of one metric (rules in the module docstring).

    Args:
        scores: the metric's scores of the counted cases, in [0, 1] (at least one).
        labels: their labels (True = pass), same length.
        current_threshold: the suite's threshold, for ties and the "current" verdicts.

    Returns:
        ``(best_agreement, best_f1, best_kappa, current, roc_auc, roc_auc_note)``; ``best_kappa`` None when the
        labels are all one class, ``roc_auc`` None when only one label class is present (the note says so).

    Raises:
        ValueError: no scores, or lengths differ.
    """
    from sklearn.metrics import roc_auc_score, roc_curve

    x = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    if x.size == 0 or x.shape != y.shape:
        raise ValueError(f"need as many labels as scores (at least one), got {x.size} scores and {y.size} labels")
    positives, n = int(y.sum()), int(y.size)
    if 0 < positives < n:
        auc: float | None = float(roc_auc_score(y, x))
        note = None
        fpr, tpr, cuts = roc_curve(y, x, drop_intermediate=False)
        tp, fp = tpr * positives, fpr * (n - positives)
        tp, fp, cuts = np.rint(tp[1:]), np.rint(fp[1:]), cuts[1:]  # the first point is "nobody passes" (inf)
    else:
        auc = None
        note = f"only {'pass' if positives else 'fail'} labels ({n}): the ROC AUC needs both classes"
        ordered = np.sort(x)  # roc_curve needs both classes: count the passing cases at each score directly
        cuts = np.unique(x)[::-1]  # descending, as roc_curve's
        passing = (n - np.searchsorted(ordered, cuts, side="left")).astype(np.float64)
        tp, fp = (passing, np.zeros_like(passing)) if positives else (np.zeros_like(passing), passing)
    # candidates: each distinct score (descending, from roc_curve), and "nobody passes" above the highest
    highs = list(cuts)
    lows = [*cuts[1:], -math.inf]
    tps, fps = list(tp), list(fp)
    if cuts[0] < 1.0:
        highs.insert(0, 1.0)
        lows.insert(0, float(cuts[0]))
        tps.insert(0, 0.0)
        fps.insert(0, 0.0)
    tp_a, fp_a = np.array(tps), np.array(fps)
    fn_a, tn_a = positives - tp_a, (n - positives) - fp_a
    accuracy = (tp_a + tn_a) / n
    f1 = np.divide(2 * tp_a, 2 * tp_a + fp_a + fn_a, out=np.zeros_like(tp_a), where=(2 * tp_a + fp_a + fn_a) > 0)
    expected = ((tp_a + fp_a) * positives + (fn_a + tn_a) * (n - positives)) / (n * n)
    with np.errstate(divide="ignore", invalid="ignore"):  # one label class: κ is never above 0, no best one
        kappa = np.where((expected < 1.0) & (0 < positives < n), (accuracy - expected) / (1.0 - expected), np.nan)
    distance = np.array(
        [
            0.0 if low < current_threshold <= high else min(abs(current_threshold - high), abs(current_threshold - low))
            for low, high in zip(lows, highs)
        ]
    )

    def pick(values: np.ndarray) -> ThresholdChoice | None:
        if np.all(np.isnan(values)):
            return None
        best = np.nanmax(values)
        tied = np.flatnonzero(np.isclose(values, best, rtol=0.0, atol=1e-12))
        i = int(tied[np.argmin(distance[tied])])  # argmin: the first of equal distances, the higher threshold
        low, high = lows[i], highs[i]
        threshold = current_threshold if low < current_threshold <= high else shortest_decimal(low, high)
        return _choice(x, y, threshold)

    best_agreement, best_f1 = pick(accuracy), pick(f1)
    assert best_agreement is not None and best_f1 is not None  # accuracy and F1 are defined everywhere
    return best_agreement, best_f1, pick(kappa), _choice(x, y, current_threshold), auc, note


def calibrate_suite(
    suite_path: str | Path,
    labels_column: str,
    *,
    index_dir: str | Path | None = None,
) -> CalibrationReport:
    """Score a suite's dataset with its metrics and calibrate each metric's threshold against a label column.

    Args:
        suite_path: the suite YAML file.
        labels_column: the dataset column (CSV header, JSON/YAML key) holding the human labels.
        index_dir: the reference index directory (default as for a run: ``$EVALTASKS_INDEX_DIR`` or
            ``.evaltasks/index``), so embeddings are shared with runs.

    Raises:
        ConfigError: the suite is invalid.
        DatasetError: the dataset is invalid, the label column is missing or empty in every row, or a label is
            not a pass/fail word.
        CredentialsError: a provider's credentials are missing.
    """
    from evaltasks.engine.evaluate import evaluate_sync, validate_cases
    from evaltasks.index import default_index_dir
    from evaltasks.inputs.datasets import load_dataset
    from evaltasks.inputs.suite import load_suite

    started = time.perf_counter()
    suite = load_suite(suite_path)
    source = os.path.normpath(suite.path.parent / suite.suite.dataset.path)
    dataset = load_dataset(
        suite.suite.dataset,
        suite.path.parent,
        extra_columns=[labels_column],
        check=lambda cases, locations: validate_cases(cases, suite.metrics, source=source, locations=locations),
    )
    labels = parse_labels(dataset.columns[labels_column], dataset.locations, source=source, column=labels_column)
    if all(label is None for label in labels):  # scoring would take minutes to say nothing
        raise DatasetError(
            [
                Problem(
                    source,
                    "",
                    labels_column,
                    "every cell of the label column is empty: no case is labelled, nothing to calibrate",
                )
            ],
            title="invalid labels",
        )
    from evaltasks.engine import progress

    result = evaluate_sync(
        dataset.cases,
        suite.metrics,
        index_dir=index_dir or default_index_dir(),
        ids=dataset.ids,
        progress=progress.advance,
    )  # the stages and counts a terminal shows (evaltasks calibrate)
    unlabelled = sum(label is None for label in labels)
    calibrations: list[MetricCalibration] = []
    yaml_lines: list[str] = []
    for m, metric in enumerate(suite.metrics):
        scores: list[float] = []
        kept: list[bool] = []
        errored = skipped = 0
        for case_result, label in zip(result.test_results, labels):
            outcome = case_result.metrics[m]
            if label is None:
                continue
            if outcome.status == "errored":
                errored += 1
            elif outcome.status == "skipped" or outcome.score is None:
                skipped += 1
            else:
                scores.append(float(outcome.score))
                kept.append(label)
        kind = suite.suite.metrics[m].metric
        calibration = MetricCalibration(
            index=m,
            metric=kind,
            name=metric.name,
            current_threshold=metric.threshold,
            cases=len(scores),
            label_pass=sum(kept),
            label_fail=len(kept) - sum(kept),
            errored=errored,
            skipped=skipped,
            unlabelled=unlabelled,
            roc_auc=None,
            roc_auc_note="no labelled case was scored" if not scores else None,
        )
        if scores:
            best, best_f1, best_kappa, current, auc, note = calibrate_scores(scores, kept, metric.threshold)
            calibration = calibration.model_copy(
                update={
                    "roc_auc": auc,
                    "roc_auc_note": note,
                    "current": current,
                    "best_agreement": best,
                    "best_f1": best_f1,
                    "best_kappa": best_kappa,
                }
            )
            if best.predicted_pass in (0, len(scores)):
                calibration.note = (
                    f"the best agreement {'passes' if best.predicted_pass else 'fails'} every case: "
                    f"the scores do not separate the labels better than the majority label "
                    f"({'pass' if best.predicted_pass else 'fail'}) does"
                )
            elif best.threshold != metric.threshold:  # a trivial split is no threshold worth suggesting
                calibration.suggestion = (
                    f"metrics[{m}] ({kind}): threshold {_number(metric.threshold)} → {_number(best.threshold)}"
                )
                yaml_lines += [
                    f"  - metric: {kind}    # metrics[{m}]" + (f", name {metric.name}" if metric.name != kind else ""),
                    f"    threshold: {_number(best.threshold)}    # was {_number(metric.threshold)}",
                ]
        calibrations.append(calibration)
    return CalibrationReport(
        suite=suite.suite.name,
        suite_path=str(suite_path),
        dataset=source,
        labels=labels_column,
        cases=len(dataset.cases),
        unlabelled=unlabelled,
        metrics=calibrations,
        suggested_yaml="metrics:\n" + "\n".join(yaml_lines) if yaml_lines else None,
        duration_s=round(time.perf_counter() - started, 3),
    )


def _number(value: float) -> str:
    """``value`` in the fewest digits that read back exactly, without an exponent (``1``, ``0.62``,
    ``0.0000001``: YAML 1.1 reads ``1e-07`` as a string), via ``numpy.format_float_positional``: a threshold shown
    or suggested must give the very verdicts reported."""
    return np.format_float_positional(value).rstrip(".")


def _percent(choice: ThresholdChoice, cases: int) -> str:
    kappa = "n/a" if choice.kappa is None else f"{choice.kappa:.3f}"
    return (
        f"threshold {_number(choice.threshold)}: agreement {choice.agreement:.1%} ({choice.agreed}/{cases}), "
        f"precision {choice.precision:.3f}, recall {choice.recall:.3f}, F1 {choice.f1:.3f}, κ {kappa}, "
        f"{choice.predicted_pass} pass"
    )


def format_report(report: CalibrationReport) -> str:
    """The report as the terminal shows it (``evaltasks calibrate`` without ``--json``)."""
    lines = [
        f"calibration of {report.suite} against column '{report.labels}' of {report.dataset}: "
        f"{report.cases} cases, {report.unlabelled} unlabelled (left out)"
    ]
    for c in report.metrics:
        named = "" if c.name == c.metric else f" '{c.name}'"
        lines.append(
            f"metrics[{c.index}] {c.metric}{named}: {c.cases} cases counted ({c.label_pass} pass, "
            f"{c.label_fail} fail); left out: {c.errored} errored, {c.skipped} skipped"
        )
        if c.current is None or c.best_agreement is None or c.best_f1 is None:
            lines.append(f"  nothing to calibrate: {c.roc_auc_note}")
            continue
        auc = f"{c.roc_auc:.3f}" if c.roc_auc is not None else f"n/a ({c.roc_auc_note})"
        lines.append(f"  ROC AUC {auc}")
        lines.append(f"  current        {_percent(c.current, c.cases)}")
        lines.append(f"  best agreement {_percent(c.best_agreement, c.cases)}")
        lines.append(f"  best F1        {_percent(c.best_f1, c.cases)}")
        lines.append(
            "  best κ         "
            + (
                _percent(c.best_kappa, c.cases)
                if c.best_kappa
                else "n/a (the labels are all one class: κ is never above 0)"
            )
        )
        if c.note:
            lines.append(f"  note: {c.note}")
    suggestions = [c.suggestion for c in report.metrics if c.suggestion]
    if suggestions:
        lines.append("suggested suite change (best agreement; the suite file is not edited):")
        lines += [f"  {s}" for s in suggestions]
        lines += ["", *(report.suggested_yaml or "").splitlines()]
    else:
        lines.append(
            "no change suggested"
            + (
                ": every current threshold already gives the best agreement"
                if not any(c.note for c in report.metrics)
                else " (see the notes)"
            )
        )
    lines.append(f"({report.duration_s:.1f} s)")
    return "\n".join(lines)
