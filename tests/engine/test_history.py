"""Run history and drift (docs/history.md#run-history-and-drift): the store, the record's score moments, the drift
tests against hand computations and statsmodels, and ``evaltasks history``.

The expected p-values are computed independently of scipy's ``fisher_exact`` / ``ttest_ind_from_stats`` that
the product calls: Fisher's exact test from hypergeometric probabilities written out with ``math.comb``, and
Welch's test by statsmodels on the raw scores (the product only ever sees their count, mean and sd).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evaltasks.engine.history import (
    DEFAULT_HISTORY_DIR,
    HistoryStore,
    MetricRecord,
    RunRecord,
    ScoreMoments,
    current_commit,
    drift_check,
    history_file_name,
    render_history_markdown,
    resolve_history_dir,
)
from evaltasks.inputs.suite import HistorySpec
from evaltasks.results import MetricResult, TestCaseResult
from tests.cli_forkserver import run_cli


def _fisher_two_sided(a: int, b: int, c: int, d: int) -> float:
    """Two-sided Fisher exact p of [[a, b], [c, d]] by hand: the probabilities (hypergeometric, margins fixed)
    of every table no more likely than the observed one, summed."""
    row1, col1, n = a + b, a + c, a + b + c + d

    def prob(x: int) -> float:
        return math.comb(col1, x) * math.comb(n - col1, row1 - x) / math.comb(n, row1)

    observed = prob(a)
    lo, hi = max(0, row1 + col1 - n), min(row1, col1)
    return min(1.0, sum(prob(x) for x in range(lo, hi + 1) if prob(x) <= observed * (1 + 1e-7)))


def _record(
    passed: int,
    failed: int,
    scores: list[float] | None = None,
    name: str = "m",
    threshold: float = 0.5,
    config: dict | None = None,
) -> RunRecord:
    """A record of one metric whose cases are all evaluated: ``passed`` + ``failed`` cases, ``scores`` (the
    metric's scores; their moments are accumulated by ScoreMoments as the flow does)."""
    moments = ScoreMoments([name])
    if scores is not None:
        moments.add(
            TestCaseResult(
                id=str(i),
                actual_output="",
                status="passed",
                success=True,
                metrics=[MetricResult(name=name, score=s, threshold=threshold, success=True, reason="")],
            )
            for i, s in enumerate(scores)
        )
    metric = MetricRecord(
        config=config or {"metric": "X"},
        threshold=threshold,
        passed=passed,
        failed=failed,
        pass_rate=passed / (passed + failed),
        scored=moments.n[name],
        mean_score=moments.mean[name] if scores else None,
        score_sd=moments.sd(name),
    )
    return RunRecord(
        suite="s",
        metrics={name: metric},
        cases=passed + failed,
        passed_cases=passed,
        failed_cases=failed,
        pass_rate=passed / (passed + failed),
        passed=True,
    )


# -- drift tests --------------------------------------------------------------------------------------------------


def test_pass_rate_drift_is_fisher_exact_on_the_pooled_previous_runs() -> None:
    previous = [_record(45, 5), _record(47, 3), _record(44, 6)]  # pooled: 136 passed of 150
    current = _record(35, 15)
    report = drift_check(current, previous, alpha=0.05, min_effect=0.01)
    overall = report.tests[0]
    assert (overall.name, overall.statistic, overall.test, overall.runs) == ("overall", "pass_rate", "Fisher exact", 3)
    assert overall.before == pytest.approx(136 / 150) and overall.after == pytest.approx(35 / 50)
    assert overall.p_value == pytest.approx(_fisher_two_sided(35, 15, 136, 14), rel=1e-9)
    assert overall.p_value < 0.01 and overall.verdict == "regressed"
    metric = next(t for t in report.tests if t.name == "m" and t.statistic == "pass_rate")
    assert metric.p_value == pytest.approx(overall.p_value) and metric.verdict == "regressed"
    assert report.verdict == "regressed" and {t.label for t in report.regressed} == {"overall", "m pass_rate"}


def test_a_small_drop_on_few_cases_is_no_significant_change_and_a_rise_is_improved() -> None:
    report = drift_check(_record(6, 2), [_record(7, 1)], alpha=0.05, min_effect=0.01)  # 87.5% -> 75%
    assert report.tests[0].p_value == pytest.approx(_fisher_two_sided(6, 2, 7, 1)) == pytest.approx(1.0)
    assert report.verdict == "no significant change" and report.regressed == []
    rise = drift_check(_record(50, 0), [_record(30, 20), _record(28, 22)])
    assert rise.tests[0].verdict == "improved" and rise.verdict == "improved"
    assert rise.tests[0].p_value == pytest.approx(_fisher_two_sided(50, 0, 58, 42), rel=1e-9)


def test_a_significant_drop_below_min_effect_is_not_a_regression() -> None:
    big = [_record(99_000, 1_000)]
    report = drift_check(_record(98_600, 1_400), big, alpha=0.05, min_effect=0.01)  # -0.4 points, p tiny
    assert report.tests[0].p_value < 1e-10 and report.tests[0].verdict == "no significant change"
    assert drift_check(_record(98_600, 1_400), big, min_effect=0.001).tests[0].verdict == "regressed"


def test_score_drift_is_welch_t_from_pooled_moments_matching_statsmodels_on_the_raw_scores() -> None:
    from statsmodels.stats.weightstats import ttest_ind

    rng = np.random.default_rng(7)
    runs = [rng.normal(0.80, 0.05, size=n).clip(0, 1) for n in (40, 55, 31)]
    now = rng.normal(0.74, 0.09, size=47).clip(0, 1)
    previous = [_record(len(r), 0, list(map(float, r))) for r in runs]
    current = _record(len(now), 0, list(map(float, now)))
    for run, record in zip(runs, previous):  # the streamed moments are the sample's
        assert record.metrics["m"].mean_score == pytest.approx(run.mean(), rel=1e-12)
        assert record.metrics["m"].score_sd == pytest.approx(run.std(ddof=1), rel=1e-9)
    test = next(t for t in drift_check(current, previous).tests if t.statistic == "mean_score")
    pooled = np.concatenate(runs)
    _, want_p, _ = ttest_ind(now, pooled, usevar="unequal")
    assert (test.test, test.runs) == ("Welch t", 3)
    assert test.before == pytest.approx(pooled.mean(), rel=1e-12) and test.after == pytest.approx(now.mean())
    assert test.p_value == pytest.approx(want_p, rel=1e-6)
    assert test.p_value < 0.05 and test.verdict == "regressed"


def test_identical_runs_do_not_drift_and_changed_metric_configs_are_not_pooled() -> None:
    same = _record(40, 10, [0.5, 0.7, 0.9, 0.6])
    report = drift_check(same, [same, same])
    assert [t.p_value for t in report.tests] == [pytest.approx(1.0)] * 3
    assert report.verdict == "no significant change"
    other = _record(50, 0, [1.0, 1.0, 0.9], config={"metric": "X", "max_length": 3})  # another configuration
    tests = drift_check(_record(10, 40, [0.1, 0.2, 0.1]), [other])
    assert [t.name for t in tests.tests] == ["overall"]  # the metric has no comparable previous run
    assert tests.verdict == "regressed"


def test_constant_scores_on_both_sides_decide_without_a_nan() -> None:
    down = next(
        t
        for t in drift_check(_record(3, 0, [0.5] * 3), [_record(3, 0, [0.9] * 3)]).tests
        if t.statistic == "mean_score"
    )
    assert (down.p_value, down.verdict) == (0.0, "regressed")
    one = next(
        t for t in drift_check(_record(1, 0, [0.1]), [_record(3, 0, [0.9] * 3)]).tests if t.statistic == "mean_score"
    )
    assert one.p_value is None and one.verdict == "no significant change"  # one score: no spread to test


# -- the store ----------------------------------------------------------------------------------------------------


def test_store_appends_lines_and_reads_them_back_per_suite(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h")
    for passed in (5, 6, 7):
        store.append(_record(passed, 10 - passed))
    other = _record(1, 1).model_copy(update={"suite": "s!"})  # the same file as "s": read keeps each its own
    store.append(other)
    assert history_file_name("s") == "s.jsonl" and history_file_name("a / b..") == "a-b.jsonl"
    assert history_file_name("../..") == "suite.jsonl"
    assert [r.passed_cases for r in store.read("s")] == [5, 6, 7]
    assert [r.passed_cases for r in store.read("s", last=2)] == [6, 7]
    assert [r.suite for r in store.read("s!")] == ["s!"]
    assert store.read("never") == []
    lines = (tmp_path / "h" / "s.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and all(json.loads(line)["schema_version"] == 1 for line in lines)


def test_a_torn_last_line_is_skipped_with_a_warning_and_the_next_append_still_reads(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    store.append(_record(5, 5))
    path = store.path("s")
    whole = _record(6, 4).model_dump_json()
    with open(path, "a", encoding="utf-8") as out:
        out.write(whole[: len(whole) // 2])  # a crash mid-write: half a line, no newline
    assert [r.passed_cases for r in store.read("s")] == [5]
    assert len(store.warnings) == 1 and "line 2 is not a run record, skipped" in store.warnings[0]
    store.append(_record(7, 3))
    fresh = HistoryStore(tmp_path)
    assert [r.passed_cases for r in fresh.read("s")] == [5, 7]
    assert len(fresh.warnings) == 1


def test_concurrent_appends_from_processes_keep_every_line_whole(tmp_path: Path) -> None:
    code = (
        "import sys; from evaltasks.engine.history import HistoryStore, RunRecord\n"
        "store = HistoryStore(sys.argv[1])\n"
        "for i in range(25): store.append(RunRecord(suite='s', cases=int(sys.argv[2]), commit='x' * 4000))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(k)]) for k in range(4)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0, 0]
    store = HistoryStore(tmp_path)
    records = store.read("s")
    assert store.warnings == [] and len(records) == 100
    assert sorted(r.cases for r in records) == sorted(k for k in range(4) for _ in range(25))


def test_history_dir_order_suite_dir_then_flag_then_environment_then_default(tmp_path: Path) -> None:
    suite = tmp_path / "suites" / "suite.yaml"
    env = {"EVALTASKS_HISTORY_DIR": "/env/h"}
    assert resolve_history_dir(suite, HistorySpec(dir="hist"), "flag", env) == tmp_path.resolve() / "suites" / "hist"
    assert resolve_history_dir(suite, HistorySpec(), "flag", env) == Path("flag")
    assert resolve_history_dir(suite, None, None, env) == Path("/env/h")
    assert resolve_history_dir(suite, HistorySpec(), None, {}) == Path(DEFAULT_HISTORY_DIR)
    assert resolve_history_dir(suite, None, None, {}) is None


def test_commit_from_github_sha_then_git_then_none(tmp_path: Path) -> None:
    assert current_commit(tmp_path, {"GITHUB_SHA": "abc"}) == "abc"
    assert current_commit(tmp_path, {}) is None  # not a checkout
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*git, "-C", str(tmp_path), "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert current_commit(tmp_path, {}) == head


def test_history_markdown_has_a_table_with_ascii_bars_and_no_mermaid() -> None:
    records = [_record(9, 1, [0.9, 0.8]), _record(5, 5, [0.4, 0.5])]
    records[1].drift = ["overall"]
    markdown = render_history_markdown("s", records, drift_check(records[1], records[:1]))
    assert "mermaid" not in markdown and "xychart" not in markdown
    assert "`##################..`" in markdown and "`##########..........`" in markdown  # 90 %, 50 %
    assert "| 90.0% |" in markdown and "| 50.0% |" in markdown and "| 0.850 |" in markdown
    assert "## Drift of the latest run against the previous 1" in markdown


@pytest.mark.slow
def test_a_history_directory_that_cannot_be_created_is_a_usage_error(tmp_path: Path) -> None:
    """Checked before Prefect starts (exit 2, no traceback), not found after the run as a logged error."""
    (tmp_path / "d.csv").write_text("actual_output\nx\n", encoding="utf-8")
    (tmp_path / "s.yaml").write_text(
        "name: s\ndataset: {path: d.csv}\nmetrics: [{metric: LengthCheckMetric, max_length: 3}]\n", encoding="utf-8"
    )
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evaltasks.cli",
            "run",
            "s.yaml",
            "--no-server",
            "--history-dir",
            str(tmp_path / "a-file" / "history"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert f"history directory {tmp_path / 'a-file' / 'history'}: {tmp_path / 'a-file'} is a file" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "eval-results").exists()


def _history_of_two_metrics(directory: Path) -> None:
    """Three runs of suite ``quick`` with two long-named metrics; the last one drifted
    (docs/history.md#run-history-and-drift): what `evaltasks history` prints in the two tests below."""
    from evaltasks.results import Interval

    store = HistoryStore(directory)
    for day, passed in enumerate((7, 8, 5), 1):
        record = _record(passed, 10 - passed, scores=[0.5 + 0.04 * passed] * 10, name="ReferenceMatchMetric")
        length = _record(passed, 10 - passed, scores=[0.9] * 10, name="LengthCheckMetric").metrics
        store.append(
            record.model_copy(
                update={
                    "suite": "quick",
                    "metrics": {**record.metrics, **length},
                    "started_at": f"2026-12-0{day}T10:00:00+00:00",
                    "commit": "abcdef1234567",
                    "dataset_sha256": "0123456789abcdef",
                    "verdict": "regressed" if day == 3 else "inconclusive",
                    "pass_rate_interval": Interval(low=0.397, high=0.892, level=0.95, method="wilson"),
                    "drift": ["overall", "ReferenceMatchMetric mean_score"] if day == 3 else [],
                }
            )
        )


def test_history_table_keeps_every_column_on_an_80_column_terminal(tmp_path: Path) -> None:
    """In an 80-column pseudo-terminal every column shows, numbers whole, and the folded drift reads back whole."""
    from tests.cli.test_terminal import _run_in_terminal, _screen_lines
    from tests.process_env import subprocess_env

    _history_of_two_metrics(tmp_path / "h")
    (tmp_path / "s.yaml").write_text("name: quick\nmetrics: []\n", encoding="utf-8")
    code, raw = _run_in_terminal(
        ["history", "s.yaml", "--history-dir", "h"], tmp_path, subprocess_env(tmp_path / "home"), columns=80
    )
    lines = [line for line in _screen_lines(raw) if line]
    assert code == 0, raw
    assert all(len(line) <= 80 for line in lines), lines
    header = next(line for line in lines if line.startswith("time (UTC)"))
    assert header.split() == [
        "time",
        "(UTC)",
        "commit",
        "dataset",
        "pass",
        "rate",
        "m1",
        "m2",
        "gate",
        "verdict",
        "drift",
    ]
    rows = [line for line in lines if line.startswith("2026-12-0")]
    assert [row.split()[:9] for row in rows] == [  # the time of day on the next line
        ["2026-12-01", "abcdef12", "01234567", "70.0%", "0.780", "0.900", "passed", "inconclusive", "—"],
        ["2026-12-02", "abcdef12", "01234567", "80.0%", "0.820", "0.900", "passed", "inconclusive", "—"],
        ["2026-12-03", "abcdef12", "01234567", "50.0%", "0.700", "0.900", "passed", "regressed", "overall,"],
    ]
    assert sum(line.startswith("10:00 ") for line in lines) == 3
    drift_at = header.index("drift")
    drift = "".join(line[drift_at:] for line in lines[lines.index(rows[2]) :] if len(line) > drift_at)
    assert drift.replace(" ", "") == "overall,ReferenceMatchMetricmean_score"
    assert sum("39.7–89.2%" in line for line in lines) == 3
    assert "mean scores: m1 = ReferenceMatchMetric, m2 = LengthCheckMetric" in lines


@pytest.mark.slow
def test_piped_history_keeps_each_run_on_one_whole_line(tmp_path: Path) -> None:
    """Piped (COLUMNS=80 set, as a CI log has), each run is one line with every cell whole; nothing is cut."""
    from tests.process_env import subprocess_env

    _history_of_two_metrics(tmp_path / "h")
    (tmp_path / "s.yaml").write_text("name: quick\nmetrics: []\n", encoding="utf-8")
    env = {**subprocess_env(tmp_path / "home"), "COLUMNS": "80", "EVALTASKS_NO_SERVER": "1"}
    proc = run_cli("history", "s.yaml", "--history-dir", "h", cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"Run history of quick ({Path('h') / 'quick.jsonl'})"
    rows = [line.split() for line in lines if line.startswith("2026-12-0")]
    assert [row[:10] for row in rows] == [
        ["2026-12-01", "10:00", "abcdef12", "01234567", "70.0%", "0.780", "0.900", "passed", "inconclusive", "—"],
        ["2026-12-02", "10:00", "abcdef12", "01234567", "80.0%", "0.820", "0.900", "passed", "inconclusive", "—"],
        ["2026-12-03", "10:00", "abcdef12", "01234567", "50.0%", "0.700", "0.900", "passed", "regressed", "overall,"],
    ]
    assert rows[2][10:] == ["ReferenceMatchMetric", "mean_score"]
    assert "…" not in proc.stdout


@pytest.mark.parametrize(
    "damage, field",
    [
        (lambda d: d["metrics"]["m"].update(mean_score=float("nan")), "metrics.m.mean_score"),
        (lambda d: d["metrics"]["m"].update(failed=-3), "metrics.m.failed"),
        (lambda d: d.update(passed_cases=-1), "passed_cases"),
        (lambda d: d.update(passed_cases=99), "99 passed and 0 skipped of 10 cases"),
        (lambda d: d["metrics"]["m"].update(score_sd=float("inf")), "metrics.m.score_sd"),
    ],
)
def test_a_record_with_a_nan_or_a_negative_count_is_skipped_naming_file_line_and_field(
    tmp_path: Path, damage, field
) -> None:
    """A hand-edited line the drift tests cannot use is skipped like a torn one; the run's drift check works."""
    store = HistoryStore(tmp_path)
    store.append(_record(5, 5, [0.4, 0.6]))
    bad = json.loads(_record(6, 4, [0.5, 0.7]).model_dump_json())
    damage(bad)
    with open(store.path("s"), "a", encoding="utf-8") as out:
        out.write(json.dumps(bad) + "\n")  # json.dumps writes NaN and Infinity as Python's json reads them
    records = store.read("s")
    assert [r.passed_cases for r in records] == [5]
    assert len(store.warnings) == 1
    assert store.warnings[0].startswith(f"{store.path('s')}: line 2 is not a run record, skipped (")
    assert field in store.warnings[0]
    drift = drift_check(_record(4, 6, [0.3, 0.5]), records)
    assert [t.runs for t in drift.tests] == [1, 1, 1]


@pytest.mark.slow
def test_a_run_after_a_damaged_history_line_records_and_warns_instead_of_aborting(tmp_path: Path) -> None:
    """End to end: a history file with a NaN mean and a negative count, then `evaltasks run` exits 0, says which
    lines it skipped, and appends its own record (the previous good record is pooled)."""
    (tmp_path / "d.csv").write_text("actual_output\nabc\nabcd\n", encoding="utf-8")
    (tmp_path / "s.yaml").write_text(
        "name: s\ndataset: {path: d.csv}\nhistory: {dir: hist}\n"
        "metrics: [{metric: LengthCheckMetric, max_length: 10}]\n",
        encoding="utf-8",
    )
    store = HistoryStore(tmp_path / "hist")
    good = _record(
        2,
        0,
        [1.0, 1.0],
        name="LengthCheckMetric",
        threshold=0.5,
        config={"metric": "LengthCheckMetric", "max_length": 10},
    )
    store.append(good)
    nan = json.loads(good.model_dump_json())
    nan["metrics"]["LengthCheckMetric"]["mean_score"] = float("nan")
    negative = json.loads(good.model_dump_json())
    negative["metrics"]["LengthCheckMetric"]["passed"] = -2
    with open(store.path("s"), "a", encoding="utf-8") as out:
        out.write(json.dumps(nan) + "\n" + json.dumps(negative) + "\n")
    proc = run_cli("run", "s.yaml", "--no-server", cwd=tmp_path, env=dict(os.environ), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output
    for line in (2, 3):
        assert f"line {line} is not a run record, skipped" in output
    fresh = HistoryStore(tmp_path / "hist")
    assert [r.passed_cases for r in fresh.read("s")] == [2, 2]
