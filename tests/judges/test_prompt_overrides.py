"""Judge prompt overrides (docs/metrics/judge.md#prompts): a user's template is checked when the metric is made,
renders in Jinja's sandbox, and a template failing to render keeps the answers stored before it.

The judge client is the real ``openai`` SDK talking to ``tests/chat_server.py`` on 127.0.0.1, or the product's
``judge=`` hook (:class:`~evaltasks.judges.FunctionJudge`) around a recording function; nothing is mocked.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evaltasks import BiasMetric, ContextualRecallMetric
from evaltasks.errors import ConfigError
from evaltasks.inputs.suite import load_suite
from tests.chat_server import ChatServer
from tests.judge_helpers import Recorder, as_json, case, score_with, server_options

BIAS_CASE = case(input="Describe the team.", actual_output="The team shipped on time.")


RAG_CASE = case(
    input="Where is Paris?",
    actual_output="Paris is in France.",
    expected_output="Paris is in France.",
    retrieval_context=["Paris is the capital of France."],
)


# -- prompt overrides are checked when the metric is made ---------------------------------------------------------
def _template(tmp_path: Path, text: str, name: str = "score.md") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_an_undefined_variable_in_an_override_is_refused_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _template(tmp_path, "### system\nRate it. JSON only.\n### user\n{{ inptu }}: {{ actual_output }}\n")
    with pytest.raises(
        ValueError,
        match=r"undefined variable\(s\) inptu; BiasMetric's 'score' prompt has: "
        r"actual_output, input",
    ):
        BiasMetric(prompts={"score": path})
    (tmp_path / "cases.jsonl").write_text(json.dumps({"input": "q", "actual_output": "a"}) + "\n", encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        json.dumps(
            {
                "name": "s",
                "dataset": {"path": "cases.jsonl"},
                "metrics": [{"metric": "BiasMetric", "prompts": {"score": "score.md"}}],
            }
        ),
        encoding="utf-8",
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # only for this test: later ones check a missing key
    with pytest.raises(ConfigError) as caught:  # an InputError: exit 2 on the CLI
        load_suite(suite)
    [problem] = caught.value.problems
    assert problem.location == "metrics[0]" and "inptu" in problem.message


@pytest.mark.parametrize(
    ("tag", "line"),
    [
        ('{% include "x.md" %}', "include"),
        ('{% extends "x.md" %}', "extends"),
        ('{% import "x.md" as x %}', "import"),
        ('{% from "x.md" import y %}', "from"),
    ],
)
def test_loading_tags_are_refused(tmp_path: Path, tag: str, line: str) -> None:
    path = _template(tmp_path, f"### system\nRate it.\n### user\n{{{{ input }}}}\n{tag}\n")
    with pytest.raises(ValueError, match=f"line 5: the '{line}' tag is not allowed"):
        BiasMetric(prompts={"score": path})


def test_templates_render_in_the_sandbox(tmp_path: Path) -> None:
    """A template reaching Python internals errors the case; the working directory is never sent (fails when
    templates render outside Jinja's sandbox)."""
    path = _template(
        tmp_path,
        "### system\nRate it.\n### user\n{{ cycler.__init__.__globals__.os.getcwd() }} "
        "{{ input }} {{ actual_output }}\n",
    )
    recorder = Recorder(as_json({"score": 1.0, "reason": "ok"}))
    [result] = score_with(BiasMetric(prompts={"score": path}), [BIAS_CASE], recorder.judge())
    assert result.status == "errored" and "PromptError" in result.error
    assert not any(os.getcwd() in m["content"] for call in recorder.calls for m in call)


def test_a_syntax_error_names_the_files_line(tmp_path: Path) -> None:
    path = _template(tmp_path, "### system\nRate it.\n\n### user\n\n<input>\n{{ input }\n</input>\n")
    with pytest.raises(ValueError, match=r"score\.md: line 7: "):
        BiasMetric(prompts={"score": path})
    path = _template(tmp_path, "### system\n\nRate {% if %} it.\n### user\n{{ input }}\n")
    with pytest.raises(ValueError, match=r"score\.md: line 3: "):
        BiasMetric(prompts={"score": path})


def test_a_prompt_that_fails_to_render_keeps_the_answers_before_it(tmp_path: Path) -> None:
    """ContextualRecall's claims answer is fine; its verdicts override fails in the sandbox before anything is
    sent: the claims answer stays stored (fails when the asker's previous answer is taken for the rejected one)."""
    path = _template(
        tmp_path,
        "### system\nJudge the claims. JSON only.\n### user\n{{ claims }} {{ retrieval_context.__class__ }}\n",
        name="verdicts.md",
    )
    with ChatServer() as server:
        server.answers.append(as_json({"claims": ["Paris is in France."]}))
        [result] = score_with(
            ContextualRecallMetric(judge_options=server_options(server), prompts={"verdicts": path}),
            [RAG_CASE],
            store_dir=tmp_path / "s",
        )
        assert result.status == "errored" and "PromptError" in result.error and len(server.requests) == 1
    assert len(list((tmp_path / "s").glob("*/*.json"))) == 1
