"""Step 4 of the action: the job summary, the PR comment's body, step outputs and annotations.

Reads ``$OUTPUT_DIR/results.json`` (written by ``evaltasks run``; with ``comparison`` when a baseline was found)
and writes:

- the job summary (``$GITHUB_STEP_SUMMARY``): the verdict line, the "No baseline" note (none in the cache yet),
  the cases that changed, the per-metric table with deltas, with several targets ``side_by_side`` (each target
  against the first, the cases they split, a metric table per target), the rest folded
  (:func:`render_summary_markdown` in evaltasks.reports.markdown); at most :data:`SUMMARY_MAX_BYTES` UTF-8 bytes (GitHub's limit
  is 1 MiB per step);
- ``$COMMENT_BODY_FILE``: the same content behind a hidden marker line, with a link to the run, at most
  :data:`COMMENT_MAX_CHARS` UTF-16 code units (GitHub's limit is 65,536 characters); also ``comment.md`` and
  ``pull-request.json`` in the output directory (for the ``workflow_run`` pattern on forks). On a fork's pull
  request that limit holds for the comment as the trusted workflow will post it, escaped by
  ``comment.sanitize_untrusted_body`` (a few percent longer; :func:`comment_size`), so it is never cut there;
- outputs ``passed``, ``pass-rate``, ``results-path``, ``summary-path``, ``regressed``, ``verdict``
  (:func:`verdict_output`), ``exit-code``;
- ``::error`` for a failed gate (results.json ``gate.message``: the gate's own reason), ``::error``/``::warning`` for regressions (error when the gate failed too; each
  names its p-value, as ``comparison.regressions`` words it),
  ``::warning`` for skipped metrics, ``::notice`` for notices (data files outside the suite's directory) and
  when there was no baseline.

When the run produced no results.json (invalid input, exit 2; an abort, exit 3; interrupted, exit 130 / 143)
the summary says so with the last lines of the run's log, escaped. When every target of the suite lacked its secret
(``SKIPPED=true`` from run.sh, a fork's pull request) nothing ran: the summary and comment say which targets were
skipped and why (``SKIPPED_REASON``), ``passed`` and ``verdict`` are empty, and no error is annotated; when only
some were, the reason leads the report's warnings. All text that came from the run is escaped
(``markdown_inline``).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _github import annotate, append_summary, env_value, is_fork, load_event, pull_request, run_url, set_output  # noqa: E402

SUMMARY_MAX_BYTES = 1024 * 1024 - 4096  # GitHub: 1 MiB per step; margin for other writers of the same step
COMMENT_MAX_CHARS = 65536 - 512  # GitHub: 65,536 characters per comment; margin for the marker and footer
LOG_TAIL_LINES = 30


def marker(suite_id: str) -> str:
    """The hidden first line that identifies this suite's sticky comment (``suite_id`` is ``[a-z0-9-]``)."""
    return f"<!-- evaltasks:sticky-comment suite={suite_id} -->"


def utf16_units(text: str) -> int:
    """Length in UTF-16 code units (how GitHub counts characters; an emoji counts 2)."""
    return len(text.encode("utf-16-le")) // 2


def comment_size(head: str, footer: str, event: dict | None) -> Callable[[str], int]:
    """The size by which a comment's text (between ``head``, the marker line, and ``footer``, the run link) is
    measured against :data:`COMMENT_MAX_CHARS`, in UTF-16 code units: as written, or on a fork's pull request
    (``event``) as the ``workflow_run`` workflow of docs/action.md#comments-on-pull-requests-from-forks-workflow_run posts it, after ``comment.sanitize_untrusted_body``
    escaped it (every active character backslash-escaped: about 2.5 % longer for a typical report)."""
    if not (event and is_fork(event)):
        return lambda text: utf16_units(head + text + footer)
    from comment import sanitize_untrusted_body

    repo = env_value("GITHUB_REPOSITORY") or (event.get("repository") or {}).get("full_name", "")
    server = env_value("GITHUB_SERVER_URL", "https://github.com")

    def size(text: str) -> int:
        raw = utf16_units(head + text + footer)
        if raw > COMMENT_MAX_CHARS:  # too long already (escaping lengthens a report): megabytes are not escaped
            return raw
        return utf16_units(sanitize_untrusted_body(head + text + footer, repo, server))

    return size


