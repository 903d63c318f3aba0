"""examples/faq_bot end to end: ``evaltasks run`` generates the bot's answers (its ``python`` target) on the real
all-MiniLM-L6-v2, scores them, reuses them on a rerun, and, after the README walkthrough's one-line code change,
compares the new answers with the baseline case by case.

The p-value is recomputed here with statsmodels' exact McNemar test from the paired verdicts, independently of
evaltasks' comparison; the flipped cases are those tests/examples/test_faq_bot.py derives from sentence-transformers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.example_runs import run_example_suite
from tests.examples.test_faq_bot import NEWLY_FAILING
from tests.process_env import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "faq_bot"


def _run(tmp_path: Path, folder: Path, api_url: str, out: str, *extra: str) -> tuple[int, dict, str]:
    return run_example_suite(folder / "suite.yaml", tmp_path, api_url, out, *extra)


def test_the_walkthrough_through_the_cli(tmp_path: Path, prefect_api_url: str) -> None:
    from statsmodels.stats.contingency_tables import mcnemar

    folder = tmp_path / "faq_bot"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    rows = [json.loads(line) for line in (folder / "questions.jsonl").read_text().splitlines() if line.strip()]
    questions = {row["id"]: row["question"] for row in rows}

    code, before, log = _run(tmp_path, folder, prefect_api_url, "before")
    assert code == 0, log[-3000:]
    (target,) = before["targets"]
    assert (target["name"], target["kind"], target["requests"], target["cached"]) == ("python", "python", 25, 0)
    failed = {case["id"] for case in before["cases"] if not case["success"]}
    assert failed == {"more-storage", "delete-account"}
    assert before["summary"]["passed_cases"] == 23 and before["passed"] is True
    for case in before["cases"]:
        assert case["input"] == questions[case["id"]]
        generation = case["generation"]
        assert generation["target"] == "python" and generation["cached"] is False
        assert generation["metadata"]["fell_back"] is (case["actual_output"].startswith("Sorry, I don't know."))
        assert 0.0 < generation["metadata"]["similarity"] <= 1.0

    # the same code again: every answer comes from the output store
    code, again, log = _run(tmp_path, folder, prefect_api_url, "again")
    assert code == 0, log[-3000:]
    assert (again["targets"][0]["requests"], again["targets"][0]["cached"]) == (0, 25)
    assert [c["actual_output"] for c in again["cases"]] == [c["actual_output"] for c in before["cases"]]

    # the walkthrough's one-line change
    bot = folder / "bot.py"
    text = bot.read_text(encoding="utf-8")
    assert text.count("MIN_SIMILARITY = 0.5 ") == 1
    bot.write_text(text.replace("MIN_SIMILARITY = 0.5 ", "MIN_SIMILARITY = 0.6 "), encoding="utf-8")
    code, after, log = _run(
        tmp_path, folder, prefect_api_url, "after", "--baseline", str(tmp_path / "before" / "results.json")
    )
    assert code == 1, log[-3000:]  # 15 of 25 is below the gate's 80 %
    assert after["targets"][0]["requests"] == 25  # the code changed: every case generated again
    assert after["summary"]["passed_cases"] == 15 and after["passed"] is False
    passed_before = {c["id"]: c["success"] for c in before["cases"]}
    passed_after = {c["id"]: c["success"] for c in after["cases"]}
    assert {i for i in passed_before if passed_before[i] and not passed_after[i]} == NEWLY_FAILING
    assert {i for i in passed_before if passed_after[i] and not passed_before[i]} == {"delete-account"}
    for case in after["cases"]:
        if case["id"] in NEWLY_FAILING:
            assert (
                case["actual_output"]
                == "Sorry, I don't know. Please email support@acme.example and a person will help you."
            )

    table = [[0, 0], [0, 0]]
    for i in passed_before:
        table[int(not passed_before[i])][int(not passed_after[i])] += 1
    expected_p = mcnemar(table, exact=True).pvalue
    assert expected_p == pytest.approx(22 / 1024)  # 9 against 1 discordant pairs, two-sided
    comparison = after["comparison"]
    assert comparison["verdict"] == "regressed"
    (metric,) = comparison["metrics"]
    test = metric["pass_rate_test"]
    assert (test["test"], test["worse"], test["better"]) == ("exact McNemar", 9, 1)
    assert test["p_value"] == pytest.approx(expected_p, rel=1e-9)
    assert set(comparison["newly_failing"]) == NEWLY_FAILING and comparison["newly_passing"] == ["delete-account"]
    assert "p = 0.021" in log and "9 cases newly failing, 1 newly passing" in log
    summary = (tmp_path / "after" / "summary.md").read_text(encoding="utf-8")
    assert "newly failing: linux" in summary
    assert "output after: Sorry, I don't know\\. Please email support@\u200bacme\\.example" in summary
