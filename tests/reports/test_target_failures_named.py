"""Where a run with targets tells its reader which target made a failing output, and that a case errored because
its target failed (not its metric): the terminal's failing-case list, summary.md's worst cases and the gate's
"nothing was evaluated" line. Real runs of python targets through ``evaluate_sync``."""

from __future__ import annotations

from pathlib import Path

from evaltasks import EvalTestCase, ExactMatchMetric, evaluate_sync
from evaltasks.engine.outcome import nothing_evaluated
from evaltasks.reports.console import notable_cases
from evaltasks.reports.json_report import write_results_json
from evaltasks.reports.markdown import render_summary_markdown
from evaltasks.targets import PythonTarget

CASES = [EvalTestCase(actual_output="", input=f"q{i}", expected_output="yes", name=f"c{i}") for i in range(3)]


def right(case: EvalTestCase) -> str:
    return "yes"


def wrong_on_q1(case: EvalTestCase) -> str:
    return "no" if case.input == "q1" else "yes"


def down(case: EvalTestCase) -> str:
    raise ValueError("the app is down")


def _listed(tmp_path: Path, result: object) -> list[tuple[str, list[str]]]:
    path = tmp_path / "results.json"
    header = {"comparison": None, "targets": [t.model_dump(mode="json") for t in result.targets]}  # type: ignore[attr-defined]
    write_results_json(path, header, result.summary, result.test_results)  # type: ignore[attr-defined]
    listed = notable_cases(path, result.summary)  # type: ignore[attr-defined]
    assert listed is not None
    return listed.rows


def test_side_by_side_failing_cases_are_named_with_their_target(tmp_path: Path) -> None:
    result = evaluate_sync(
        CASES,
        [ExactMatchMetric()],
        index_dir=tmp_path / "index",
        target=[PythonTarget(right, name="current"), PythonTarget(wrong_on_q1, name="candidate")],
    )
    assert _listed(tmp_path, result) == [("candidate: c1", ["ExactMatchMetric 0.0000"])]


def test_a_failed_generation_is_named_as_such_in_the_list_the_summary_and_the_gate(tmp_path: Path) -> None:
    result = evaluate_sync(
        CASES[:2], [ExactMatchMetric()], index_dir=tmp_path / "index", target=PythonTarget(down, name="bot")
    )
    rows = _listed(tmp_path, result)
    assert [label for label, _ in rows] == ["c0", "c1"]  # one target: no prefix
    [reason] = rows[0][1]
    assert reason.startswith("generation failed: the python target bot") and "ValueError: the app is down" in reason
    assert nothing_evaluated(result) == (
        "nothing was evaluated: all 2 cases errored (generation failed: target bot on 2 cases; the reasons say why)"
    )


def test_summary_worst_cases_name_the_target_that_made_the_output(tmp_path: Path) -> None:
    result = evaluate_sync(
        CASES, [ExactMatchMetric()], index_dir=tmp_path / "index", target=PythonTarget(wrong_on_q1, name="bot")
    )
    text = render_summary_markdown("s", result.summary, result.test_results, passed=False, min_pass_rate=1.0)
    [line] = [line for line in text.splitlines() if line.startswith("- **c1**")]
    assert line.startswith("- **c1** · target bot · ExactMatchMetric")


def test_the_target_line_names_the_cases_generated_anew_beside_stored_ones(tmp_path: Path) -> None:
    """A rerun after an edit that changes what two of five cases send: the store serves three, the target answers
    two anew, and the terminal's target line names those two (the first run, all generated, names none)."""
    from evaltasks.cli.run import target_lines
    from evaltasks.engine.outcome import RunReport

    def answer(case: EvalTestCase) -> str:
        return "yes"

    five = [EvalTestCase(actual_output="", input=f"q{i}", expected_output="yes", name=f"c{i}") for i in range(5)]
    first = evaluate_sync(five, [ExactMatchMetric()], index_dir=tmp_path / "i", target=PythonTarget(answer, name="b"))
    assert first.targets[0].generated_cases == []
    edited = [c.model_copy(update={"input": c.input + "?"}) if c.name in ("c1", "c3") else c for c in five]
    rerun = evaluate_sync(edited, [ExactMatchMetric()], index_dir=tmp_path / "i", target=PythonTarget(answer, name="b"))
    run = rerun.targets[0]
    assert (run.requests, run.cached, run.generated_cases) == (2, 3, ["c1", "c3"])
    [line] = target_lines(RunReport.model_construct(targets=rerun.targets))
    assert line.endswith("; generated anew: c1, c3") and "2 requests, 3 from the output store" in line