def utf8_bytes(text: str) -> int:
    """Length in UTF-8 bytes."""
    return len(text.encode("utf-8"))


def verdict_output(doc: dict | None) -> str:
    """The ``verdict`` output for a results.json ``doc``: the comparison's verdict (``regressed``, ``improved``,
    ``no significant change``, ``inconclusive``; the header's ``gate.verdict``, else ``comparison.verdict``),
    ``no baseline`` without a comparison, and "" when evaltasks could not run (``doc`` None) or wrote no verdict
    (a results.json of schema 1, from an evaltasks before the statistical comparison)."""
    if doc is None:
        return ""
    comparison = doc.get("comparison")
    if not isinstance(comparison, dict) or not comparison:
        return "no baseline"
    gate = doc.get("gate") if isinstance(doc.get("gate"), dict) else {}
    verdicts = ("regressed", "improved", "no significant change", "inconclusive")
    for verdict in (gate.get("verdict"), comparison.get("verdict") if (doc.get("schema_version") or 1) >= 2 else None):
        if verdict in verdicts:
            return str(verdict)
    return ""


def _failure_markdown(suite: str, exit_code: str, log_path: str) -> str:
    from evaltasks.reports._escape import markdown_inline

    what = {
        "2": "invalid input (nothing was scored)",
        "3": "the run aborted",
        "130": "the run was interrupted (SIGINT)",
        "143": "the run was interrupted (SIGTERM)",
    }.get(exit_code, "no results were written")
    lines = [
        f"# evaltasks: {markdown_inline(suite)}",
        "",
        f"❌ **evaltasks could not run**: {what} (exit code {exit_code}).",
        "",
    ]
    try:
        tail = Path(log_path).read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        tail = []
    tail = [line for line in tail if line.strip()]
    if tail:
        lines += ["Last lines of the log:", ""] + [f"> {markdown_inline(line, 400)}  " for line in tail] + [""]
    return "\n".join(lines)


def _skipped_markdown(suite: str, reason: str) -> str:
    """The summary of a run in which every target was skipped for a missing secret (``reason``, from
    ``missing_targets.py``): nothing was evaluated and the gate was not applied."""
    from evaltasks.reports._escape import markdown_inline

    return "\n".join(
        [
            f"# evaltasks: {markdown_inline(suite)}",
            "",
            f"⚠️ **Skipped**: {markdown_inline(reason or 'every target needs a secret this run does not have.', 2000)}",
            "",
            "A maintainer's run (a branch of this repository, or the default branch after merging) evaluates it.",
            "",
        ]
    )


def _write_comment(env: dict[str, str], output_dir: Path, body: str) -> None:
    """Write the comment body for the comment step, and beside the reports (``comment.md``, plus
    ``pull-request.json`` with the PR's number and head sha) so that a trusted ``workflow_run`` workflow can post
    it for a fork's pull request (docs/action.md#comments-on-pull-requests-from-forks-workflow_run)."""
    Path(env["COMMENT_BODY_FILE"]).write_text(body, encoding="utf-8")
    pr = pull_request(load_event())
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "comment.md").write_text(body, encoding="utf-8")
        if pr is not None:
            (output_dir / "pull-request.json").write_text(
                json.dumps({"number": pr.get("number"), "head_sha": (pr.get("head") or {}).get("sha")}),
                encoding="utf-8",
            )
    except OSError as exc:
        annotate("warning", f"cannot write the comment beside the reports: {exc}", title="evaltasks")


