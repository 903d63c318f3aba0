"""A conversation suite through ``evaltasks run`` and the real Prefect engine (docs/conversations.md#suites): the same
batching, score-batch task cache, statistics, baseline comparison and gate as single-turn cases, with the
conversation metric of ``tests/conversation_metric.py`` (a user's metric named in the suite).

Expected scores are counted by hand: TurnRecallMetric is the share of turns whose answer contains the turn's
expected output.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest

from tests.cli_forkserver import run_cli
from tests.process_env import REPO_ROOT, subprocess_env

pytestmark = pytest.mark.slow  # `evaltasks run` subprocesses

CONVERSATIONS = 40
CHANGED = range(0, 40, 2)  # 20 conversations whose first answer stops recalling its expected output


def _rows(changed: bool) -> list[dict]:
    rows = []
    for i in range(CONVERSATIONS):
        first = "I do not know." if changed and i in CHANGED else f"Your order {i} has shipped."
        rows.append(
            {
                "id": f"c{i}",
                "chatbot_role": "support agent",
                "turns": [
                    {"q": f"Where is order {i}?", "a": first, "gold": "shipped"},
                    {"q": "When will it arrive?", "a": "Tomorrow before noon.", "gold": "tomorrow"},
                    {"q": "Thanks", "a": "You are welcome!"},
                ],
            }
        )
    return rows


def _run(tmp_path: Path, api_url: str, name: str, *args: str, changed: bool = False) -> subprocess.CompletedProcess:
    (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in _rows(changed)), encoding="utf-8")
    (tmp_path / f"{name}.yaml").write_text(
        f"name: support-chats\ndataset:\n  path: {name}.jsonl\n"
        "  fields: {input: q, actual_output: a, expected_output: gold}\n"
        "metrics:\n  - {metric: 'tests.conversation_metric:TurnRecallMetric', threshold: 0.9}\n"
        "gate: {min_pass_rate: 0.9, fail_on: either}\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path / "prefect-home", api_url)  # one PREFECT_HOME: the runs share the task cache
    env.pop("EVALTASKS_INDEX_DIR", None)
    env.update(PYTHONPATH=str(REPO_ROOT), CONVERSATION_METRIC_CALLS=str(tmp_path / "calls.txt"), COLUMNS="100")
    return run_cli("run", f"{name}.yaml", "--output-dir", name, *args, cwd=tmp_path, env=env)


def _scored(tmp_path: Path) -> int:
    calls = tmp_path / "calls.txt"
    return sum(map(int, calls.read_text().split())) if calls.exists() else 0


def test_a_conversation_suite_runs_caches_compares_and_gates(tmp_path: Path, prefect_api_url: str) -> None:
    base = _run(tmp_path, prefect_api_url, "base")
    assert base.returncode == 0, base.stdout + base.stderr
    results = json.loads((tmp_path / "base" / "results.json").read_text(encoding="utf-8"))
    schema = json.loads((REPO_ROOT / "evaltasks" / "schema" / "results.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(results)
    assert results["summary"]["cases"] == CONVERSATIONS and results["summary"]["pass_rate"] == 1.0
    first = results["cases"][0]
    assert first["id"] == "c0" and first["chatbot_role"] == "support agent"
    assert [t["input"] for t in first["turns"]] == ["Where is order 0?", "When will it arrive?", "Thanks"]
    assert (first["input"], first["actual_output"]) == ("Thanks", "You are welcome!")
    assert _scored(tmp_path) == CONVERSATIONS

    # the same conversations in a new process: every score-batch result comes from Prefect's task cache
    again = _run(tmp_path, prefect_api_url, "again")
    assert again.returncode == 0, again.stdout + again.stderr
    assert _scored(tmp_path) == CONVERSATIONS

    # 20 conversations change an early turn only (the last turn, input and actual_output, is the same): they are
    # scored again, 2 of 3 turns recalled, and the comparison with the baseline finds the regression
    current = _run(
        tmp_path, prefect_api_url, "current", "--baseline", str(tmp_path / "base" / "results.json"), changed=True
    )
    assert current.returncode == 1, current.stdout + current.stderr
    assert "Traceback" not in current.stderr
    assert _scored(tmp_path) == 2 * CONVERSATIONS  # the batch holding the changed conversations was scored again
    doc = json.loads((tmp_path / "current" / "results.json").read_text(encoding="utf-8"))
    scores = {case["id"]: case["metrics"][0]["score"] for case in doc["cases"]}
    assert scores == {f"c{i}": (0.5 if i in CHANGED else 1.0) for i in range(CONVERSATIONS)}
    assert doc["summary"]["pass_rate"] == 0.5 and doc["passed"] is False
    comparison = doc["comparison"]
    assert comparison["verdict"] == "regressed"
    assert sorted(comparison["newly_failing"]) == sorted(f"c{i}" for i in CHANGED)
    test = comparison["pass_rate_test"]
    assert (test["worse"], test["better"], test["paired_cases"]) == (20, 0, 40)
    assert test["p_value"] == pytest.approx(2 * 0.5**20)  # exact McNemar: 20 discordant pairs, all worse
    # the turns are readable in summary.md's changed cases and worst cases, and in the terminal's list of cases
    summary = (tmp_path / "current" / "summary.md").read_text(encoding="utf-8")
    changed = (
        "- 🔻 **newly failing: c0 \\(3 turns\\)** · TurnRecallMetric 1.0000 (passed) → 0.5000 (failed), Δ -0.5000\n"
    )
    assert changed in summary, summary
    assert "  - turn 1: user: Where is order 0? → assistant: I do not know\\. (expected: shipped)" in summary
    assert "last answer before" not in summary  # the last turn did not change
    assert "  c0 (3 turns) (newly failing) — TurnRecallMetric 1.0000 → 0.5000\n" in current.stdout
    assert "      turn 1: user: Where is order 0? → assistant: I do not know.\n" in current.stdout


def test_a_mismatched_metric_exits_2_naming_it(tmp_path: Path, prefect_api_url: str) -> None:
    (tmp_path / "chats.jsonl").write_text(json.dumps(_rows(False)[0]) + "\n", encoding="utf-8")
    (tmp_path / "s.yaml").write_text(
        "name: s\ndataset: {path: chats.jsonl, fields: {input: q, actual_output: a}}\n"
        "metrics:\n  - {metric: LengthCheckMetric, max_length: 50}\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path / "prefect-home", prefect_api_url)
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])))  # no empty entry
    proc = run_cli("run", "s.yaml", "--output-dir", "out", cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert (
        "metrics[0]: field 'metric' LengthCheckMetric scores single-turn cases only, but line 1 is a conversation"
        in proc.stdout + proc.stderr
    )


def test_the_flows_summary_artifact_shows_the_turns(tmp_path: Path, prefect_harness: None) -> None:
    """The evaluate-suite flow run in this process: its Prefect markdown artifact (the summary) lists a failing
    conversation's turns, and its returned outcome counts conversations as cases."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    from evaltasks.flows.evaluate_suite import evaluate_suite

    rows = _rows(changed=True)[:4]  # c0 and c2 miss their first turn
    (tmp_path / "chats.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: chats-in-process\ndataset:\n  path: chats.jsonl\n"
        "  fields: {input: q, actual_output: a, expected_output: gold}\n"
        "metrics:\n  - {metric: 'tests.conversation_metric:TurnRecallMetric', threshold: 0.9}\n"
        "gate: {min_pass_rate: 0.0}\n",
        encoding="utf-8",
    )
    state = evaluate_suite(
        suite_path=str(suite), output_dir=str(tmp_path / "out"), index_dir=str(tmp_path / "index"), return_state=True
    )
    assert state.is_completed(), state
    outcome, flow_run_id = state.result(), state.state_details.flow_run_id
    assert outcome["summary"]["cases"] == 4 and outcome["summary"]["failed_cases"] == 2

    async def read() -> list:
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    key=ArtifactFilterKey(any_=["chats-in-process-summary"]),
                    flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]),
                )
            )

    [artifact] = asyncio.run(read())
    assert artifact.type == "markdown"
    assert "  - turn 1: user: Where is order 2? → assistant: I do not know\\. (expected: shipped)" in artifact.data
