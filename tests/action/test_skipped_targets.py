"""The action on a run without a target's secret (a fork's pull request): ``action/missing_targets.py`` decides
which targets cannot run, ``run.sh`` skips them (or the whole run), the report says so, and the gate never fails
for the missing key (docs/action.md#prompt-changes-on-every-pull-request).

The scripts run as the action runs them: subprocesses with the step's environment, ``GITHUB_OUTPUT`` and
``GITHUB_STEP_SUMMARY`` files parsed by the local runner's own parser (.ci/local_runner.py). The key rule is the
real client's (evaltasks.judges.openai.OpenAIJudge), exercised through the environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.process_env import REPO_ROOT

ACTION = REPO_ROOT / "action"
EXAMPLE = REPO_ROOT / "examples" / "prompt_change"
KEY_VARIABLES = ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT", "OPENAI_BASE_URL")


def _parse_outputs(path: Path) -> dict[str, str]:
    sys.path.insert(0, str(REPO_ROOT / ".ci"))
    try:
        import local_runner
    finally:
        sys.path.remove(str(REPO_ROOT / ".ci"))
    return local_runner.parse_output_file(path.read_text(encoding="utf-8"))


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A step's environment: no key of any endpoint, fresh GITHUB_OUTPUT / GITHUB_STEP_SUMMARY files."""
    env = {name: value for name, value in os.environ.items() if name not in KEY_VARIABLES}
    for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        path = tmp_path / name.lower()
        path.write_text("")
        env[name] = str(path)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def missing_targets():
    """action/missing_targets.py imported as the action's scripts import each other (its folder on sys.path)."""
    sys.path.insert(0, str(ACTION))
    try:
        return __import__("missing_targets")
    finally:
        sys.path.remove(str(ACTION))


@pytest.fixture()
def decide(tmp_path: Path, missing_targets, capsys: pytest.CaptureFixture[str]):
    """``decide(suite, **env)`` -> (exit status, stdout, step outputs, the filtered suite's path): missing_targets.py's
    ``main`` in this process, with no endpoint key set but those in ``env``."""

    def _decide(suite: Path, **env: str) -> tuple[int, str, dict[str, str], Path]:
        filtered = suite.parent / f".filtered-{suite.name}"
        with pytest.MonkeyPatch.context() as patch:
            for name in (*KEY_VARIABLES, "APP_TOKEN", "APP_TENANT"):
                patch.delenv(name, raising=False)
            for name, value in env.items():
                patch.setenv(name, value)
            out = tmp_path / "github_output"
            out.write_text("")
            patch.setenv("GITHUB_OUTPUT", str(out))
            capsys.readouterr()
            code = missing_targets.main([str(suite), str(filtered)])
            stdout = capsys.readouterr().out
        return code, stdout, _parse_outputs(out), filtered

    return _decide


