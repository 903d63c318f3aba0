"""``evaltasks run`` as a person sees it in a terminal (docs/cli.md#cli).

Each run is a real ``python -m evaltasks.cli run`` in a pseudo-terminal (stdlib ``pty``; TERM=xterm-256color,
COLUMNS × LINES set), on a fresh PREFECT_HOME, against the session's Prefect server (``prefect_api_url``). The
suite is tiny: LengthCheck (most cases fail), ReferenceMatch on the local model (so the CLI loads it) and a
user's metric that reports a stage of its own through :mod:`evaltasks.engine.progress` and logs a Prefect warning while
the progress display is live. The raw bytes the terminal received are checked: the stages named, the warning
on a line of its own (never written into a progress line), the verdict line before the table, the failing
cases listed with where the rest are, no telemetry notice. The flow run's logs are read back from the server
through the Prefect client. Nothing here depends on timing: a run is waited for with a generous deadline.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.process_env import subprocess_env

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 900  # a hang guard: the machine may be shared and busy
CASES = 30
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-B]|\x1b[=>78]")
TELEMETRY = "Prefect collects anonymous usage data"
WARNING_LINE = re.compile(r"\d\d:\d\d:\d\d\.\d{3} \| WARNING +\| prefect\.noisy - NOISY-WARNING while scoring")

# A user's metric: every output passes; it names a stage of its own and logs a warning through Prefect's
# logger (the root logger's console handler prints it) while the terminal shows the progress display.
NOISY_MODULE = '''
import logging

from evaltasks import BaseMetric, MetricResult
from evaltasks.engine import progress as _progress


class NoisyMetric(BaseMetric):
    """1.0 for every output; reports the stage "checking N outputs for noise" and logs a warning."""

    def __init__(self, threshold: float = 0.5, *, name: str | None = None) -> None:
        super().__init__(threshold, name=name)

    def score_batch(self, cases, vectors=None):
        _progress.stage(f"checking {len(cases)} outputs for noise")  # no count: the flow's count goes on
        logging.getLogger("prefect.noisy").warning("NOISY-WARNING while scoring")
        return [MetricResult(name=self.name, score=1.0, threshold=self.threshold, success=True,
                             reason="quiet enough") for _ in cases]
'''


def _write_suite(root: Path, name: str, words: list[int]) -> Path:
    """The suite ``terminal`` in ``root``/``name``.yaml whose case i answers with ``words[i]`` words (LengthCheck
    allows 5)."""
    with open(root / f"{name}.jsonl", "w", encoding="utf-8") as handle:
        for i, count in enumerate(words):
            handle.write(
                json.dumps(
                    {
                        "input": f"Question {i}: how long is answer {i}?",
                        "actual_output": " ".join(["word"] * count),
                        "references": [f"An answer of {count} words."],
                    }
                )
                + "\n"
            )
    (root / f"{name}.yaml").write_text(
        f"name: terminal\ndataset: {{path: {name}.jsonl}}\nmetrics:\n"
        "  - {metric: LengthCheckMetric, max_length: 5, unit: words}\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, threshold: 0.0}\n"
        "  - {metric: 'noisy:NoisyMetric'}\n"
        "gate: {min_pass_rate: 0.9}\n",
        encoding="utf-8",
    )
    return root / f"{name}.yaml"


def _run_in_terminal(args: list[str], cwd: Path, env: dict[str, str], columns: int) -> tuple[int, str]:
    """Run ``python -m evaltasks.cli ARGS`` with a pseudo-terminal as its stdin, stdout and stderr (``columns`` ×
    50); returns the exit code and everything the terminal received, decoded."""
    env = {**env, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": "50", "EVALTASKS_NO_SERVER": "1"}
    leader, follower = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "evaltasks.cli", *args],
        cwd=cwd,
        env=env,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        close_fds=True,
        start_new_session=True,
    )
    os.close(follower)
    received = bytearray()
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # EIO: the terminal's last writer closed it
                    break
                if not chunk:
                    break
                received += chunk
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    return code, received.decode("utf-8", errors="replace")


def _screen_lines(raw: str) -> list[str]:
    """The lines of ``raw`` as text: escape sequences removed, each line what follows its last carriage return."""
    return [ANSI.sub("", line).split("\r")[-1].rstrip() for line in raw.replace("\r\n", "\n").split("\n")]


def _final_output(raw: str) -> list[str]:
    """The lines printed after the progress display went away: from the verdict line on."""
    lines = _screen_lines(raw)
    start = next(i for i, line in enumerate(lines) if re.match(r"(PASSED|FAILED): ", line))
    return lines[start:]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite ``terminal`` (terminal.yaml: 20 of 30 answers too long; worse.yaml: 5 more too long, the same
    case ids, its baseline the first run) and the user's metric module."""
    root = tmp_path_factory.mktemp("terminal")
    (root / "noisy.py").write_text(NOISY_MODULE, encoding="utf-8")
    words = [3 if i % 3 == 0 else 9 for i in range(CASES)]  # 10 pass, 20 fail
    _write_suite(root, "terminal", words)
    _write_suite(root, "worse", [9 if i in (0, 3, 6, 9, 12) else w for i, w in enumerate(words)])
    return root


