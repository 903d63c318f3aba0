"""``examples/faq_bot/bot.py``: the retrieval bot the faq_bot example's suite runs as its ``python`` target.

Everything runs on the real all-MiniLM-L6-v2 (the bundled copy, offline). Expected similarities are computed
independently with sentence-transformers (the ``cosine`` fixture of tests/conftest.py), never through the bot's
own embedding provider. The walkthrough in examples/faq_bot/README.md names the cases a change of
``MIN_SIMILARITY`` from 0.5 to 0.6 flips; the tests check those names against the model.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from evaltasks.targets.base import TargetOutput
from evaltasks.test_case import EvalTestCase
from tests.process_env import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "faq_bot"

# The walkthrough's numbers (README.md): raising MIN_SIMILARITY from 0.5 to 0.6 turns these nine correct answers
# into the fallback, and gives the fallback (the right reply) to delete-account instead of a wrong FAQ answer.
NEWLY_FAILING = {
    "cant-log-in",
    "upgrade",
    "stop-paying",
    "money-back",
    "second-factor",
    "deleted-photos",
    "big-video",
    "linux",
    "operating-systems",
}
NEWLY_PASSING = {"delete-account"}


@pytest.fixture(scope="module")
def bot() -> ModuleType:
    """examples/faq_bot/bot.py imported under a name of its own (no ``bot`` left in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location("faq_bot_example", EXAMPLE / "bot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    """The example's dataset, one dict per line of questions.jsonl."""
    lines = (EXAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture(scope="module")
def faq(bot: ModuleType) -> list[Any]:
    return bot.load_faq()


def _raw_faq() -> list[tuple[str, str]]:
    """(question, answer) pairs read from faq.md here, independently of ``load_faq``: a ``## `` line, then the
    next non-empty line (every answer of the example is one line)."""
    lines = (EXAMPLE / "faq.md").read_text(encoding="utf-8").splitlines()
    pairs = []
    for i, line in enumerate(lines):
        if line.startswith("## "):
            answer = next(text for text in lines[i + 1 :] if text.strip())
            pairs.append((line[3:], answer))
    return pairs


def test_load_faq_reads_every_question_and_its_answer(faq: list[Any]) -> None:
    assert [(entry.question, entry.answer) for entry in faq] == _raw_faq()
    assert len(faq) == 12
    assert faq[4].question == "How do I reset my password?"
    assert faq[4].as_context() == (
        "Q: How do I reset my password?\n"
        "A: Click Forgot password on the sign-in page and follow the link we email you; the link expires after one hour."
    )


def test_load_faq_joins_answer_lines_and_names_the_line_of_a_question_without_answer(
    bot: ModuleType, tmp_path: Path
) -> None:
    good = tmp_path / "good.md"
    good.write_text("# Title\nintro text\n\n## Q one?\nfirst line\n  second line  \n\n## Q two?\nanswer two\n")
    assert [(e.question, e.answer) for e in bot.load_faq(good)] == [
        ("Q one?", "first line second line"),
        ("Q two?", "answer two"),
    ]
    bad = tmp_path / "bad.md"
    bad.write_text("## Q one?\nanswer\n\n## Q two?\n\n")
    with pytest.raises(ValueError, match=re.escape(f"{bad}:4: the question 'Q two?' has no answer")):
        bot.load_faq(bad)
    empty = tmp_path / "empty.md"
    empty.write_text("# Just a title\n")
    with pytest.raises(ValueError, match="no '## ' question found"):
        bot.load_faq(empty)


def test_answers_with_the_closest_entry_and_its_retrieval_context(bot: ModuleType, faq: list[Any], cosine) -> None:
    question = "I forgot my password, what do I do?"
    expected = cosine(question, [entry.question for entry in faq])
    order = sorted(range(len(faq)), key=lambda i: -expected[i])
    assert order[0] == 4  # "How do I reset my password?"
    reply = bot.FaqBot(faq).answer(question)
    assert reply["output"] == faq[4].answer
    assert reply["retrieval_context"] == [faq[order[0]].as_context(), faq[order[1]].as_context()]
    assert reply["metadata"]["similarity"] == pytest.approx(expected[4], abs=1e-4)
    assert reply["metadata"]["fell_back"] is False
    assert TargetOutput.model_validate(reply).retrieval_context == reply["retrieval_context"]


def test_out_of_scope_and_empty_questions_get_the_fallback(bot: ModuleType, faq: list[Any], cosine) -> None:
    question = "What's the weather in Paris tomorrow?"
    best = max(cosine(question, [entry.question for entry in faq]))
    assert best < 0.5
    faq_bot = bot.FaqBot(faq, top_k=3)
    reply = faq_bot.answer(question)
    assert reply["output"] == bot.FALLBACK
    assert len(reply["retrieval_context"]) == 3  # what it looked at is still reported
    assert reply["metadata"] == {"similarity": pytest.approx(best, abs=1e-4), "fell_back": True}
    assert faq_bot.answer("  ") == {
        "output": bot.FALLBACK,
        "retrieval_context": [],
        "metadata": {"similarity": None, "fell_back": True},
    }


def test_bad_arguments_are_refused(bot: ModuleType, faq: list[Any]) -> None:
    with pytest.raises(ValueError, match="at least one FAQ entry"):
        bot.FaqBot([])
    with pytest.raises(ValueError, match="top_k must be at least 1, got 0"):
        bot.FaqBot(faq, top_k=0)


def test_respond_is_the_target_callable(bot: ModuleType, faq: list[Any]) -> None:
    case = EvalTestCase(input="Can I get a refund?", actual_output="", vars={"id": "refund"})
    reply = bot.respond(case)
    assert reply["output"] == faq[3].answer
    assert reply["metadata"]["similarity"] == pytest.approx(1.0, abs=1e-4)  # the FAQ's own question
    assert bot.respond(case) == reply  # the bot is built once and answers the same way


def test_the_dataset_expects_a_faq_answer_or_the_fallback(bot: ModuleType, faq: list[Any], rows) -> None:
    answers = {entry.answer for entry in faq} | {bot.FALLBACK}
    assert len(rows) == 25
    assert len({row["id"] for row in rows}) == 25
    assert all(row["expected_answer"] in answers for row in rows)
    assert sum(row["expected_answer"] == bot.FALLBACK for row in rows) == 6


@pytest.mark.slow
def test_the_walkthrough_change_flips_the_cases_the_readme_names(bot: ModuleType, faq: list[Any], rows, cosine) -> None:
    """MIN_SIMILARITY 0.5 -> 0.6: a case's verdict (exact answer expected) flips when its best similarity lies in
    [0.5, 0.6); computed here from sentence-transformers, then checked against the bot at both settings."""
    questions = [entry.question for entry in faq]
    in_band = {row["id"] for row in rows if 0.5 <= max(cosine(row["question"], questions)) < 0.6}
    assert in_band == NEWLY_FAILING | NEWLY_PASSING
    before, after = bot.FaqBot(faq, min_similarity=0.5), bot.FaqBot(faq, min_similarity=0.6)
    assert bot.MIN_SIMILARITY == 0.5  # the walkthrough starts from the committed bot
    passed_before = {row["id"] for row in rows if before.answer(row["question"])["output"] == row["expected_answer"]}
    passed_after = {row["id"] for row in rows if after.answer(row["question"])["output"] == row["expected_answer"]}
    assert len(passed_before) == 23 and len(passed_after) == 15
    assert passed_before - passed_after == NEWLY_FAILING
    assert passed_after - passed_before == NEWLY_PASSING
