"""What a reader sees of summary.md, the job summary and the PR comment (docs/reports.md#what-each-surface-shows).

The reports are built from real runs (evaltasks' own engine with deterministic metrics, results.json written and
read back as a baseline), rendered with cmark-gfm (GitHub's own fork of cmark, GFM extensions: table, autolink,
strikethrough, tagfilter), the text a reader sees searched with linkify-it (Prefect's UI autolinks bare URLs in
it, escapes resolved), and the HTML parsed (stdlib html.parser) to assert what a reader sees: the verdict first,
the cases that changed before the metric table (newly failing first), a metric table that fits GitHub's ~830 px column under
the width model below, nothing live from model text, the rest folded in ``<details>``, a Mermaid chart.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from html.parser import HTMLParser
from pathlib import Path

import pytest

from evaltasks import EvalTestCase
from evaltasks.engine.baseline import load_baseline
from evaltasks.engine.compare import compare_results
from evaltasks.engine.evaluate import evaluate_sync
from evaltasks.engine.lifecycle import RunReport
from evaltasks.engine.summary import summarize
from evaltasks.metrics import ContainsMetric, LengthCheckMetric
from evaltasks.reports import write_reports
from evaltasks.reports.markdown import CHANGES_OPEN, render_summary_markdown
from evaltasks.reports.verdict import case_label, verdict_line
from evaltasks.results import EvaluationResult, JudgeAccount, MetricResult, TestCaseResult

COLUMN_PX = 830
"""The width of GitHub's markdown column for a PR comment or job summary (px)."""
CELL_PADDING_PX = 13
"""GitHub's table cells: 6px 13px padding (github-markdown-css)."""
EVIL = (
    "[docs](https://evil.example) see https://evil.example/x, www.evil.example, evil.com <a href='http://x'>a</a> "
    "![i](https://evil.example/i.png) @octocat #12"
)


# --- the width model -------------------------------------------------------------------------------------------


def char_px(char: str, bold: bool = False) -> float:
    """The width of ``char`` in GitHub's body text (14 px -apple-system/Segoe UI): ~7.2 px for Latin text (7.7
    bold), 14 px for a wide (CJK) character, 20 px for an emoji, 0 for zero-width and combining characters."""
    if unicodedata.category(char) in ("Mn", "Me", "Cf", "Cc"):
        return 0.0
    if ord(char) >= 0x1F000 or unicodedata.category(char) == "So":
        return 20.0
    if unicodedata.east_asian_width(char) in ("W", "F"):
        return 14.0
    return 7.7 if bold else 7.2


def text_px(text: str, bold: bool = False) -> float:
    """The width of ``text`` on one line (no wrapping: GitHub's tables are ``width: max-content``)."""
    return sum(char_px(c, bold) for c in text)