def _env(home: Path, api_url: str) -> dict[str, str]:
    """The CLI's environment: a fresh PREFECT_HOME, the session's server, and nothing that turns telemetry off
    or marks a CI job (Prefect's client telemetry shows its notice only outside CI)."""
    env = subprocess_env(home, api_url)
    for name in [
        name
        for name in env
        if name in ("DO_NOT_TRACK", "CI", "PREFECT_LOGGING_LEVEL")
        or name.startswith(("GITHUB_", "GITLAB_", "BUILDKITE", "CIRCLECI", "TRAVIS", "JENKINS"))
    ]:
        env.pop(name)
    return env


@pytest.fixture(scope="module")
def first_run(workspace: Path, prefect_api_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str]:
    """``evaltasks run terminal.yaml`` at 160 columns (no baseline): exit code and the terminal's bytes."""
    home = tmp_path_factory.mktemp("prefect-home")
    result = _run_in_terminal(
        ["run", "terminal.yaml", "--output-dir", "out", "--index-dir", "index"],
        workspace,
        _env(home, prefect_api_url),
        columns=160,
    )
    return result


@pytest.mark.slow
def test_stages_are_named_and_log_lines_never_tear_the_bar(first_run: tuple[int, str]) -> None:
    code, raw = first_run
    assert code == 1, raw  # 10 of 30 cases pass: the gate (90 %) fails
    lines = _screen_lines(raw)
    shown = ANSI.sub("", raw)  # every frame of the display (a frame is redrawn over the last with cursor moves)
    # the stages the CLI knows, the model it loads, and one a task run reports through evaltasks.engine.progress
    # the session's server (PREFECT_API_URL): connected to, not started
    assert "connecting to Prefect" in shown and "starting Prefect" not in shown, raw
    assert "loading the model all-MiniLM-L6-v2" in shown, raw
    assert "checking 30 outputs for noise" in shown, raw
    assert "scoring 30 cases × 3 metrics" in shown and "90/90" in shown, raw  # the CLI's scoring stage, counted
    # the Prefect warning logged while the display is live: printed above it, on a line of its own
    noisy = [line for line in lines if "NOISY-WARNING" in line]
    assert noisy and all(WARNING_LINE.fullmatch(line) for line in noisy), noisy
    assert TELEMETRY not in raw and "DO_NOT_TRACK" not in raw, (
        raw
    )  # docs/prefect.md#the-temporary-server-and-prefects-settings: analytics are off


@pytest.mark.slow
def test_final_output_leads_with_the_verdict_and_names_the_failing_cases(first_run: tuple[int, str]) -> None:
    _code, raw = first_run
    out = _final_output(raw)
    assert out[0] == "FAILED: pass rate 33.33% (10 of 30 cases), gate 90.00%", out
    assert out[1].strip() == "evaltasks results", out  # the table comes next
    text = "\n".join(out)
    assert "failing cases (20 of 30, lowest score first):" in text
    listed = [line for line in out if line.startswith("  Question ")]
    assert len(listed) == 10, out  # the first 10 by readable name (the input's prefix), then where the rest are
    assert listed[0] == "  Question 1: how long is answer 1? — LengthCheckMetric 0.0000", out
    assert "  … 10 more: see summary.md / results.json" in out
    assert out.index("  … 10 more: see summary.md / results.json") < next(
        i for i, line in enumerate(out) if line.startswith("GATE FAILED")
    )
    assert all(len(line) <= 160 for line in out)
    assert not any(re.search(r"\d\d:\d\d:\d\d\.\d{3} \| INFO", line) for line in _screen_lines(raw)), raw