def _suite(folder: Path, targets: object, key: str = "targets") -> Path:
    """A suite beside a 3-row dataset, with ``targets`` under ``key`` (``target`` or ``targets``)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"q{i}", "question": f"question {i}"} for i in range(3)]
    (folder / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    suite = {
        "name": "skip-check",
        key: targets,
        "dataset": {"path": "rows.jsonl", "fields": {"id": "id", "input": "question"}},
        "metrics": [{"metric": "NonEmptyMetric"}],
    }
    for prompt in ("p.md", "prompts/a.md"):  # the prompts the chat entries below name
        (folder / prompt).parent.mkdir(parents=True, exist_ok=True)
        (folder / prompt).write_text("### system\nAnswer briefly.\n### user\n{{ input }}\n")
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return path


def _warnings(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("::warning")]


def test_a_chat_target_without_its_key_skips_the_run_with_a_warning(tmp_path: Path, decide) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "prompt_change")
    suite = tmp_path / "prompt_change" / "suite.yaml"
    code, stdout, outputs, filtered = decide(suite)
    assert code == 11 and stdout.splitlines()[-1] == "targets: skip"
    assert not filtered.exists()
    rows = [line for line in (EXAMPLE / "tickets.jsonl").read_text().splitlines() if line.strip()]
    sentence = (
        "target 'chat' cannot run without a secret this run does not have (pull requests from forks get none): "
        f"its {len(rows)} cases are skipped ("
    )
    (warning,) = _warnings(stdout)
    assert warning.startswith("::warning title=evaltasks%3A target skipped::" + sentence)
    assert "set the OPENAI_API_KEY environment variable" in warning
    assert outputs["skipped"] == "true" and set(outputs) == {"skipped", "skipped-reason"}
    assert outputs["skipped-reason"].startswith(sentence)
    assert outputs["skipped-reason"].endswith("). Nothing was evaluated, and the gate was not applied.")
    # with the key set (any non-empty value: nothing is sent), the target runs
    code, stdout, outputs, _ = decide(suite, OPENAI_API_KEY="sk-anything")
    assert (code, stdout.strip(), outputs) == (0, "targets: run", {})


def test_the_key_rule_is_the_chat_clients_own(tmp_path: Path, decide) -> None:
    azure = _suite(
        tmp_path / "azure",
        {"chat": {"model": "gpt-4o-mini", "prompt": "p.md", "azure_endpoint": "https://x.example", "api_version": "1"}},
        key="target",
    )
    code, stdout, _, _ = decide(azure)
    assert code == 11 and "AZURE_OPENAI_API_KEY" in stdout
    code, _, _, _ = decide(azure, AZURE_OPENAI_API_KEY="azure-key")
    assert code == 0
    # the Azure rule also accepts OPENAI_API_KEY (OpenAIJudge: AZURE_OPENAI_API_KEY, else OPENAI_API_KEY)
    assert decide(azure, OPENAI_API_KEY="openai-key")[0] == 0
    # an Azure endpoint from the environment counts too, unless the target names a base_url
    plain = _suite(tmp_path / "plain", {"chat": {"model": "m", "prompt": "p.md"}}, key="target")
    assert "AZURE_OPENAI_API_KEY" in decide(plain, AZURE_OPENAI_ENDPOINT="https://x.example")[1]
    local = _suite(
        tmp_path / "local",
        {"chat": {"model": "m", "prompt": "p.md", "base_url": "http://127.0.0.1:1/v1"}},
        key="target",
    )
    reason = decide(local, AZURE_OPENAI_ENDPOINT="https://x.example")[2]["skipped-reason"]
    assert "OPENAI_API_KEY" in reason and "AZURE" not in reason


def test_an_http_target_needs_the_variables_its_headers_name(tmp_path: Path, decide) -> None:
    http = {
        "http": {
            "url": "http://127.0.0.1:8000/ask",
            "body": {"question": "{{ input }}"},
            "output": "answer",
            "headers": {"Authorization": "APP_TOKEN", "X-Tenant": "APP_TENANT"},
        }
    }
    suite = _suite(tmp_path / "http", http, key="target")
    code, _, outputs, _ = decide(suite, APP_TENANT="acme")
    assert code == 11
    reason = outputs["skipped-reason"]
    assert reason.startswith("target 'http' cannot run without a secret this run does not have")
    assert "its 3 cases are skipped" in reason and "APP_TOKEN" in reason and "APP_TENANT" not in reason
    assert decide(suite, APP_TENANT="acme", APP_TOKEN="t")[0] == 0


def test_only_the_targets_without_credentials_are_dropped(tmp_path: Path, decide) -> None:
    targets = [
        {"name": "app", "python": "bot:respond"},
        {"name": "current", "chat": {"model": "gpt-4o-mini", "prompt": "prompts/a.md"}},
        {"name": "local-model", "chat": {"model": "llama3.2", "prompt": "prompts/a.md", "base_url": "http://h/v1"}},
    ]
    suite = _suite(tmp_path / "mixed", targets)
    code, stdout, outputs, filtered = decide(suite)
    assert code == 10 and stdout.splitlines()[-1] == "targets: filtered"
    assert len(_warnings(stdout)) == 2
    assert "target 'current' cannot run" in outputs["skipped-reason"]
    assert "target 'local-model' cannot run" in outputs["skipped-reason"]
    assert "target 'app'" not in outputs["skipped-reason"].partition("Evaluated:")[0]
    assert outputs["skipped-reason"].endswith("Evaluated: 'app'.")
    assert "skipped" not in outputs  # the run goes on with what is left
    written = yaml.safe_load(filtered.read_text())
    original = yaml.safe_load(suite.read_text())
    assert written.pop("target") == targets[0]  # one left: a single target, named as before
    assert "targets" not in written
    del original["targets"]
    assert written == original  # everything else as it was

    # two of three left: still side by side, in their order
    http = {
        "name": "api",
        "http": {"url": "http://h/ask", "output": "answer", "headers": {"Authorization": "APP_TOKEN"}},
    }
    suite = _suite(tmp_path / "two-left", [targets[1], http, targets[0]])
    code, _, outputs, filtered = decide(suite, OPENAI_API_KEY="k")
    assert code == 10 and yaml.safe_load(filtered.read_text())["targets"] == [targets[1], targets[0]]
    assert outputs["skipped-reason"].startswith("target 'api' cannot run")
    assert outputs["skipped-reason"].endswith("Evaluated: 'current', 'app'.")
    code, _, outputs, filtered = decide(_suite(tmp_path / "keyed", targets), OPENAI_API_KEY="k")
    assert code == 0 and outputs == {}


@pytest.mark.parametrize(
    "suite_text",
    [
        "name: x\ndataset: {path: a.jsonl}\nmetrics: [{metric: NonEmptyMetric}]\n",  # no target
        "name: x\ntarget: {python: bot:respond}\n",  # nothing the action can tell
        "target: [unclosed\n",  # invalid YAML: evaltasks run reports it
        "- a list\n",
        "target: {chat: {model: m, prompt: p.md, temperature: 9}}\n",  # a bad entry is evaltasks run's to name
        "target: {chat: {model: m, prompt: missing.md}}\n",
    ],
)
def test_nothing_to_skip_leaves_the_run_to_evaltasks(tmp_path: Path, suite_text: str, decide) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(suite_text)
    code, stdout, outputs, filtered = decide(suite)
    assert (code, stdout.strip(), outputs) == (0, "targets: run", {})
    assert not filtered.exists()


def test_a_target_name_cannot_forge_a_workflow_command(tmp_path: Path, decide) -> None:
    name = "evil\n::error::forged %0A"
    suite = _suite(tmp_path / "evil", {"name": name, "chat": {"model": "m", "prompt": "p.md"}}, key="target")
    code, stdout, _, _ = decide(suite)
    assert code == 11
    assert not any(line.startswith("::error") for line in stdout.splitlines())
    (warning,) = _warnings(stdout)
    assert "target 'evil%0A::error::forged %250A' cannot run" in warning


def _run_step(tmp_path: Path, suite: Path, skip: str, **extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """action/run.sh as the composite's run step: evaltasks from this checkout, reports in tmp_path/out."""
    env = _env(
        tmp_path,
        PYTHON=sys.executable,
        SUITE=str(suite),
        OUTPUT_DIR=str(tmp_path / "out"),
        RUN_LOG=str(tmp_path / "run.log"),
        SKIP_MISSING_CREDENTIALS=skip,
        REGRESSION_TOLERANCE="0.01",
        BASELINE_FILE="",
        EVALTASKS_INDEX_DIR=str(tmp_path / "index"),
        **extra,
    )
    proc = subprocess.run(
        ["bash", str(ACTION / "run.sh")], env=env, capture_output=True, text=True, timeout=600, cwd=suite.parent
    )
    return proc, _parse_outputs(Path(env["GITHUB_OUTPUT"]))


