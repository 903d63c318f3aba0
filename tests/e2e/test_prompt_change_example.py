"""examples/prompt_change end to end: ``evaltasks run`` sends each ticket through the support prompt to a chat
model (the loopback OpenAI chat server of tests/chat_server.py, through ``OPENAI_BASE_URL``), scores the answers,
reuses them on a rerun, and after the README's one-line prompt edit asks again for exactly the tickets that render
differently, comparing them with the baseline.

The expected prompts, token counts and costs are computed here from the files and the server's documented token
rule, and the price from OpenAI's public price of gpt-4o-mini ($0.15 / $0.60 per million tokens).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.chat_server import ChatRequest, ChatServer, usage_tokens
from tests.example_runs import run_example_suite
from tests.process_env import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "prompt_change"
KEY = "sk-prompt-change-example"
OLD_HINT = "When more storage would help, mention that Plus has 200 GB for a small monthly fee."
NEW_HINT = "When more storage would help, mention that Plus has 200 GB and Pro 2 TB."
VERBOSE = " ".join(["Plus has 200 GB and Pro has 2 TB, and you can upgrade in Settings > Billing."] * 6)


def _rows() -> list[dict]:
    return [json.loads(line) for line in (EXAMPLE / "tickets.jsonl").read_text().splitlines() if line.strip()]


def _answer(request: ChatRequest) -> str:
    """The model: each ticket's reference answer, except a 90-word one to the storage question under the new hint."""
    expected = {row["question"]: row["expected"] for row in _rows()}
    if NEW_HINT in request.system and request.user == "I'm running out of space. How do I get more?":
        return VERBOSE
    return expected[request.user]


def _system(plan: str, hint: str = OLD_HINT) -> str:
    """The system message expected for a plan: the prompt file's system part with the plan filled in and the
    free-plan hint only for Free (each ``{% %}`` line leaves an empty line, as Jinja2 does without trim_blocks)."""
    text = (EXAMPLE / "prompts" / "support.md").read_text(encoding="utf-8")
    system = text.split("### system\n", 1)[1].split("### user\n", 1)[0]
    system = system.replace("{{ plan }}", plan).replace(OLD_HINT, hint)
    kept = "\n" + hint + "\n" if plan == "Free" else ""
    return system.replace('{% if plan == "Free" %}\n' + hint + "\n{% endif %}\n", kept)


def _run(tmp_path: Path, server: ChatServer, api_url: str, out: str, *extra: str) -> tuple[int, dict, str]:
    return run_example_suite(
        tmp_path / "pc" / "suite.yaml",
        tmp_path,
        api_url,
        out,
        *extra,
        env={"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY},
        drop_env=("AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY"),
    )


def test_the_prompt_change_walkthrough_against_the_loopback_chat_server(tmp_path: Path, prefect_api_url: str) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "pc")
    rows = {row["id"]: row for row in _rows()}
    free = {i for i, row in rows.items() if row["plan"] == "Free"}
    assert len(rows) == 10 and len(free) == 5

    with ChatServer(api_key=KEY, responder=_answer) as server:
        code, before, log = _run(tmp_path, server, prefect_api_url, "before")
        assert code == 0, log[-3000:]
        assert len(server.requests) == 10 and all(r.ok for r in server.requests)
        by_user = {r.body["messages"][-1]["content"]: r for r in server.requests}
        for row in rows.values():
            request = by_user[row["question"]]
            assert request.body["model"] == "gpt-4o-mini"
            assert request.body["temperature"] == 0 and request.body["max_tokens"] == 200
            assert [m["role"] for m in request.body["messages"]] == ["system", "user"]
            assert request.body["messages"][0]["content"].strip() == _system(row["plan"]).strip()
        (target,) = before["targets"]
        assert (target["kind"], target["requests"], target["cached"]) == ("chat", 10, 0)
        assert before["summary"]["passed_cases"] == 10 and before["passed"] is True
        for case in before["cases"]:
            row, generation = rows[case["id"]], case["generation"]
            assert case["actual_output"] == row["expected"]
            request = by_user[row["question"]]
            prompt_tokens = sum(usage_tokens(m["content"]) for m in request.body["messages"])
            assert (generation["input_tokens"], generation["output_tokens"]) == (
                prompt_tokens,
                usage_tokens(row["expected"]),
            )
            expected_cost = (prompt_tokens * 0.15 + usage_tokens(row["expected"]) * 0.60) / 1e6
            assert generation["cost"] == pytest.approx(expected_cost, rel=1e-9)
            assert generation["latency_ms"] > 0 and generation["cached"] is False

        # unchanged: no request at all
        server.reset()
        code, again, log = _run(tmp_path, server, prefect_api_url, "again")
        assert code == 0, log[-3000:]
        assert server.requests == []
        assert (again["targets"][0]["requests"], again["targets"][0]["cached"]) == (0, 10)

        # the README's one-line edit: only the free-plan tickets render differently
        prompt = tmp_path / "pc" / "prompts" / "support.md"
        lines = prompt.read_text(encoding="utf-8").splitlines(keepends=True)
        assert lines[17] == OLD_HINT + "\n"  # line 18, as the README says
        lines[17] = NEW_HINT + "\n"
        prompt.write_text("".join(lines), encoding="utf-8")
        code, after, log = _run(
            tmp_path, server, prefect_api_url, "after", "--baseline", str(tmp_path / "before" / "results.json")
        )
    assert code == 0, log[-3000:]  # 9 of 10 still pass the 80 % gate
    asked = {r.body["messages"][-1]["content"] for r in server.requests}
    assert asked == {rows[i]["question"] for i in free} and len(server.requests) == 5
    assert all(NEW_HINT in r.body["messages"][0]["content"] for r in server.requests)
    assert (after["targets"][0]["requests"], after["targets"][0]["cached"]) == (5, 5)
    cached = {case["id"] for case in after["cases"] if case["generation"]["cached"]}
    assert cached == set(rows) - free
    assert sorted(after["targets"][0]["generated_cases"]) == sorted(free)  # what the edit made the model answer anew
    assert again["targets"][0]["generated_cases"] == [] == before["targets"][0]["generated_cases"]  # all or none
    comparison = after["comparison"]
    assert comparison["newly_failing"] == ["more-storage"] and comparison["newly_passing"] == []
    (change,) = [c for c in comparison["changes"] if c["metric"] == "LengthCheckMetric"]
    assert change["case_id"] == "more-storage"
    assert (change["baseline_output"], change["current_output"]) == (rows["more-storage"]["expected"], VERBOSE)
    summary = (tmp_path / "after" / "summary.md").read_text(encoding="utf-8")
    assert "newly failing: more\\-storage" in summary and "output after: Plus has 200 GB" in summary