def test_flow_run_info_lines_reach_the_server_not_the_terminal(
    first_run: tuple[int, str], workspace: Path, prefect_api_url: str
) -> None:
    """The terminal stays at WARNING; the flow run's INFO lines are in its logs on the server."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    _code, raw = first_run
    assert "Pass rate" not in raw  # the terminal shows WARNING and above

    async def read() -> list[Any]:
        async with get_client() as client:
            runs = [
                run
                for run in await client.read_flow_runs(limit=200)  # the run's parameters, as given
                if run.parameters.get("suite_path") == "terminal.yaml" and run.parameters.get("output_dir") == "out"
            ]
            assert runs, "the run is not on the server"
            return await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[runs[0].id])))

    deadline = time.monotonic() + 120  # the logs are sent in the background, then written by the server
    while True:
        logs = asyncio.run(read())
        if any("Pass rate 33.33% (gate 90.00%): FAILED" in log.message for log in logs) or time.monotonic() > deadline:
            break
        time.sleep(1)
    messages = [(log.level, log.message) for log in logs]
    assert (20, "Pass rate 33.33% (gate 90.00%): FAILED") in messages, messages


def test_baseline_run_at_80_columns_shows_deltas_and_newly_failing_cases(
    first_run: tuple[int, str], workspace: Path, prefect_api_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Against the first run: Δ under each metric's numbers (80 columns), the 5 newly failing cases first."""
    code, raw = _run_in_terminal(
        [
            "run",
            "worse.yaml",
            "--output-dir",
            "out-worse",
            "--index-dir",
            "index",
            "--baseline",
            "out/results.json",
            "--baseline-label",
            "main",
        ],
        workspace,
        _env(tmp_path_factory.mktemp("prefect-home"), prefect_api_url),
        columns=80,
    )
    out = _final_output(raw)
    assert code == 1, raw
    assert out[0].startswith("FAILED: pass rate 16.67% (−16.67 points since the baseline)"), out
    text = "\n".join(out)
    assert "5 cases newly failing" in " ".join(line.strip() for line in out[:3]), out
    assert all(len(line) <= 80 for line in out), out
    delta = next(line for line in out if line.strip().startswith("Δ since baseline"))
    assert "+0.0000" in delta or "-" in delta, delta
    assert "since the baseline: 5 cases newly failing" in text, text
    at = out.index("since the baseline: 5 cases newly failing:")  # at 80 columns: the metrics under the name
    assert out[at + 1] == "  Question 0: how long is answer 0? (newly failing)", out
    assert re.fullmatch(
        r"      LengthCheckMetric 1\.0000 → 0\.0000; ReferenceMatchMetric 0\.\d{4} → 0\.\d{4}", out[at + 2]
    ), out
    assert sum(line.startswith("  Question ") for line in out) == 5, out
    assert TELEMETRY not in raw


def test_notable_cases_reads_only_what_it_lists(tmp_path: Path) -> None:
    """Without a baseline: errored cases first, then failing ones by lowest score (case order among equals),
    control characters of model text shown as
    ``?`` (no terminal escape reaches the terminal), the count of the rest; nothing listed when all pass."""
    from evaltasks.engine.summary import summarize
    from evaltasks.reports.console import notable_cases
    from evaltasks.reports.json_report import write_results_json
    from evaltasks.results import MetricResult, TestCaseResult

    def case(i: int, status: str) -> TestCaseResult:
        score = {"passed": 1.0, "failed": 0.25, "errored": None}[status]
        metric = MetricResult(
            name="M",
            score=score,
            threshold=0.5,
            success=status == "passed",
            reason="r",
            status=status,
            error="boom" if status == "errored" else None,
        )
        return TestCaseResult.from_metrics(f"case-{i}", f"\x1b[31mred {i}\x1b[0m", "out", [metric])

    cases = [case(i, "errored" if i == 4 else "failed" if i % 2 else "passed") for i in range(30)]
    path = tmp_path / "results.json"
    summary = summarize(cases, {"M": 0.5})
    write_results_json(path, {"schema_version": 2, "comparison": None}, summary, cases)
    listed = notable_cases(path, summary)
    assert listed is not None and listed.title == "failing cases (16 of 30, lowest score first)" and listed.more == 6
    assert listed.rows[:3] == [("case-4", ["M error"]), ("case-1", ["M 0.2500"]), ("case-3", ["M 0.2500"])]
    text = "\x1b[31mred\x1b[0m answer"  # no dataset id: named by its input, as evaltasks derives the id
    derived = TestCaseResult.from_metrics(hashlib.sha256(text.encode()).hexdigest()[:12], text, "out", cases[1].metrics)
    write_results_json(path, {"comparison": None}, summarize([derived], {"M": 0.5}), [derived])
    listed = notable_cases(path, summarize([derived], {"M": 0.5}))
    assert listed is not None and listed.rows == [("?[31mred?[0m answer", ["M 0.2500"])]
    passing = [case(i, "passed") for i in range(3)]
    write_results_json(path, {"comparison": None}, summarize(passing, {"M": 0.5}), passing)
    assert notable_cases(path, summarize(passing, {"M": 0.5})) is None