@pytest.mark.slow
def test_run_step_skips_evaltasks_and_report_and_gate_pass_with_the_reason(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "prompt_change")
    suite = tmp_path / "prompt_change" / "suite.yaml"
    proc, outputs = _run_step(tmp_path, suite, "true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outputs["exit-code"] == "0" and outputs["skipped"] == "true"
    assert outputs["skipped-reason"].startswith("target 'chat' cannot run without a secret")
    assert not (tmp_path / "out" / "results.json").exists()  # evaltasks never started
    assert "stop-commands" not in proc.stdout
    assert "nothing was evaluated" in (tmp_path / "run.log").read_text()
    assert sorted(p.name for p in suite.parent.iterdir()) == sorted(p.name for p in EXAMPLE.iterdir())

    (tmp_path / "report").mkdir()
    report_env = _env(
        tmp_path / "report",
        OUTPUT_DIR=str(tmp_path / "out"),
        EXIT_CODE="0",
        SKIPPED="true",
        SKIPPED_REASON=outputs["skipped-reason"],
        SUITE="examples/prompt_change/suite.yaml",
        SUITE_ID="examples-prompt-change-suite-0",
        RUN_LOG=str(tmp_path / "run.log"),
        COMMENT_BODY_FILE=str(tmp_path / "comment.md"),
    )
    report = subprocess.run([sys.executable, str(ACTION / "report.py")], env=report_env, capture_output=True, text=True)
    assert report.returncode == 0, report.stdout + report.stderr
    assert "::error" not in report.stdout
    step = _parse_outputs(Path(report_env["GITHUB_OUTPUT"]))
    assert (step["passed"], step["pass-rate"], step["verdict"], step["exit-code"]) == ("", "", "", "0")
    summary = Path(report_env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
    assert "⚠️ **Skipped**: target 'chat' cannot run without a secret this run does not have" in summary
    assert "OPENAI\\_API\\_KEY" in summary
    assert "could not run" not in summary
    comment = (tmp_path / "comment.md").read_text(encoding="utf-8")
    assert comment.startswith("<!-- evaltasks:sticky-comment suite=examples-prompt-change-suite-0 -->\n")
    assert "**Skipped**" in comment

    gate_env = {**os.environ, "EXIT_CODE": "0", "SKIPPED": "true", "OUTPUT_DIR": str(tmp_path / "out")}
    gate = subprocess.run(["bash", str(ACTION / "gate.sh")], env=gate_env, capture_output=True, text=True)
    assert gate.returncode == 0 and gate.stdout.startswith("::warning title=evaltasks::nothing was evaluated")
    # without the skip, exit 0 and no results.json is no pass
    gate_env["SKIPPED"] = ""
    assert subprocess.run(["bash", str(ACTION / "gate.sh")], env=gate_env, capture_output=True).returncode == 1


@pytest.mark.slow
def test_without_skipping_a_missing_key_is_invalid_input(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "prompt_change")
    proc, outputs = _run_step(tmp_path, tmp_path / "prompt_change" / "suite.yaml", "false")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the run step never fails; the gate step does
    assert outputs == {"exit-code": "2"}
    assert "set the OPENAI_API_KEY environment variable" in (tmp_path / "run.log").read_text()