def main() -> int:
    """Write the summary, comment body, outputs and annotations; always 0 (the gate is applied later): when the
    report itself cannot be written (a bug, an unreadable results.json), a minimal summary and comment say where the
    full report is, and a ``::warning`` names the error."""
    try:
        return _report()
    except Exception as exc:  # noqa: BLE001 - the report step must never fail the job (the gate step decides)
        import traceback

        traceback.print_exc()
        env = os.environ
        output_dir = Path(env.get("OUTPUT_DIR", "."))
        suite_id = env.get("SUITE_ID", "suite")
        annotate(
            "warning",
            f"evaltasks could not write its report ({type(exc).__name__}: {exc}); the full report "
            f"is in {output_dir} (results.json, summary.md) in the workflow artifact.",
            title="evaltasks",
        )
        url = run_url()
        text = (
            f"# evaltasks\n\n⚠️ The report could not be written here. The full report is in the workflow "
            f"artifact (results.json, summary.md){f': [workflow run]({url})' if url else ''}.\n"
        )
        try:
            _fallback_outputs(env, output_dir / "results.json")
            append_summary(text)
            if env.get("COMMENT_BODY_FILE"):
                _write_comment(dict(env), output_dir, f"{marker(suite_id)}\n{text}")
        except Exception as again:  # noqa: BLE001
            annotate("warning", f"evaltasks could not write even a minimal report: {again}", title="evaltasks")
        return 0