class _Reader(HTMLParser):
    """What a reader sees of rendered HTML: top-level blocks in order (tag and text), tables as rows of cells
    (each cell its lines, split at ``<br>``, with whether it is a header cell), links, images, details."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[str, str]] = []
        self.tables: list[list[list[tuple[bool, list[str]]]]] = []
        self.links: list[str] = []
        self.images = 0
        self.code: list[tuple[str, str]] = []
        self.summaries: list[str] = []
        self._in_summary = False
        self._stack: list[str] = []
        self._text: list[str] = []
        self._cell: list[str] | None = None
        self._code_lang: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "a":
            self.links.append(a.get("href") or "")
        elif tag == "img":
            self.images += 1
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = [""]
            self.tables[-1][-1].append((tag == "th", self._cell))
        elif tag == "br" and self._cell is not None:
            self._cell.append("")
        elif tag == "summary":
            self._in_summary = True
            self.summaries.append("")
        elif tag == "pre":
            self._code_lang = a.get("lang") or ""
        elif tag == "code" and self._code_lang is not None and not self._code_lang:
            self._code_lang = (a.get("class") or "").removeprefix("language-")
        if tag in ("h1", "h2", "h3", "p", "ul", "table", "details", "pre", "blockquote") and not self._stack:
            self._text = []
        if tag in ("h1", "h2", "h3", "p", "ul", "table", "details", "pre", "blockquote", "li"):
            self._stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self._cell = None
        if tag == "summary":
            self._in_summary = False
        if tag == "pre":
            self.code.append((self._code_lang or "", "".join(self._text)))
            self._code_lang = None
        if tag in ("h1", "h2", "h3", "p", "ul", "table", "details", "pre", "blockquote", "li") and self._stack:
            self._stack.pop()
            if not self._stack or (self._stack == ["details"] and tag != "li"):
                self.blocks.append((tag, "".join(self._text).strip()))
                self._text = []

    def handle_data(self, data: str) -> None:
        self._text.append(data)
        if self._in_summary:
            self.summaries[-1] += data
        if self._cell is not None:
            self._cell[-1] += data


def read(markdown: str) -> _Reader:
    """``markdown`` rendered by cmark-gfm as GitHub does (raw HTML let through, as GitHub lets ``<details>`` and
    ``<br>`` through: anything a model wrote that survived escaping would show up here), then read."""
    import cmarkgfm
    from cmarkgfm.cmark import Options

    reader = _Reader()
    reader.feed(cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE))
    return reader


def table_px(table: list[list[tuple[bool, list[str]]]]) -> float:
    """The width of a rendered table: per column its widest cell line plus 2 × 13 px padding, plus 1 px borders."""
    columns = max(len(row) for row in table)
    widths = [0.0] * columns
    for row in table:
        for i, (header, lines) in enumerate(row):
            widths[i] = max(widths[i], *(text_px(line.strip(), header) for line in lines))
    return sum(w + 2 * CELL_PADDING_PX for w in widths) + columns + 1


def test_the_width_model_matches_the_numbers_measured_in_a_browser() -> None:
    """The model errs on the wide side, by little: the old comment's table (10 columns), measured at ~925 px in
    GitHub's stylesheet, comes out within 10 % above that."""
    old = (
        "| metric | mean score | pass rate | threshold | passed | failed | errored | skipped | Δ mean "
        "| Δ pass rate |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        "| ReferenceMatchMetric | 0.7453 | 75.00% | 0.7 | 6 | 2 | 0 | 0 | -0.0310 🔻 | -25.00 pt |\n"
    )
    assert 925 <= table_px(read(old).tables[0]) <= 1020


# --- real runs -------------------------------------------------------------------------------------------------

QUESTIONS = [f"What is the capital of country number {i}? Answer in one short sentence please." for i in range(12)]


