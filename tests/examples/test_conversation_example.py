"""``examples/conversation/``: its suite run by ``evaltasks run`` with the seven judged conversation metrics, the
judge being the loopback chat server (tests/chat_server.py, through the real OpenAI SDK) answering what
``examples/conversation/judge_answers.json`` says per metric and conversation.

Each expected score is computed here by hand from those answers with the weights docs/metrics/conversation.md
states (fully 1.0, mostly 0.9, partial 0.7, minor 0.3, none 0.0; repetition inverted; uncertainty handling's
own labels; goal achievement minus 0.1 per negative signal; verdict lists averaged, as score_agg is at
temperature 0.5 with no ``none`` among several verdicts). The README's table of scores is checked against the run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chat_server import ChatRequest, ChatServer
from tests.cli_forkserver import run_cli
from tests.process_env import REPO_ROOT, subprocess_env

pytestmark = pytest.mark.slow  # an `evaltasks run` subprocess

EXAMPLE = REPO_ROOT / "examples" / "conversation"
KEY = "sk-conversation-example"
JUDGED = json.loads((EXAMPLE / "judge_answers.json").read_text(encoding="utf-8"))

# the first words of each metric's built-in system prompt
PROMPTS = {
    "Judge how well an assistant stays in its assigned role": "RoleAdherenceMetric",
    "Judge how well an assistant remembers": "KnowledgeRetentionMetric",
    "Grade the conversational flow": "ConversationalFlowRateMetric",
    "Judge whether the user of a dialogue got what they wanted": "GoalAchievementRateMetric",
    "Find repetitive patterns": "RepetitivePatternDetectionMetric",
    "Judge how an assistant handled uncertainty": "UncertaintyHandlingMetric",
    "Judge whether an assistant helped a user complete their task": "TaskSuccessRateMetric",
}
WEIGHTS = {"fully": 1.0, "mostly": 0.9, "partial": 0.7, "minor": 0.3, "none": 0.0}
REPETITION = {"none": 1.0, "minor": 0.9, "partial": 0.7, "mostly": 0.3, "fully": 0.0}
HANDLING = {
    "hallucination": 0.0,
    "stall": 0.4,
    "mixed": 0.6,
    "honest_fallback": 1.0,
    "alternative_proposed": 1.0,
    "not_applicable": 1.0,
}


def _respond(request: ChatRequest) -> str:
    metric = next(name for start, name in PROMPTS.items() if request.system.startswith(start))
    case = next(case for case, marker in JUDGED["markers"].items() if marker in request.user)
    return json.dumps(JUDGED["answers"][metric][case])


def _by_hand(metric: str, answer: dict[str, Any]) -> float:
    if metric in ("RoleAdherenceMetric", "KnowledgeRetentionMetric", "TaskSuccessRateMetric"):
        weights = [WEIGHTS[v["verdict"]] for v in answer["verdicts"]]
        assert 0.0 not in weights or len(weights) == 1  # the mean is score_agg's value only without a none
        return round(sum(weights) / len(weights), 4)
    if metric == "GoalAchievementRateMetric":
        return round(max(0.0, WEIGHTS[answer["verdict"]] - 0.1 * len(answer["negative_signals"])), 4)
    table = {"RepetitivePatternDetectionMetric": REPETITION, "UncertaintyHandlingMetric": HANDLING}.get(metric, WEIGHTS)
    return table[answer["verdict"]]


@pytest.fixture()
def server() -> Iterator[ChatServer]:
    with ChatServer(api_key=KEY, responder=_respond) as running:
        yield running


def test_the_example_runs_each_conversation_through_the_seven_metrics(
    tmp_path: Path, server: ChatServer, prefect_api_url: str
) -> None:
    env = subprocess_env(tmp_path / "prefect-home", prefect_api_url)
    env.pop("EVALTASKS_INDEX_DIR", None)
    env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY, COLUMNS="100")
    proc = run_cli("run", str(EXAMPLE / "suite.yaml"), "--output-dir", "out", cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # 1 of 4 conversations passes: the gate (50 %) fails
    assert "Traceback" not in proc.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    rows = [json.loads(line) for line in (EXAMPLE / "chats.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [case["id"] for case in results["cases"]] == [row["id"] for row in rows]
    scores = {(case["id"], m["name"]): m["score"] for case in results["cases"] for m in case["metrics"]}
    expected = {
        (case, metric): _by_hand(metric, answer)
        for metric, per_case in JUDGED["answers"].items()
        for case, answer in per_case.items()
    }
    assert scores == pytest.approx(expected, abs=1e-9)
    assert [case["status"] for case in results["cases"]] == ["passed", "failed", "failed", "failed"]
    assert results["summary"]["pass_rate"] == 0.25
    # one request per conversation and metric; each case carries its turns and role
    assert len(server.requests) == len(rows) * len(PROMPTS)
    for case, row in zip(results["cases"], rows, strict=True):
        assert [t["input"] for t in case["turns"]] == [t["input"] for t in row["turns"]]
        assert case["chatbot_role"] == row["chatbot_role"]
    # the terminal names the failing conversations with their last turns
    assert "  stuck (3 turns)\n" in proc.stdout
    assert "turn 3: user: Hello?? → assistant: I am checking that for you, please wait." in proc.stdout
    _check_readme(scores)


def _check_readme(scores: dict[tuple[str, str], float]) -> None:
    """The README's table (a row per conversation, a column per metric, in the suite's order) shows the run's
    scores to two decimals."""
    text = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    metrics = list(PROMPTS.values())
    shown = {}
    for line in text.splitlines():
        match = re.match(r"^\| `([\w-]+)` \|(.*)\|$", line)
        if match:
            cells = [cell.strip().rstrip(" ✗") for cell in match.group(2).split("|")]
            shown[match.group(1)] = [float(cell) for cell in cells[: len(metrics)]]
    assert set(shown) == {case for case, _ in scores}
    for case, values in shown.items():
        assert values == [round(scores[(case, metric)], 2) for metric in metrics], case