def _many_metric_cases(metrics: int, cases: int) -> list[Any]:
    """``cases`` cases, each failing all ``metrics`` metrics (``m_00`` …); case i scores ``(cases - i) / 1000``
    on every metric but ``m_05`` (its lowest: ``(cases - i) / 2000``), so the last case scores lowest."""
    from evaltasks.results import MetricResult, TestCaseResult

    def case(i: int) -> TestCaseResult:
        scores = {f"m_{k:02d}": (cases - i) / (2000 if k == 5 else 1000) for k in range(metrics)}
        return TestCaseResult.from_metrics(
            f"case-{i:03d}",
            f"question {i}",
            "out",
            [
                MetricResult(name=name, score=score, threshold=0.9, success=False, reason="r", status="failed")
                for name, score in scores.items()
            ],
        )

    return [case(i) for i in range(cases)]


@pytest.mark.parametrize("columns", [80, 160])
def test_case_list_is_short_and_lowest_first_whatever_the_number_of_metrics(tmp_path: Path, columns: int) -> None:
    """600 cases failing 30 metrics each: the list names 10 cases, the lowest scoring first, each with its 3
    lowest metrics and the count of the rest, in at most 35 lines (it printed every metric: 310 lines)."""
    import io

    from rich.console import Console

    from evaltasks.engine.summary import summarize
    from evaltasks.reports.console import _print_cases, notable_cases
    from evaltasks.reports.json_report import write_results_json

    cases = _many_metric_cases(30, 600)
    summary = summarize(cases, {f"m_{k:02d}": 0.9 for k in range(30)})
    path = tmp_path / "results.json"
    write_results_json(path, {"schema_version": 2, "comparison": None}, summary, cases)
    listed = notable_cases(path, summary)
    assert listed is not None and listed.more == 590
    assert listed.title == "failing cases (600 of 600, lowest score first)"
    assert [label for label, _ in listed.rows] == [f"case-{i:03d}" for i in range(599, 589, -1)]
    assert listed.rows[0][1] == ["m_05 0.0005", "m_00 0.0010", "m_01 0.0010", "… 27 more metrics"]
    buffer = io.StringIO()
    _print_cases(Console(file=buffer, width=columns), listed)
    lines = buffer.getvalue().splitlines()
    assert len(lines) <= 35 and all(len(line) <= columns for line in lines), lines
    assert lines[1] == "  case-599 — m_05 0.0005; m_00 0.0010; m_01 0.0010; … 27 more metrics", lines
    assert sum("… 27 more metrics" in line for line in lines) == 10, lines