def _run(root: Path, outputs: list[str], *, baseline: Path | None = None, questions: list[str] = QUESTIONS) -> Path:
    """Evaluate ``outputs`` (one per question, derived ids) with two deterministic metrics and write the reports
    (compared with the results.json ``baseline`` when given); return the output directory."""
    cases = [
        EvalTestCase(input=q, actual_output=o, expected_output="Paris is the capital.")
        for q, o in zip(questions, outputs)
    ]
    metrics = [
        LengthCheckMetric(max_length=8, unit="words", name="ShortAnswerLengthCheck"),
        ContainsMetric(keywords=["capital"], name="MentionsTheCapitalContains"),
    ]
    result = evaluate_sync(cases, metrics)
    comparison = None
    if baseline is not None:
        comparison = compare_results(load_baseline(baseline), result.summary, result.test_results, label="main")
    rate = result.summary.pass_rate
    write_reports(
        root,
        result,
        {"schema_version": 2, "suite": "layout-demo"},
        passed=rate >= 0.75,
        min_pass_rate=0.75,
        comparison=comparison,
    )
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A baseline where every case passes, and a current run where 4 cases newly fail (one with model text that
    tries links, images and mentions), 1 is gone and 1 is new."""
    root = tmp_path_factory.mktemp("layout")
    base = _run(root / "base", [f"The capital is city {i}." for i in range(12)])
    outputs = [f"The capital is city {i}." for i in range(12)]
    outputs[3] = "The capital is " + EVIL  # too long: fails the length check
    for i in (5, 7, 9):
        outputs[i] = f"I do not know, sorry, I really cannot say which city it is ({i})."
    questions = QUESTIONS[:11] + ["A brand new question that the baseline never asked?"]
    outputs[11] = "No idea at all"  # new, failing Contains
    current = _run(root / "current", outputs, baseline=base / "results.json", questions=questions)
    return {"base": base, "current": current}


def test_summary_leads_with_the_verdict_then_changed_cases_then_the_metric_table(runs: dict[str, Path]) -> None:
    md = (runs["current"] / "summary.md").read_text(encoding="utf-8")
    doc = json.loads((runs["current"] / "results.json").read_text(encoding="utf-8"))
    reader = read(md)
    kinds = [tag for tag, _ in reader.blocks]
    assert reader.blocks[0] == ("h1", "evaltasks: layout-demo")
    verdict = reader.blocks[1]
    assert verdict[0] == "p" and verdict[1].startswith("❌ FAILED: pass rate 58.33% (−41.67 points since the baseline)")
    assert "gate 75.00%; 4 cases newly failing" in verdict[1]
    headings = [text for tag, text in reader.blocks if tag == "h2"]
    assert headings == ["Cases that changed", "Metrics"]
    changed_at, table_at = kinds.index("ul"), kinds.index("table")
    assert kinds.index("h2") < changed_at < table_at  # the changed cases come before the metric table
    # newly failing first, each named by its question (derived ids), with its texts and scores before → after
    items = next(text for tag, text in reader.blocks[changed_at:table_at] if tag == "ul").split("\n")
    firsts = [line for line in items if line.startswith(("🔻", "🆕", "➖", "🟢"))]
    assert all(line.startswith("🔻 newly failing: What is the capital of country number") for line in firsts[:4])
    assert "→" in firsts[0] and "(passed) → " in firsts[0]
    assert len(firsts) == CHANGES_OPEN
    assert doc["comparison"]["newly_failing"] == [
        c["id"] for c in doc["cases"] if c["input"] in [QUESTIONS[i] for i in (3, 5, 7, 9)]
    ]
    # the rest of the changes, the worst cases, charts and statistics are folded
    folded = reader.summaries
    assert folded[0] == "1 more changed case" and any(f.startswith("Worst cases") for f in folded)
    # one item per case: a case that failed two metrics is listed once, both metrics in its line
    both = next(line for line in firsts if "number 5?" in line)
    assert "ShortAnswerLengthCheck 1.0000 (passed) → 0.0000 (failed)" in both
    assert "MentionsTheCapitalContains 1.0000 (passed) → 0.0000 (failed)" in both
    assert any(f.startswith("Score distributions") for f in folded)
    assert kinds.index("details") < table_at  # the folded changes belong to "Cases that changed"
    new = next(line for line in md.splitlines() if "🆕 **new:" in line)
    assert "lowest score 0.0000 (failed)" in new and "n/a" not in new  # the new case's own score


def test_every_table_fits_the_column_and_nothing_from_the_model_is_live(runs: dict[str, Path]) -> None:
    from linkify_it import LinkifyIt
    from markdown_it import MarkdownIt

    for name in ("base", "current"):
        md = (runs[name] / "summary.md").read_text(encoding="utf-8")
        reader = read(md)
        assert reader.tables and all(table_px(t) <= COLUMN_PX for t in reader.tables), [
            table_px(t) for t in reader.tables
        ]
        assert reader.links == [] and reader.images == 0
        html = MarkdownIt("gfm-like").render(md)
        assert "<a " not in html and "<img" not in html, html
        assert "@octocat" not in html and "#12" not in html
        # Prefect's UI autolinks URLs, www. and domains in the text a reader sees (escapes resolved): linkify-it
        # on that text finds none of the model's
        seen = "\n".join(text for _, text in reader.blocks)
        found = [m.text for m in LinkifyIt().match(seen) or []]
        assert not [f for f in found if "evil" in f or f.rsplit("/", 1)[-1] == "x"], found
    md = (runs["current"] / "summary.md").read_text(encoding="utf-8")
    assert "The capital is \\[docs\\]\\(https\\:\u200b//evil\\.example\\)" in md  # shown, as text


def test_the_plain_text_of_summary_md_has_no_escapes_in_evaltasks_own_words(runs: dict[str, Path]) -> None:
    md = (runs["current"] / "summary.md").read_text(encoding="utf-8")
    own = [
        line
        for line in md.splitlines()
        if line.startswith(
            (
                "❌",
                "✅",
                "Cases:",
                "Since ",
                "<details>",
                "## ",
                "Overall ",
                "Paired ",
                "Embeddings:",
                "| **all cases**",
            )
        )
    ]
    assert len(own) >= 9
    for line in own:
        assert "\\" not in line.replace("layout\\-demo", ""), line
    assert "(−41.67 points since the baseline)" in md


def test_score_distributions_are_mermaid_charts_or_text_bars(runs: dict[str, Path]) -> None:
    doc = json.loads((runs["current"] / "results.json").read_text(encoding="utf-8"))
    from evaltasks.engine.compare import Comparison
    from evaltasks.results import EvaluationSummary

    summary = EvaluationSummary.model_validate(doc["summary"])
    cases = [TestCaseResult.model_validate(c) for c in doc["cases"]]
    cases += [
        TestCaseResult.from_metrics("graded", "q", "o", [MetricResult.scored("Graded", s, 0.5, "r", {})])
        for s in (0.05, 0.42, 0.42, 0.97)
    ]
    summary = summarize(cases, {**{n: m.threshold for n, m in summary.metrics.items()}, "Graded": 0.5})
    comparison = Comparison.model_validate(doc["comparison"])
    kw = dict(passed=False, min_pass_rate=0.75, comparison=comparison)
    reader = read(render_summary_markdown("demo", summary, cases, **kw))
    [(lang, chart)] = reader.code
    chart = chart.lstrip("\n")
    assert lang == "mermaid" and chart.startswith("xychart-beta\n") and "bar [1, 0, 0, 0, 2, 0, 0, 0, 0, 1]" in chart
    text = render_summary_markdown("demo", summary, cases, charts="text", **kw)
    assert "mermaid" not in text and "0.4–0.5 " + "#" * 30 + " 2" in text
    # pass/fail metrics are counts, not a chart
    assert "**ShortAnswerLengthCheck** (12 scores, each 0 or 1)" in text


def test_a_size_limit_keeps_the_verdict_and_the_first_changed_cases(runs: dict[str, Path]) -> None:
    doc = json.loads((runs["current"] / "results.json").read_text(encoding="utf-8"))
    from evaltasks.engine.compare import Comparison
    from evaltasks.results import EvaluationSummary

    summary = EvaluationSummary.model_validate(doc["summary"])
    cases = [TestCaseResult.model_validate(c) for c in doc["cases"]]
    comparison = Comparison.model_validate(doc["comparison"])
    full = render_summary_markdown("demo", summary, cases, passed=False, min_pass_rate=0.75, comparison=comparison)
    opened = full[: full.index("<details>")]
    cut = render_summary_markdown(
        "demo", summary, cases, passed=False, min_pass_rate=0.75, comparison=comparison, max_size=len(opened) + 1500
    )
    assert len(cut) <= len(opened) + 1500
    assert cut.startswith(opened)  # the verdict and the open changed cases whole
    assert "Truncated:" in cut and "Worst cases" not in cut


# --- realistic suites: the metric table fits an ~830 px column -------------------------------------------------------

METRICS = {"ReferenceMatchMetric": 0.7, "AnswerRelevancyJudgeMetric": 0.6, "ContextualPrecisionMetric": 0.5}


def _synthetic(n: int, shift: float, seed: int) -> list[TestCaseResult]:
    import random

    rng = random.Random(seed)
    return [
        TestCaseResult.from_metrics(
            f"case-{i:04d}",
            f"question {i}",
            f"answer {i}",
            [
                MetricResult.scored(name, min(1.0, max(0.0, rng.gauss(0.72 + shift, 0.15))), t, "r", {})
                for name, t in METRICS.items()
            ],
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("baseline", [False, True])
@pytest.mark.parametrize("judges", [False, True])
def test_the_metric_table_fits_830px_for_realistic_suites(baseline: bool, judges: bool) -> None:
    base, cur = _synthetic(800, 0.0, 1), _synthetic(800, -0.03, 2)
    summary = summarize(cur, METRICS)
    if judges:
        summary.judges = {
            "AnswerRelevancyJudgeMetric": JudgeAccount(
                model="gpt-4o-mini-2024-07-18",
                requests=2400,
                reused=800,
                prompt_tokens=1_234_567,
                completion_tokens=98_765,
                cost=12.3456,
                unstable=3,
                unstable_cases=["case-0001", "case-0002", "case-0003"],
            ),
            "ContextualPrecisionMetric": JudgeAccount(
                model="gpt-4o-2024-08-06", requests=2400, prompt_tokens=1_000_000, completion_tokens=90_000, cost=30.0
            ),
        }
        summary.judge_total = JudgeAccount(
            requests=4800, reused=800, prompt_tokens=2_234_567, completion_tokens=188_765, cost=42.3456, unstable=3
        )
    comparison = None
    if baseline:
        doc = {"summary": summarize(base, METRICS).model_dump(), "cases": [c.model_dump() for c in base]}
        comparison = compare_results(doc, summary, cur, label="main")
        assert comparison.verdict == "regressed"
    md = render_summary_markdown("realistic", summary, cur, passed=False, min_pass_rate=0.8, comparison=comparison)
    reader = read(md)
    widths = [table_px(t) for t in reader.tables]
    assert widths and max(widths) <= COLUMN_PX, widths
    if baseline:  # Δ columns, and a 🔻 on every regressed change: the overall pass-rate drop included
        metric_table = next(t for t in reader.tables if t[0][0][1] == ["metric"] and len(t[0]) == 6)
        header = [cell[1][0] for cell in metric_table[0]]
        assert header == ["metric", "pass rate", "Δ pass rate", "mean", "Δ mean", "verdict"]
        overall = metric_table[1]
        assert overall[0][1] == ["all cases"] and overall[2][1][0].startswith("🔻 −") is False
        assert overall[2][1][0].startswith("🔻 -") and overall[5][1] == ["🔻 regressed"]
        for row in metric_table[2:]:
            assert row[5][1] == ["🔻 regressed"] and row[4][1][0].startswith("🔻 -")
        assert "## Regressions" not in md  # listed once: in the table


def test_the_gate_failing_pass_rate_drop_is_marked_without_tests() -> None:
    """A comparison read from a results.json of schema 1 has no tests: a failed gate's pass-rate drop still gets
    its 🔻, as does a metric that regressed."""
    from evaltasks.engine.compare import Comparison, MetricComparison

    cur = _synthetic(50, -0.1, 2)
    summary = summarize(cur, METRICS)
    comparison = Comparison(
        baseline="main",
        tolerance=0.01,
        baseline_pass_rate=0.6,
        current_pass_rate=0.4,
        pass_rate_delta=-0.2,
        regressed=True,
        regressions=["ReferenceMatchMetric: dropped"],
        metrics=[MetricComparison(name="ReferenceMatchMetric", mean_delta=-0.1, regressed=True)],
    )
    reader = read(render_summary_markdown("old", summary, cur, passed=False, min_pass_rate=0.5, comparison=comparison))
    table = reader.tables[0]
    assert table[1][2][1] == ["🔻 -20.00 pt"] and table[2][4][1] == ["🔻 -0.1000"]


# --- the contract: newly failing / passing, change texts, labels, the verdict line ----------------------------------


def test_newly_failing_and_passing_and_change_texts_come_from_a_baseline_results_json(runs: dict[str, Path]) -> None:
    doc = json.loads((runs["current"] / "results.json").read_text(encoding="utf-8"))
    comparison = doc["comparison"]
    by_input = {c["input"]: c["id"] for c in doc["cases"]}
    assert comparison["newly_failing"] == [by_input[QUESTIONS[i]] for i in (3, 5, 7, 9)]
    assert comparison["newly_passing"] == []
    worse = next(c for c in comparison["changes"] if c["case_id"] == by_input[QUESTIONS[5]])
    assert worse["input"] == QUESTIONS[5] and worse["expected_output"] == "Paris is the capital."
    assert worse["baseline_output"] == "The capital is city 5." and worse["current_output"].startswith("I do not know")
    removed = next(c for c in comparison["changes"] if c["kind"] == "removed")
    assert removed["input"] == QUESTIONS[11] and removed["baseline_output"] == "The capital is city 11."
    assert removed["baseline_status"] == "passed" and removed["baseline_score"] == 1.0
    new = next(c for c in comparison["changes"] if c["kind"] == "new")
    assert (new["current_status"], new["current_score"], new["current_output"]) == ("failed", 0.0, "No idea at all")
    # the reverse run: the same cases newly pass
    back = compare_results(
        load_baseline(runs["current"] / "results.json"), summarize(*_reload(runs["base"])), _reload(runs["base"])[0]
    )
    assert back.newly_passing == [by_input[QUESTIONS[i]] for i in (3, 5, 7, 9)] and back.newly_failing == []


def _reload(directory: Path) -> tuple[list[TestCaseResult], dict[str, float]]:
    doc = json.loads((directory / "results.json").read_text(encoding="utf-8"))
    cases = [TestCaseResult.model_validate(c) for c in doc["cases"]]
    return cases, {n: m["threshold"] for n, m in doc["summary"]["metrics"].items()}


def test_case_label_names_derived_ids_by_their_input_and_keeps_dataset_ids() -> None:
    question = "What is the boiling point of water at sea level, in degrees Celsius, please?"
    derived = hashlib.sha256(question.encode()).hexdigest()[:12]
    assert case_label(derived, question) == "What is the boiling point of water at sea level…"
    assert len(case_label(derived, question)) == 48
    assert case_label(derived + "#2", question).endswith("…#2") and len(case_label(derived + "#2", question)) == 48
    assert case_label("paris-01", question) == "paris-01"  # the dataset's id
    assert case_label("0123456789ab", question) == "0123456789ab"  # looks like a hash, but is not this input's
    output_id = hashlib.sha256(b"only an output").hexdigest()[:12]
    assert case_label(output_id, None, "only an output") == "only an output"
    assert case_label(hashlib.sha256(b"  ").hexdigest()[:12], "  ") == hashlib.sha256(b"  ").hexdigest()[:12]


def test_verdict_line_without_baseline_with_budget_stop_and_with_nothing_evaluated() -> None:
    cases = [
        TestCaseResult.from_metrics(f"c{i}", "q", "o", [MetricResult.scored("M", s, 0.5, "r", {})])
        for i, s in enumerate((0.9, 0.9, 0.1, 0.2))
    ]
    summary = summarize(cases, {"M": 0.5})
    assert (
        verdict_line(RunReport.of(summary, passed=False, min_pass_rate=0.75))
        == "FAILED: pass rate 50.00% (2 of 4 cases), gate 75.00%"
    )
    assert (
        verdict_line(RunReport.of(summary, passed=True, min_pass_rate=0.5, fail_on="either"))
        == "PASSED: pass rate 50.00% (2 of 4 cases), gate 50.00%; no baseline to compare with"
    )
    stopped = summary.model_copy(update={"budget_skipped": 3})
    assert verdict_line(RunReport.of(stopped, passed=False, min_pass_rate=0.5)).endswith(
        "gate 50.00% (the --max-cost budget ran out: 3 of 4 case × metric results were not judged)"
    )
    skipped = summarize(
        [TestCaseResult.from_metrics("s", "q", "o", [MetricResult.skipped("M", 0.5, "fork")])], {"M": 0.5}
    )
    assert (
        verdict_line(RunReport.of(skipped, passed=False, min_pass_rate=0.5))
        == "FAILED: no case was evaluated (all 1 skipped)"
    )
    empty = summarize([], {"M": 0.5})
    assert (
        verdict_line(RunReport.of(empty, passed=False, min_pass_rate=0.5))
        == "FAILED: no case was evaluated (the dataset is empty)"
    )
    md = render_summary_markdown("s", summary, cases, passed=True, min_pass_rate=0.5, fail_on="regression")
    blocks = read(md).blocks
    assert blocks[1][1].startswith("✅ PASSED: pass rate 50.00%") and blocks[2][0] == "blockquote"
    assert blocks[2][1].startswith("ℹ️ No baseline to compare with")


# --- the Action: job summary and PR comment (action/report.py run as the Action runs it) --------------------------


def test_action_job_summary_and_comment_lead_with_the_verdict_and_the_no_baseline_note(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.action.test_action import ACTION, MARKER, _case, _pr_event, _report_env, _write_results

    out = tmp_path / "results"
    _write_results(out, [_case(i, 0.9 if i % 4 else 0.2) for i in range(8)], min_pass_rate=0.9)
    env = _report_env(tmp_path, out, _pr_event(tmp_path), None, BASELINE_AUTO="true")
    proc = subprocess.run([sys.executable, str(ACTION / "report.py")], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
    comment = Path(env["COMMENT_BODY_FILE"]).read_text(encoding="utf-8")
    assert comment.startswith(MARKER + "\n")
    for text in (job, comment.split("\n", 1)[1]):
        blocks = read(text).blocks
        assert blocks[1] == ("p", "❌ FAILED: pass rate 75.00% (6 of 8 cases), gate 90.00%")
        assert blocks[2][0] == "blockquote" and "No baseline: no earlier results of this suite" in blocks[2][1]
        assert text.count("No baseline:") == 1  # said once, under the verdict (not appended at the end)
        assert all(table_px(t) <= COLUMN_PX for t in read(text).tables)


def test_action_comment_with_a_baseline_survives_the_fork_sanitiser_as_it_reads(tmp_path: Path) -> None:
    """The comment of a run with a baseline: verdict, changed cases (newly failing first, with their question and
    outputs), the metric table, then folded details; a fork's comment.md rebuilt by comment.py's sanitiser reads
    the same, its ``<details>``, ``<br>`` and nested lists kept."""
    import subprocess
    import sys

    from tests.action.test_action import ACTION, _case, _import, _pr_event, _report_env, _seen, _write_results

    base = json.loads(_write_results(tmp_path / "base", [_case(i, 0.9) for i in range(8)]).read_text())
    out = tmp_path / "results"
    _write_results(out, [_case(i, 0.9 if i % 4 else 0.2, EVIL if i == 4 else "") for i in range(8)], baseline=base)
    env = _report_env(tmp_path, out, _pr_event(tmp_path), None)
    proc = subprocess.run([sys.executable, str(ACTION / "report.py")], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    comment = Path(env["COMMENT_BODY_FILE"]).read_text(encoding="utf-8")
    reader = read(comment.split("\n", 1)[1])
    assert reader.blocks[1][1].startswith("✅ PASSED: pass rate 75.00% (−25.00 points since the baseline), gate 50.00%")
    assert [t for tag, t in reader.blocks if tag == "h2"] == ["Cases that changed", "Metrics"]
    changed = next(t for tag, t in reader.blocks if tag == "ul")
    assert changed.startswith("🔻 newly failing: case-0 · ReferenceMatchMetric 0.9000 (passed) → 0.2000 (failed)")
    assert "question: question 0" in changed and "output before: answer 0" in changed
    run = "https://github.com/example/evaltasks-demo/actions/runs/4242"
    assert reader.links == [run] and reader.images == 0  # the footer's link to the run, nothing from the model
    assert [table_px(t) <= COLUMN_PX for t in reader.tables] == [True] * len(reader.tables)
    sanitized = _import("comment").sanitize_untrusted_body(comment, "example/evaltasks-demo")
    again = read(sanitized.split("\n", 1)[1])
    assert again.summaries == reader.summaries and again.tables == reader.tables
    assert again.links == [run] and again.images == 0
    from tests.action.test_action import _github_html

    assert _seen(_github_html(sanitized)) == _seen(_github_html(comment))


# --- a newcomer's findings: no common case, markers, labels, Prefect's flavour, a limit nothing fits -----------------


def _results_doc(root: Path, cases: list[TestCaseResult], thresholds: dict[str, float]) -> dict:
    """``cases`` written as a results.json under ``root`` (through write_reports) and read back (a baseline)."""
    summary = summarize(cases, thresholds)
    write_reports(
        root,
        EvaluationResult(test_results=cases, summary=summary),
        {"schema_version": 2, "suite": "s"},
        passed=True,
        min_pass_rate=0.5,
    )
    return load_baseline(root / "results.json")


def _cases(prefix: str, scores: list[float]) -> list[TestCaseResult]:
    return [
        TestCaseResult.from_metrics(
            f"{prefix}{i}", f"question {prefix}{i}", f"answer {i}", [MetricResult.scored("M", s, 0.5, "r", {})]
        )
        for i, s in enumerate(scores)
    ]


def test_a_baseline_with_no_case_in_common_claims_no_change_and_no_regression_marker(tmp_path: Path) -> None:
    """No case id in both runs: the comparison is inconclusive, so the verdict line claims no change since the
    baseline; the "all cases" Δ carries no 🔻 (🔻 marks regressions only) and the pass rate that failed the gate
    its ❌."""
    base = _results_doc(tmp_path / "base", _cases("b", [0.9] * 4), {"M": 0.5})
    current = _cases("c", [0.9, 0.1, 0.1, 0.1])
    summary = summarize(current, {"M": 0.5})
    comparison = compare_results(base, summary, current, tolerance=0.01, label="main")
    assert comparison.paired_cases == 0 and comparison.verdict == "inconclusive"
    line = verdict_line(RunReport.of(summary, passed=False, min_pass_rate=0.5, comparison=comparison))
    assert line == "FAILED: pass rate 25.00% (1 of 4 cases), gate 50.00%; inconclusive: no case is in both runs"
    reader = read(
        render_summary_markdown("s", summary, current, passed=False, min_pass_rate=0.5, comparison=comparison)
    )
    assert reader.blocks[1][1] == "❌ " + line
    overall, metric = reader.tables[0][1], reader.tables[0][2]
    assert overall[1][1][0] == "❌ 25.00%" and overall[2][1] == ["-75.00 pt"]
    assert metric[2][1] == ["-75.00 pt"] and metric[5][1] == ["❔ inconclusive"]
    assert "🔻" not in json.dumps(reader.tables)


def test_a_failed_gate_on_regression_alone_puts_no_cross_on_the_pass_rate(runs: dict[str, Path]) -> None:
    """❌ marks the pass rate only when it is below the gate's min_pass_rate and the gate checks it (not
    ``fail_on: regression``); a pass-rate drop whose test did not regress gets no 🔻 either way."""
    doc = json.loads((runs["current"] / "results.json").read_text(encoding="utf-8"))
    from evaltasks.engine.compare import Comparison
    from evaltasks.results import EvaluationSummary

    summary = EvaluationSummary.model_validate(doc["summary"])
    cases = [TestCaseResult.model_validate(c) for c in doc["cases"]]
    comparison = Comparison.model_validate(doc["comparison"])
    kw = dict(passed=False, min_pass_rate=0.75, comparison=comparison)
    assert comparison.pass_rate_test is not None and comparison.pass_rate_test.verdict != "regressed"
    row = read(render_summary_markdown("d", summary, cases, **kw)).tables[0][1]
    assert row[1][1][0] == "❌ 58.33%" and row[2][1][0] == "-41.67 pt"
    row = read(render_summary_markdown("d", summary, cases, fail_on="regression", **kw)).tables[0][1]
    assert row[1][1][0] == "58.33%" and row[2][1][0] == "-41.67 pt"


def test_changed_and_worst_cases_label_the_reference_they_are_judged_against(runs: dict[str, Path]) -> None:
    md = (runs["current"] / "summary.md").read_text(encoding="utf-8")
    assert "  - reference: Paris is the capital\\." in md and "  - expected:" not in md  # escaped: data
    assert md.count("  - question: ") >= CHANGES_OPEN


def test_the_prefect_flavour_has_no_details_and_puts_the_rest_under_more(runs: dict[str, Path]) -> None:
    """charts="text" (Prefect's UI shows ``<details>`` open): no ``<details>``; after the metric table one
    "## More" with the more changed cases (once), worst cases, distributions and statistics under ###
    headings; GitHub's flavour up to its first ``<details>`` is the same text as Prefect's up to "More"."""
    doc = json.loads((runs["current"] / "results.json").read_text(encoding="utf-8"))
    from evaltasks.engine.compare import Comparison
    from evaltasks.results import EvaluationSummary

    summary = EvaluationSummary.model_validate(doc["summary"])
    cases = [TestCaseResult.model_validate(c) for c in doc["cases"]]
    comparison = Comparison.model_validate(doc["comparison"])
    kw = dict(passed=False, min_pass_rate=0.75, comparison=comparison)
    text = render_summary_markdown("demo", summary, cases, charts="text", **kw)
    github = render_summary_markdown("demo", summary, cases, **kw)
    reader = read(text)
    assert "<details" not in text and reader.summaries == []
    headings = [(tag, t) for tag, t in reader.blocks if tag in ("h2", "h3")]
    changed = len({c.case_id for c in comparison.changes})
    assert changed == CHANGES_OPEN + 1
    assert headings[:4] == [
        ("h2", "Cases that changed"),
        ("h2", "Metrics"),
        ("h2", "More"),
        ("h3", "1 more changed case"),
    ]
    assert [t.split(" (")[0] for tag, t in headings[4:]] == [
        "Worst cases",
        "Score distributions",
        "Statistics, counts and embeddings",
    ]
    items = sum(text.count(f"- {icon} **") for icon in ("🔻", "🆕", "➖", "🟢"))
    assert items == changed  # each changed case once
    # the open part is the same as GitHub's, the folded changed cases moved below the table
    opened = github[: github.index("<details>")]
    assert text.startswith(opened)


def test_a_limit_that_not_even_the_fixed_part_fits_keeps_the_verdict_and_a_note() -> None:
    """Hundreds of metrics under a small limit: the report is cut to the title, the verdict and a note where the
    full report is (it used to raise ValueError)."""
    names = {f"metric_{i:03d}_with_a_name_that_is_long_enough_to_matter": 0.5 for i in range(400)}
    cases = [
        TestCaseResult.from_metrics(
            f"c{i}", f"Q{i}", "London", [MetricResult.scored(n, 0.0, 0.5, "r", {}) for n in names]
        )
        for i in range(3)
    ]
    summary = summarize(cases, names)
    text = render_summary_markdown(
        "many", summary, cases, passed=False, min_pass_rate=0.5, max_size=300, truncation_note="See results.json."
    )
    assert len(text) <= 300
    assert text.startswith("# evaltasks: many\n\n❌ **FAILED**: pass rate 0.00% (0 of 3 cases), gate 50.00%\n")
    assert "Truncated: the report is too large to show here. See results.json." in text
    assert len(render_summary_markdown("many", summary, cases, passed=False, min_pass_rate=0.5, max_size=20)) <= 20