def _fallback_outputs(env: os._Environ[str] | dict[str, str], results_path: Path) -> None:
    """The step outputs when the report failed: read from results.json where it parses, else from the exit code
    (``passed`` true for exit 0)."""
    try:
        doc = json.loads(results_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    gate = doc.get("gate") if isinstance(doc, dict) and isinstance(doc.get("gate"), dict) else {}
    rate = gate.get("pass_rate")
    comparison = doc.get("comparison") if isinstance(doc, dict) else None
    set_output("exit-code", env.get("EXIT_CODE", "").strip() or "3")
    set_output(
        "passed", "true" if (doc.get("passed") if isinstance(doc, dict) else env.get("EXIT_CODE") == "0") else "false"
    )
    set_output("pass-rate", f"{rate:.6f}" if isinstance(rate, (int, float)) else "")
    set_output("regressed", "true" if isinstance(comparison, dict) and comparison.get("regressed") else "false")
    set_output("verdict", verdict_output(doc) if isinstance(doc, dict) else "")
    set_output("results-path", str(results_path) if doc is not None else "")


def _report() -> int:
    """:func:`main`'s work (may raise)."""
    from evaltasks.engine.compare import Comparison
    from evaltasks.reports.markdown import render_summary_markdown
    from evaltasks.results import EvaluationSummary, TestCaseResult, budget_message

    env = os.environ
    output_dir = Path(env["OUTPUT_DIR"])
    exit_code = env.get("EXIT_CODE", "").strip() or "3"
    suite_id = env.get("SUITE_ID", "suite")
    results_path = output_dir / "results.json"
    url = run_url()
    footer = f"\n---\n[Workflow run]({url}) · full reports in the workflow artifact" if url else ""
    set_output("exit-code", exit_code)
    set_output("results-path", str(results_path) if results_path.exists() else "")
    set_output("summary-path", str(output_dir / "summary.md") if (output_dir / "summary.md").exists() else "")

    skipped_reason = env.get("SKIPPED_REASON", "").strip()
    if env.get("SKIPPED") == "true" and exit_code == "0":
        text = _skipped_markdown(env.get("SUITE", suite_id), skipped_reason)
        append_summary(text)
        _write_comment(dict(env), output_dir, f"{marker(suite_id)}\n{text}{footer}\n")
        for name, value in (("passed", ""), ("pass-rate", ""), ("regressed", "false"), ("verdict", "")):
            set_output(name, value)
        return 0

    doc = None
    if results_path.exists() and exit_code in ("0", "1"):
        try:
            doc = json.loads(results_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            annotate("error", f"cannot read {results_path}: {exc}", title="evaltasks")
    if doc is None:
        text = _failure_markdown(env.get("SUITE", suite_id), exit_code, env.get("RUN_LOG", ""))
        append_summary(text)
        _write_comment(dict(env), output_dir, f"{marker(suite_id)}\n{text}{footer}\n")
        for name, value in (("passed", "false"), ("pass-rate", ""), ("regressed", "false"), ("verdict", "")):
            set_output(name, value)
        annotate(
            "error", f"evaltasks could not run the suite (exit code {exit_code}); see the log above.", title="evaltasks"
        )
        return 0

    summary = EvaluationSummary.model_validate(doc["summary"])
    cases = [TestCaseResult.model_validate(case) for case in doc.get("cases", [])]
    comparison = Comparison.model_validate(doc["comparison"]) if doc.get("comparison") else None
    gate = doc.get("gate") or {}
    passed = bool(doc.get("passed"))
    warnings = list(doc.get("warnings") or [])
    common: dict[str, Any] = dict(
        passed=passed,
        min_pass_rate=float(gate.get("min_pass_rate", 1.0)),
        comparison=comparison,
        # targets skipped before the run (already annotated by the run step): first among the warnings
        warnings=([f"Skipped: {skipped_reason}"] if skipped_reason else []) + warnings,
        gate_pass_rate=gate.get("pass_rate"),
    )
    if gate.get("fail_on") is not None:  # an evaltasks from before the statistical gate takes no fail_on
        common["fail_on"] = gate["fail_on"]
    suite = str(doc.get("suite", suite_id))
    no_baseline = ""
    if comparison is None and env.get("BASELINE_AUTO") == "true":  # said right under the verdict
        no_baseline = (
            "No baseline: no earlier results of this suite in the cache yet (runs on pushes to the "
            "base branch save them)."
        )
    placed = "baseline_note" in inspect.signature(render_summary_markdown).parameters  # an older evaltasks: at the end
    if no_baseline and placed:
        common["baseline_note"] = no_baseline
    tail = f"\n{no_baseline}\n" if no_baseline and not placed else ""
    if doc.get("side_by_side") and "side_by_side" in inspect.signature(render_summary_markdown).parameters:
        common["side_by_side"] = doc["side_by_side"]  # targets compared (an evaltasks that renders them)
    summary_text = render_summary_markdown(
        suite,
        summary,
        cases,
        **common,
        max_size=SUMMARY_MAX_BYTES,
        size=utf8_bytes,
        truncation_note="The full report is in the workflow artifact (results.json, summary.md).",
    )
    append_summary(summary_text + tail)
    head = marker(suite_id) + "\n"
    comment_text = render_summary_markdown(
        suite,
        summary,
        cases,
        **common,
        max_size=COMMENT_MAX_CHARS,
        size=comment_size(head, footer, load_event()),
        truncation_note="The full report is in the job summary and the workflow artifact.",
    )
    _write_comment(dict(env), output_dir, head + comment_text + tail + footer + "\n")

    rate = gate.get("pass_rate")
    set_output("passed", "true" if passed else "false")
    set_output("pass-rate", "" if rate is None else f"{rate:.6f}")
    set_output("regressed", "true" if comparison is not None and comparison.regressed else "false")
    set_output("verdict", verdict_output(doc))
    if not passed:
        shown = "n/a" if rate is None else f"{rate:.2%}"
        stopped = budget_message(summary)
        reason = str(gate.get("message") or "")  # the gate's own reason (run.gate_message), e.g. a regression
        if reason:
            text = "Gate failed: " + reason.removeprefix("gate failed: ")
        else:  # a results.json from an evaltasks before gate.message
            text = (
                f"Gate failed: {stopped}"
                if stopped
                else f"Gate failed: pass rate {shown} below {float(gate.get('min_pass_rate', 1)):.2%}"
            )
        annotate("error", text, title=f"evaltasks: {suite}")
    for regression in (comparison.regressions if comparison else [])[:10]:
        annotate(
            "error" if not passed else "warning",
            f"Regression since the baseline: {regression}",
            title=f"evaltasks: {suite}",
        )
    for warning in warnings[:10]:
        annotate("warning", warning, title=f"evaltasks: {suite}")
    for notice in list(doc.get("notices") or [])[:10]:
        annotate("notice", notice, title=f"evaltasks: {suite}")
    if no_baseline:
        annotate("notice", "No baseline: nothing to compare with yet.", title=f"evaltasks: {suite}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