def test_newly_failing_cases_are_listed_largest_drop_first(tmp_path: Path) -> None:
    """Against a baseline the newly failing cases come in ``comparison.changes`` order (largest drop first, as
    summary.md lists them), not in dataset order."""
    from evaltasks.engine.summary import summarize
    from evaltasks.reports.console import notable_cases

    drops = {"case-a": -0.2, "case-b": -0.9, "case-c": -0.5}  # dataset order a, b, c
    changes = [
        {
            "case_id": case_id,
            "metric": "M",
            "kind": "worse",
            "baseline_score": 1.0,
            "current_score": 1.0 + delta,
            "delta": delta,
        }
        for case_id, delta in sorted(drops.items(), key=lambda item: item[1])
    ]
    comparison = {"baseline": "main", "tolerance": 0.0, "changes": changes, "newly_failing": list(drops)}
    path = tmp_path / "results.json"
    path.write_text(
        '{\n  "schema_version": 2,\n  "comparison": ' + json.dumps(comparison) + ',\n  "cases": [\n  ]\n}\n',
        encoding="utf-8",
    )
    listed = notable_cases(path, summarize(_many_metric_cases(1, 3), {"m_00": 0.9}))
    assert listed is not None
    assert [label for label, _ in listed.rows] == [
        "case-b (newly failing)",
        "case-c (newly failing)",
        "case-a (newly failing)",
    ]
    assert listed.rows[0][1] == ["M 1.0000 → 0.1000"]


def test_long_metric_names_fold_at_word_boundaries_and_a_pipe_keeps_lines_whole() -> None:
    """At 80 columns a long metric name folds after ``_`` (never mid-word) and its numbers stay whole; printed to
    a pipe, the verdict and the pass rate with its interval stay on one line each."""
    import io

    from rich.console import Console

    from evaltasks.engine.lifecycle import RunReport
    from evaltasks.engine.summary import summarize
    from evaltasks.reports.console import print_summary
    from evaltasks.results import MetricResult, TestCaseResult

    name = "contains_metric_with_a_rather_long_name_00"
    cases = [
        TestCaseResult.from_metrics(
            f"case-{i}",
            f"q {i}",
            "out",
            [
                MetricResult(
                    name=name,
                    score=float(i % 4 == 0),
                    threshold=0.5,
                    success=i % 4 == 0,
                    reason="r",
                    status="passed" if i % 4 == 0 else "failed",
                )
            ],
        )
        for i in range(8)
    ]
    summary = summarize(cases, {name: 0.5})
    for terminal in (True, False):
        buffer = io.StringIO()
        print_summary(
            RunReport.of(summary, passed=False, min_pass_rate=0.9),
            console=Console(file=buffer, width=80, force_terminal=terminal, color_system=None),
        )
        lines = [ANSI.sub("", line).rstrip() for line in buffer.getvalue().splitlines()]
        row = next(line for line in lines if line.lstrip().startswith("contains_metric"))
        assert row.split()[0] == "contains_metric_with_a_" and row.split()[1:3] == ["0.2500", "25.00%"], lines
        assert lines[lines.index(row) + 1].split()[0] == "rather_long_name_00", lines
        assert all(len(line) <= 80 for line in lines if "pass rate" not in line and "FAILED:" not in line), lines
        rate = next(line for line in lines if "pass rate: 25.00%" in line)
        assert re.search(r"pass rate: 25\.00% \(\d+\.\d–\d+\.\d%\)$", rate), lines
        if not terminal:  # a pipe: one line each, whatever its width
            assert rate.startswith("cases: 8  passed: 2"), lines
            assert lines[0].startswith("FAILED: pass rate 25.00%"), lines


def test_a_long_gate_line_is_one_line_on_a_pipe_and_wrapped_on_a_terminal() -> None:
    """The GATE line carries the pass rate: piped, it is never wrapped, as the verdict line
    (docs/cli.md#what-the-terminal-shows), so a CI log or a grep sees it whole; a terminal wraps it at its width."""
    import io

    from rich.console import Console

    from evaltasks.engine.lifecycle import RunReport
    from evaltasks.engine.summary import summarize
    from evaltasks.reports.console import print_summary
    from evaltasks.results import MetricResult, TestCaseResult

    cases = [
        TestCaseResult.from_metrics(
            f"case-{i}", f"q {i}", "", [MetricResult.errored("LengthCheck", 0.5, "generation failed: target chat")]
        )
        for i in range(10)
    ]
    message = (
        "gate failed: nothing was evaluated: all 10 cases errored (generation failed: target chat on 10 cases; "
        "the reasons say why); pass rate 0.00% below 50.00%"
    )
    summary = summarize(cases, {"LengthCheck": 0.5})
    report = RunReport.of(summary, passed=False, min_pass_rate=0.5, message=message)
    for terminal in (False, True):
        buffer = io.StringIO()
        print_summary(report, console=Console(file=buffer, width=80, force_terminal=terminal, color_system=None))
        lines = [ANSI.sub("", line).rstrip() for line in buffer.getvalue().splitlines()]
        gate = [i for i, line in enumerate(lines) if line.startswith("GATE FAILED")]
        assert len(gate) == 1, lines
        whole = "GATE FAILED: " + message.removeprefix("gate failed: ")
        if terminal:
            assert len(lines[gate[0]]) <= 80 and lines[gate[0]] + " " + lines[gate[0] + 1] == whole, lines
        else:
            assert lines[gate[0]] == whole, lines


