"""Baseline comparison, skipped metrics (missing credentials) and the gate's allow_errors (without Prefect, and
through real `evaltasks run` runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaltasks.engine.baseline import load_baseline
from evaltasks.engine.compare import compare_results
from evaltasks.engine.lifecycle import gate_pass_rate, gate_passed
from evaltasks.engine.run import plan_run
from evaltasks.engine.summary import summarize
from evaltasks.errors import ConfigError, InputError
from evaltasks.reports.markdown import Section, fit_sections
from evaltasks.results import EvaluationResult, MetricResult, TestCaseResult
from tests.cli_forkserver import run_cli


def _case(case_id: str, scores: dict[str, float | None], threshold: float = 0.5) -> TestCaseResult:
    metrics = [
        MetricResult.scored(name, score, threshold, "r", {})
        if score is not None
        else MetricResult.errored(name, threshold, "provider down")
        for name, score in scores.items()
    ]
    return TestCaseResult.from_metrics(case_id, None, "out", metrics)


def _doc(cases: list[TestCaseResult]) -> dict:
    summary = summarize(cases, {name: 0.5 for name in {m.name for c in cases for m in c.metrics}})
    return json.loads(json.dumps({"summary": summary.model_dump(), "cases": [c.model_dump() for c in cases]}))


BASE = [
    _case("a", {"M": 0.90, "N": 0.40}),
    _case("b", {"M": 0.60, "N": 0.70}),
    _case("c", {"M": 0.55, "N": 0.80}),
    _case("gone", {"M": 0.90, "N": 0.90}),
]
CURRENT = [
    _case("a", {"M": 0.895, "N": 0.60}),  # M within tolerance; N failed -> passed: better
    _case("b", {"M": 0.45, "N": 0.75}),  # M passed -> failed: worse (Δ -0.15); N +0.05: better
    _case("c", {"M": None, "N": 0.79}),  # M passed -> errored: worse; N within tolerance
    _case("new", {"M": 0.90, "N": 0.90}),
]


def test_changes_follow_the_documented_rules() -> None:
    summary = summarize(CURRENT, {"M": 0.5, "N": 0.5})
    comparison = compare_results(_doc(BASE), summary, CURRENT, tolerance=0.01, label="main")
    got = [(c.kind, c.case_id, c.metric) for c in comparison.changes]
    assert got == [
        ("worse", "b", "M"),
        ("worse", "c", "M"),
        ("new", "new", ""),
        ("removed", "gone", ""),
        ("better", "a", "N"),
        ("better", "b", "N"),
    ]
    assert comparison.changes[0].delta == pytest.approx(0.45 - 0.60)
    assert comparison.counts == {"worse": 2, "new": 1, "removed": 1, "better": 2}
    # metric M: base mean (0.9+0.6+0.55+0.9)/4, current mean over scored (0.895+0.45+0.9)/3
    m = next(x for x in comparison.metrics if x.name == "M")
    assert m.mean_delta == pytest.approx((0.895 + 0.45 + 0.9) / 3 - (0.9 + 0.6 + 0.55 + 0.9) / 4)
    assert m.pass_rate_delta == pytest.approx(2 / 4 - 4 / 4) and not m.regressed  # 2 paired cases: see below
    n = next(x for x in comparison.metrics if x.name == "N")
    assert n.pass_rate_delta == pytest.approx(4 / 4 - 3 / 4) and not n.regressed
    # overall: base b, c, gone passed (3 of 4); current a and new (2 of 4)
    assert comparison.pass_rate_delta == pytest.approx(2 / 4 - 3 / 4)
    # Verdicts come from the paired tests (docs/statistics.md#uncertainty-and-regressions), not from the tolerance.
    # Overall, paired cases a, b, c: b and c passed -> not passed, a the other way: McNemar p = 1, and 3 paired
    # cases cannot detect 1 point (6 discordant cases are needed at alpha 0.05): inconclusive.
    overall = comparison.pass_rate_test
    assert (overall.paired_cases, overall.worse, overall.better) == (3, 2, 1)
    assert overall.p_value == pytest.approx(1.0) and overall.verdict == "inconclusive"
    assert overall.min_detectable_effect == 1.0  # 6 / 3 capped: no change of 3 cases could be significant
    # M's pass rate: 2 worse of 3 paired, p = 2 * 0.5**2 = 0.5: inconclusive. Its scores, paired on a and b,
    # both fell (-0.005, -0.15): the sign-flip test over 2 cases gives p = 2 of 4 sign patterns = 0.5, and 2
    # cases can never reach p < 0.05 (2 / 2**2): inconclusive, with a detectable change of 1.0 (none).
    assert m.pass_rate_test.p_value == pytest.approx(0.5) and m.pass_rate_test.verdict == "inconclusive"
    assert m.score_test.paired_cases == 2 and m.score_test.delta == pytest.approx((0.895 + 0.45) / 2 - 0.75)
    assert m.score_test.p_value == pytest.approx(0.5) and m.score_test.min_detectable_effect == 1.0
    assert m.verdict == "inconclusive" and not comparison.regressed and comparison.verdict == "inconclusive"
    assert comparison.regressions == []
    assert n.verdict == "inconclusive" and not n.regressed
    assert (comparison.paired_cases, comparison.new_cases, comparison.removed_cases) == (3, ["new"], ["gone"])


def test_a_larger_tolerance_hides_small_changes() -> None:
    summary = summarize(CURRENT, {"M": 0.5, "N": 0.5})
    comparison = compare_results(_doc(BASE), summary, CURRENT, tolerance=0.3)
    kinds = {(c.case_id, c.metric): c.kind for c in comparison.changes}
    assert kinds[("b", "M")] == "worse"  # a status flip counts whatever the tolerance
    assert ("b", "N") not in kinds
    with pytest.raises(ValueError, match="tolerance"):
        compare_results(_doc(BASE), summary, CURRENT, tolerance=-0.1)


def test_skipped_metrics_are_not_regressions() -> None:
    current = [
        TestCaseResult.from_metrics(c.id, None, "out", [MetricResult.skipped("M", 0.5, "no key"), m])
        for c in CURRENT
        for m in c.metrics
        if m.name == "N"
    ]
    summary = summarize(current, {"M": 0.5, "N": 0.5})
    comparison = compare_results(_doc(BASE), summary, current)
    assert not any(c.metric == "M" for c in comparison.changes)
    assert not next(x for x in comparison.metrics if x.name == "M").regressed


def test_bad_baselines_are_reported_with_the_file(tmp_path: Path) -> None:
    for name, text, needle in (
        ("missing.json", None, "not found"),
        ("bad.json", "{not json", "line 1"),
        ("other.json", '{"a": 1}', "not an evaltasks results.json"),
    ):
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(InputError, match=needle) as info:
            load_baseline(path)
        assert str(path) in str(info.value)


def test_baselines_that_cannot_be_paired_are_refused_naming_case_and_field(tmp_path: Path) -> None:
    """A newer schema, a duplicated case id and a score that is not a number: exit 2 material, each named."""
    good = {
        "schema_version": 2,
        "summary": {},
        "cases": [
            {"id": "a", "metrics": [{"name": "M", "score": 0.5, "status": "passed"}]},
            {"id": "b", "metrics": [{"name": "M", "score": None, "status": "errored"}]},
        ],
    }
    path = tmp_path / "base.json"
    path.write_text(json.dumps(good), encoding="utf-8")
    assert load_baseline(path)["cases"][1]["id"] == "b"  # null scores (errored, skipped) are fine
    bad = {
        "schema_version": 5,
        "summary": {},
        "cases": [
            {"id": "a", "metrics": [{"name": "M", "score": "high", "status": "passed"}]},
            {"id": "a", "metrics": [{"name": "M", "score": True, "status": "passed"}]},
        ],
    }
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_baseline(path)
    text = str(caught.value)
    assert f"{path}: field 'schema_version' is 5: this evaltasks reads results.json versions 1, 2, 3, 4" in text
    assert f"{path}, cases[0] (id 'a'): field 'metrics.M.score' must be a number or null, got 'high'" in text
    assert f"{path}, cases[1]: field 'id' 'a' is also cases[0]: ids must be unique to pair cases" in text
    assert "got True" in text and len(caught.value.problems) == 4


BAD_BASELINES = [  # (what is wrong, the results.json text, the located problem evaltasks names)
    (
        "a NaN score",
        '{"summary": {}, "cases": [{"id": "a", "metrics": [{"name": "M", "score": NaN}]}]}',
        "cases[0] (id 'a'): field 'metrics.M.score' must be a finite number or null, got nan",
    ),
    (
        "an infinite score",
        '{"summary": {}, "cases": [{"id": "a", "metrics": [{"name": "M", "score": -Infinity}]}]}',
        "cases[0] (id 'a'): field 'metrics.M.score' must be a finite number or null, got -inf",
    ),
    (
        "a NaN mean score",
        '{"summary": {"metrics": {"M": {"mean_score": NaN}}}, "cases": []}',
        "summary: field 'metrics.M.mean_score' must be a finite number or null, got nan",
    ),
    (
        "an infinite pass rate",
        '{"summary": {"pass_rate": 1e999}, "cases": []}',
        "summary: field 'pass_rate' must be a finite number or null, got inf",
    ),
    ("cases that are not objects", '{"summary": {}, "cases": [1, 2]}', "cases[0]: is not an object (got 1)"),
    (
        "a case without an id",
        '{"summary": {}, "cases": [{"metrics": []}, {"id": null}]}',
        "cases[1]: field 'id' is missing: cases are paired by id",
    ),
    (
        "a duplicated id",
        '{"summary": {}, "cases": [{"id": "a"}, {"id": "a"}]}',
        "cases[1]: field 'id' 'a' is also cases[0]: ids must be unique to pair cases",
    ),
    (
        "a newer schema",
        '{"schema_version": 5, "summary": {}, "cases": []}',
        ": field 'schema_version' is 5: this evaltasks reads results.json versions 1, 2, 3, 4",
    ),
    (
        "metrics that are not a list",
        '{"summary": {}, "cases": [{"id": "a", "metrics": {"M": 1}}]}',
        "cases[0] (id 'a'): field 'metrics' must be a list, got {'M': 1}",
    ),
]


@pytest.mark.parametrize("what, text, problem", BAD_BASELINES, ids=[b[0] for b in BAD_BASELINES])
def test_a_baseline_with_nan_scores_or_cases_that_cannot_be_paired_is_invalid_input(
    tmp_path: Path, what: str, text: str, problem: str
) -> None:
    """Each is an InputError naming the file, case and field (a NaN score used to reach the paired tests and
    abort the run with exit 3); the same text when the file is named by another name (the Action's cache entry)."""
    path = tmp_path / "base.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_baseline(path)
    assert f"{path}{problem}" in str(caught.value).replace(f"{path}, ", f"{path}"), str(caught.value)
    with pytest.raises(InputError) as named:
        load_baseline(path, name="cache entry")
    assert str(path) not in str(named.value) and "cache entry" in str(named.value)


def test_an_explicit_baseline_with_a_nan_score_exits_2_naming_file_case_and_field(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """Through `evaltasks run --baseline`: exit 2 and one located line, before anything is scored (it was exit 3)."""
    base = tmp_path / "base.json"
    base.write_text(
        '{"summary": {"pass_rate": 1.0}, "cases": [{"id": "c0", "status": "passed", '
        '"metrics": [{"name": "EchoScore", "score": NaN, "status": "passed"}]}]}',
        encoding="utf-8",
    )
    (tmp_path / "echo_metrics.py").write_text(ECHO_METRIC, encoding="utf-8")
    (tmp_path / "s.jsonl").write_text('{"id": "c0", "actual_output": "1.0"}\n', encoding="utf-8")
    (tmp_path / "s.yaml").write_text(
        "name: s\ndataset: {path: s.jsonl}\nmetrics:\n  - {metric: 'echo_metrics:EchoScore'}\n", encoding="utf-8"
    )
    env = {k: v for k, v in os.environ.items() if k != "EVALTASKS_INDEX_DIR"}
    env.update(PREFECT_API_URL=prefect_api_url, PREFECT_HOME=str(tmp_path / "prefect-home"), DO_NOT_TRACK="1")
    proc = run_cli("run", "s.yaml", "--output-dir", "out", "--quiet", "--baseline", str(base), cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        f"{base}, cases[0] (id 'c0'): field 'metrics.EchoScore.score' must be a finite number or null, got nan"
        in proc.stderr
    )
    assert "Traceback" not in proc.stderr and not (tmp_path / "out" / "results.json").exists()


def test_fit_sections_drops_rows_of_the_least_important_section_first() -> None:
    sections = [
        Section(head=["# title"]),
        Section(head=["## keep"], rows=[f"k{i}" for i in range(5)], priority=0),
        Section(head=["## cut"], rows=[f"c{i}" for i in range(100)], priority=5),
    ]
    full = fit_sections(sections, None)
    assert full.count("\n") == 107
    text = fit_sections(sections, 200)
    assert len(text) <= 200 and all(f"k{i}" in text for i in range(5)) and "Truncated:" in text
    kept = sum(1 for line in text.splitlines() if line.startswith("c"))
    omitted = int(text.split("Truncated: ")[1].split(" ")[0])
    assert kept + omitted == 100 and kept > 0
    assert len(fit_sections(sections, 200, size=lambda s: len(s.encode("utf-16-le")) // 2)) <= 200
    # not even the fixed lines fit: the first lines (title, verdict) and a note, cut by characters if need be
    note = "# title\n\n> ⚠️ Truncated: the report is too large to show here.\n"
    assert fit_sections(sections, len(note)) == note
    assert fit_sections(sections, 5) == "# tit"


# --- skipped metrics and the gate -----------------------------------------------------------------------------

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


def _suite(tmp_path: Path, metrics: str, gate: str = "min_pass_rate: 0.8") -> Path:
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"name: s\ndataset: {{path: {QUICKSTART / 'answers.jsonl'}, fields: {{id: id, input: question, "
        f"actual_output: answer, references: references}}}}\nmetrics:\n{metrics}gate: {{{gate}}}\n"
    )
    return suite


OPENAI_AND_LENGTH = (
    "  - metric: ReferenceMatchMetric\n    embedding_provider: openai\n"
    "  - metric: LengthCheckMetric\n    max_length: 30\n    unit: words\n"
)


def test_missing_credentials_are_a_config_error_unless_skipping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    suite = _suite(tmp_path, OPENAI_AND_LENGTH)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY") as info:
        plan_run(suite)
    assert info.value.problems[0].field == "embedding_provider"
    plan = plan_run(suite, skip_missing_credentials=True)
    assert [type(m).__name__ for m in plan.suite.metrics] == ["SkippedMetric", "LengthCheckMetric"]
    assert plan.suite.metrics[0].threshold == 0.7  # ReferenceMatchMetric's default threshold
    assert len(plan.suite.warnings) == 1 and "ReferenceMatchMetric is skipped" in plan.suite.warnings[0]
    assert len(plan.suite.notices) == 1 and "outside the suite's directory" in plan.suite.notices[0]
    assert list(plan.needs) == []  # nothing to embed


@pytest.mark.slow
def test_cli_skips_missing_credentials_and_the_gate_leaves_them_out(tmp_path: Path) -> None:
    from evaltasks.engine.evaluate import evaluate_sync

    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    suite = _suite(tmp_path, OPENAI_AND_LENGTH)
    proc = run_cli("run", str(suite), "--output-dir", str(tmp_path / "o"), cwd=Path.cwd(), env=env)
    assert proc.returncode == 2 and "OPENAI_API_KEY" in proc.stderr and "Traceback" not in proc.stderr
    plan = plan_run(suite, skip_missing_credentials=True)
    result = evaluate_sync(plan.dataset.cases, plan.suite.metrics)
    s = result.summary
    assert s.metrics["ReferenceMatchMetric"].skipped == 8 and s.metrics["LengthCheckMetric"].passed == 7
    assert (s.passed_cases, s.failed_cases, s.skipped_cases) == (7, 1, 0) and s.pass_rate == pytest.approx(7 / 8)
    assert gate_passed(result, 0.8)


def _result(statuses: list[str]) -> EvaluationResult:
    make = {
        "passed": lambda: MetricResult.scored("M", 0.9, 0.5, "r", {}),
        "failed": lambda: MetricResult.scored("M", 0.1, 0.5, "r", {}),
        "errored": lambda: MetricResult.errored("M", 0.5, "down"),
        "skipped": lambda: MetricResult.skipped("M", 0.5, "no key"),
    }
    cases = [TestCaseResult.from_metrics(str(i), None, "o", [make[s]()]) for i, s in enumerate(statuses)]
    return EvaluationResult(test_results=cases, summary=summarize(cases, {"M": 0.5}))


@pytest.mark.parametrize(
    ("statuses", "allow_errors", "rate", "passes_at_0_75"),
    [
        (["passed", "passed", "passed", "failed"], False, 0.75, True),
        (["passed", "passed", "passed", "errored"], False, 0.75, True),
        (["passed", "passed", "errored", "errored"], False, 0.5, False),
        (["passed", "passed", "errored", "errored"], True, 1.0, True),
        (["passed", "passed", "passed", "failed", "skipped", "skipped"], False, 0.75, True),
        (["skipped", "skipped"], False, None, False),  # nothing evaluated (a fork without credentials): never a pass
        (["errored"], True, None, False),  # errors allowed beside scored cases, not in place of them
        (["errored", "skipped"], True, None, False),
        ([], False, None, False),  # an empty run fails
    ],
)
def test_gate_counts_evaluated_cases(
    statuses: list[str], allow_errors: bool, rate: float | None, passes_at_0_75: bool
) -> None:
    result = _result(statuses)
    assert gate_pass_rate(result, allow_errors) == (None if rate is None else pytest.approx(rate))
    assert gate_passed(result, 0.75, allow_errors) is passes_at_0_75


def test_allow_errors_is_a_suite_option(tmp_path: Path) -> None:
    plan = plan_run(_suite(tmp_path, "  - metric: LengthCheckMetric\n", "min_pass_rate: 0.5, allow_errors: true"))
    assert plan.suite.suite.gate.allow_errors is True
    with pytest.raises(ConfigError, match="allow_errors"):
        plan_run(_suite(tmp_path, "  - metric: LengthCheckMetric\n", "allow_errors: sometimes"))


@pytest.mark.parametrize(("allow_errors", "passed"), [(False, False), (True, True)])
def test_errored_cases_are_reported_apart_and_fail_the_gate_unless_allowed(
    tmp_path: Path, allow_errors: bool, passed: bool
) -> None:
    """A run whose provider kept failing for 2 of 8 cases: results.json counts them as errored (with the
    reason), the run still writes every report, and the gate (min 0.8) counts them as failures unless
    ``gate.allow_errors``: 6/8 = 0.75 < 0.8, 6/6 = 1.0."""
    import time

    from evaltasks.reports.outcome import finish_run

    gate = f"min_pass_rate: 0.8, allow_errors: {str(allow_errors).lower()}"
    plan = plan_run(_suite(tmp_path, "  - metric: LengthCheckMetric\n    name: M\n    threshold: 0.5\n", gate))
    result = _result(["passed"] * 6 + ["errored"] * 2)
    outcome = finish_run(plan, result, tmp_path / "out", time.time())
    data = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert data["summary"]["errored_cases"] == 2 and data["summary"]["passed_cases"] == 6
    assert [c["metrics"][0]["error"] for c in data["cases"] if c["status"] == "errored"] == ["down", "down"]
    assert data["passed"] is passed and outcome.passed is passed
    assert data["gate"] == {
        "min_pass_rate": 0.8,
        "allow_errors": allow_errors,
        "pass_rate": pytest.approx(1.0 if allow_errors else 0.75),
        "fail_on": "min_pass_rate",
        "alpha": 0.05,
        "min_effect": 0.01,
        "verdict": None,
        "message": None if passed else "gate failed: pass rate 75.00% below 80.00%",
    }
    assert (tmp_path / "out" / "junit.xml").exists() and (tmp_path / "out" / "summary.md").exists()


def test_nothing_paired_is_inconclusive_not_no_change() -> None:
    """A baseline with no case id in common: no test ran, so the verdict is ``inconclusive`` (metrics too), not
    "no significant change"."""
    base = [_case(f"old{i}", {"M": 0.9}) for i in range(20)]
    cur = [_case(f"new{i}", {"M": 0.1}) for i in range(20)]
    comparison = compare_results(_doc(base), summarize(cur, {"M": 0.5}), cur)
    assert comparison.paired_cases == 0 and comparison.pass_rate_test is None
    assert comparison.verdict == "inconclusive" and not comparison.regressed
    [metric] = comparison.metrics
    assert (metric.pass_rate_test, metric.score_test, metric.verdict) == (None, None, "inconclusive")


def test_allow_errors_leaves_errored_pairs_out_of_the_pass_rate_tests() -> None:
    """10 cases that passed now error: with allow_errors they are not "worse" (the gate leaves them out too);
    without, they are 10 discordant pairs (exact McNemar p = 2·0.5**10)."""
    base = [_case(f"c{i}", {"M": 0.9}) for i in range(30)]
    cur = [_case(f"c{i}", {"M": None if i < 10 else 0.9}) for i in range(30)]
    counted = compare_results(_doc(base), summarize(cur, {"M": 0.5}), cur)
    assert counted.pass_rate_test.worse == 10 and counted.pass_rate_test.p_value == pytest.approx(2 * 0.5**10)
    assert counted.verdict == "regressed"
    allowed = compare_results(_doc(base), summarize(cur, {"M": 0.5}), cur, allow_errors=True)
    for test in (allowed.pass_rate_test, allowed.metrics[0].pass_rate_test):
        assert (test.paired_cases, test.worse, test.better, test.p_value) == (20, 0, 0, 1.0)
    assert allowed.paired_cases == 30 and allowed.verdict == "inconclusive"  # 20 pairs detect 6/20 at best
    assert [c.case_id for c in allowed.changes if c.kind == "worse"] == [f"c{i}" for i in range(10)]


ECHO_METRIC = """\
from evaltasks import BaseMetric, MetricResult


class EchoScore(BaseMetric):
    def __init__(self, threshold: float = 0.5, *, name=None):
        super().__init__(threshold, name=name)

    def score_batch(self, cases, vectors=None):
        return [MetricResult.scored(self.name, float(c.actual_output), self.threshold, "r", {}) for c in cases]
"""


def _echo_run(
    tmp_path: Path, name: str, outputs: dict[str, str], gate: str, api_url: str, *args: str
) -> tuple[int, dict]:
    """``evaltasks run`` of a user metric that scores float(output) (``nan``: errored) on ``outputs`` (id ->
    output); the exit code and results.json."""
    (tmp_path / "echo_metrics.py").write_text(ECHO_METRIC, encoding="utf-8")
    (tmp_path / f"{name}.jsonl").write_text(
        "".join(json.dumps({"id": k, "actual_output": v}) + "\n" for k, v in outputs.items()), encoding="utf-8"
    )
    (tmp_path / f"{name}.yaml").write_text(
        f"name: {name}\ndataset: {{path: {name}.jsonl}}\n"
        f"metrics:\n  - {{metric: 'echo_metrics:EchoScore'}}\ngate: {{{gate}}}\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k != "EVALTASKS_INDEX_DIR"}
    env.update(
        PREFECT_API_URL=api_url, PREFECT_HOME=str(tmp_path / "prefect-home"), HF_HUB_OFFLINE="1", DO_NOT_TRACK="1"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evaltasks",
            "run",
            f"{name}.yaml",
            "--output-dir",
            name,
            "--quiet",
            "--no-cache",
            *args,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    return proc.returncode, json.loads((tmp_path / name / "results.json").read_text(encoding="utf-8"))


def test_allow_errors_and_a_disjoint_baseline_through_evaltasks_run(tmp_path: Path, prefect_api_url: str) -> None:
    """Real runs: (1) 30 of 100 cases that passed now error; with ``allow_errors`` the gate's pass rate is 100 %
    and ``fail_on: either`` holds (it used to fail "regressed 100 % → 70 %"); (2) a baseline whose ids are all
    different: verdict inconclusive, and a warning says nothing was compared."""
    code, _ = _echo_run(tmp_path, "base", {f"c{i}": "1.0" for i in range(100)}, "min_pass_rate: 0.5", prefect_api_url)
    assert code == 0
    baseline = str(tmp_path / "base" / "results.json")
    outputs = {f"c{i}": "nan" if i < 30 else "1.0" for i in range(100)}
    code, data = _echo_run(
        tmp_path,
        "cur",
        outputs,
        "min_pass_rate: 0.9, allow_errors: true, fail_on: either",
        prefect_api_url,
        "--baseline",
        baseline,
    )
    assert data["summary"]["errored_cases"] == 30 and data["gate"]["pass_rate"] == 1.0
    test = data["comparison"]["pass_rate_test"]
    assert (test["paired_cases"], test["worse"], test["better"]) == (70, 0, 0)
    assert code == 0 and data["passed"] is True and data["gate"]["verdict"] == "inconclusive"  # 6/70 > 0.01
    code, data = _echo_run(
        tmp_path, "strict", outputs, "min_pass_rate: 0.5, fail_on: either", prefect_api_url, "--baseline", baseline
    )
    assert code == 1 and data["gate"]["verdict"] == "regressed"  # errors count as not passed without allow_errors
    assert data["comparison"]["pass_rate_test"]["worse"] == 30
    code, data = _echo_run(
        tmp_path,
        "other",
        {f"d{i}": "1.0" for i in range(40)},
        "min_pass_rate: 0.5",
        prefect_api_url,
        "--baseline",
        baseline,
    )
    assert code == 0 and data["gate"]["verdict"] == "inconclusive" and data["comparison"]["paired_cases"] == 0
    assert "no case of the run is in the baseline (0 of 40 ids in common): nothing was compared" in data["warnings"]


def test_a_metric_in_one_run_only_is_a_warning(tmp_path: Path) -> None:
    """A renamed metric reads as one removed and one new: neither is compared, and the run says so."""
    import time

    from evaltasks.reports.outcome import finish_run

    plan = plan_run(_suite(tmp_path, "  - metric: LengthCheckMetric\n    name: M\n    threshold: 0.5\n"))
    base = _result(["passed"] * 4)
    baseline = tmp_path / "base" / "results.json"
    finish_run(plan, base, tmp_path / "base", time.time())
    data = json.loads(baseline.read_text(encoding="utf-8"))
    for case in data["cases"]:
        case["metrics"][0]["name"] = "Old"  # the baseline knew the metric by another name
    data["summary"]["metrics"] = {"Old": data["summary"]["metrics"]["M"]}
    baseline.write_text(json.dumps(data), encoding="utf-8")
    outcome = finish_run(plan, _result(["passed"] * 4), tmp_path / "out", time.time(), baseline=baseline)
    warnings = outcome.header.warnings
    assert "metric M is in this run only, not the baseline (renamed or removed?): it was not compared" in warnings
    assert "metric Old is in the baseline only (renamed or removed?): it was not compared" in warnings


def test_a_run_whose_every_case_errored_evaluated_nothing_and_says_so() -> None:
    """docs/suite.md#suite-file: a metric that raises on every case must not pass, even with ``allow_errors``; the
    gate message says nothing was evaluated and why."""
    from evaltasks.engine.lifecycle import gate_message, nothing_evaluated
    from evaltasks.inputs.suite import Gate

    errored = _result(["errored", "errored"])
    assert (
        nothing_evaluated(errored)
        == "nothing was evaluated: all 2 cases errored (metrics errored: M; the reasons say why)"
    )
    assert gate_message(errored, Gate(min_pass_rate=0.5, allow_errors=True), None) == (
        "gate failed: nothing was evaluated: all 2 cases errored (metrics errored: M; the reasons say why)"
    )
    mixed = _result(["errored", "skipped"])
    assert nothing_evaluated(mixed) == (
        "nothing was evaluated: all 2 cases errored (1) or were skipped (1) (metrics errored: M; the reasons say why)"
    )
    assert nothing_evaluated(_result(["errored", "failed"])) is None