def test_one_warning_line_sums_up_the_regressions() -> None:
    """The flow logs one line for all regressions: their count, the first 3 subjects and where the rest are."""
    from evaltasks.engine.compare import ChangeTest, Comparison, MetricComparison
    from flows.evaluate_suite import regression_summary

    test = ChangeTest.model_validate(
        {
            "statistic": "pass_rate",
            "test": "exact McNemar",
            "paired_cases": 8,
            "verdict": "regressed",
            "baseline": 1.0,
            "current": 0.5,
            "delta": -0.5,
            "p_value": 0.001,
        }
    )
    comparison = Comparison(
        baseline="main",
        tolerance=0.0,
        pass_rate_test=test,
        metrics=[MetricComparison(name=f"metric_{k:02d}", regressed=True) for k in range(30)],
        regressions=["r"] * 61,
    )
    assert regression_summary(comparison) == (
        "Regression since the baseline: 61 regressions (pass rate, metric_00, metric_01 and 28 more); see summary.md"
    )


def test_thresholds_share_one_number_of_decimals_in_the_results_table() -> None:
    """The ``thr.`` column reads ``1.0`` beside ``0.6`` (not ``1``), and ``1.00`` beside ``0.75``."""
    import io

    from rich.console import Console

    from evaltasks.engine.summary import summarize
    from evaltasks.reports.console import print_summary
    from evaltasks.results import MetricResult, TestCaseResult

    for thresholds, shown in (
        ({"exact": 1.0, "near": 0.6}, ["1.0", "0.6"]),
        ({"exact": 1.0, "near": 0.75}, ["1.00", "0.75"]),
    ):
        cases = [
            TestCaseResult.from_metrics(
                f"case-{i}",
                "q",
                "out",
                [
                    MetricResult(name=name, score=1.0, threshold=t, success=True, reason="r", status="passed")
                    for name, t in thresholds.items()
                ],
            )
            for i in range(3)
        ]
        buffer = io.StringIO()
        print_summary(summarize(cases, thresholds), console=Console(file=buffer, width=80, color_system=None))
        rows = [line.split() for line in buffer.getvalue().splitlines() if line.split()[:1] in (["exact"], ["near"])]
        assert [row[3] for row in rows] == shown, buffer.getvalue()


def test_prefects_exit_flush_notice_stays_off_the_terminal() -> None:
    """Prefect's workers log "Still processing items: N items remaining..." as they flush at the process's exit,
    after the command's last line (seen after an exit-2 line on a busy machine): the CLI's console handlers drop it,
    and only it."""
    import prefect.main  # noqa: F401 - configures Prefect's logging handlers, as a run does

    from evaltasks.cli._terminal import hide_tracebacks, without_exit_flush_notice, without_traceback

    handlers = [h for logger in (logging.getLogger(), logging.getLogger("prefect")) for h in logger.handlers]
    assert handlers, "Prefect configured no console handler"
    hide_tracebacks()
    try:

        def shown(name: str, message: str) -> list[bool]:
            record = logging.getLogger(name).makeRecord(name, logging.WARNING, __file__, 1, message, (), None)
            return [bool(h.filter(record)) for h in handlers]

        assert shown("EventsWorker", "Still processing items: 6 items remaining...") == [False] * len(handlers)
        assert shown("APILogWorker", "Still processing items: 2 items remaining...") == [False] * len(handlers)
        assert all(shown("EventsWorker", "Service failed to process an item"))  # other records still show
        assert all(shown("prefect.flow_runs", "Still processing items: 1"))  # and only the workers' notice is dropped
    finally:
        for handler in handlers:
            handler.removeFilter(without_exit_flush_notice)
            handler.removeFilter(without_traceback)
