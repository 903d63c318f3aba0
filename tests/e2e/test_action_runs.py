"""The whole composite GitHub Action through ``action/run-local.sh`` (docs/action.md#github-action): a push saves a
baseline and a pull request compares with it and comments, a fork skips what needs credentials, the cache and
the baseline are kept per checkout.

GITHUB_EVENT_PATH is a real pull_request payload (tests/data/pull_request_event.json) and GITHUB_API_URL points
at a real HTTP server on 127.0.0.1 (tests/github_server.py); the runs are real ``evaltasks run`` subprocesses.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.github_server import GitHubServer
from tests.process_env import REPO_ROOT, subprocess_env

ACTION = REPO_ROOT / "action"


EVENT = Path(__file__).parents[1] / "data" / "pull_request_event.json"


SUITE_ID = "examples-quickstart-suite-8c1c0df6"


MARKER = f"<!-- evaltasks:sticky-comment suite={SUITE_ID} -->"


def _import(name: str):
    sys.path.insert(0, str(ACTION))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(ACTION))


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


# --- the whole composite action through action/run-local.sh -------------------------------------------------


def _run_local(
    tmp_path: Path,
    name: str,
    *args: str,
    server: GitHubServer | None = None,
    token: str = "test-token",
    env_extra: dict[str, str] | None = None,
    api_url: str | None = None,
) -> tuple[int, dict]:
    env = subprocess_env(tmp_path / f"prefect-{name}", api_url)
    env.update(
        {
            "EVALTASKS_ACTION_PYTHON": sys.executable,
            "GITHUB_TOKEN": token,
            "EVALTASKS_LOCAL_OUT": str(tmp_path / f"kept-{name}"),
            **(env_extra or {}),
        }
    )
    env.pop("GITHUB_OUTPUT", None)
    env.pop("OPENAI_API_KEY", None)
    if server is not None:
        env["GITHUB_API_URL"] = server.url
    out = tmp_path / f"{name}.json"
    proc = subprocess.run(
        [
            "bash",
            str(ACTION / "run-local.sh"),
            "--runner-temp",
            str(tmp_path / f"temp-{name}"),
            "--cache-store",
            str(tmp_path / "cache-store"),
            "--workspace",
            str(tmp_path / "ws"),
            "--outputs-json",
            str(out),
            "--run-id",
            name,
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    data["log"] = proc.stdout + proc.stderr
    assert data["exit_code"] == proc.returncode
    return proc.returncode, data


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(REPO_ROOT / "examples" / "quickstart", ws / "examples" / "quickstart")
    return ws


def test_run_local_push_saves_a_baseline_and_a_pull_request_compares_and_comments(
    tmp_path: Path, workspace: Path, prefect_api_url: str
) -> None:
    code, push = _run_local(
        tmp_path, "push", "--with", "suite=examples/quickstart/suite.yaml", "--event", "push", api_url=prefect_api_url
    )
    assert code == 0, push["log"][-4000:]
    assert push["outputs"]["passed"] == "true" and push["outputs"]["pass-rate"] == "0.750000"
    assert "No baseline" in push["summary"]
    assert push["steps"]["run"]["outputs"]["baseline-saved"] == "true"
    results = json.loads(Path(push["outputs"]["results-path"]).read_text())
    assert results["summary"]["passed_cases"] == 6 and results["summary"]["cases"] == 8
    artifact = Path(push["runner_temp"]) / "artifacts" / f"evaltasks-{SUITE_ID}-linux-evaluate-py3.11"
    assert {p.name for p in artifact.iterdir()} >= {"results.json", "junit.xml", "summary.md"}

    # the PR changes one answer: the baseline from the push shows it as worse
    answers = workspace / "examples" / "quickstart" / "answers.jsonl"
    rows = [json.loads(line) for line in answers.read_text().splitlines() if line.strip()]
    changed = rows[0]["id"]
    rows[0]["answer"] = "I would rather not say."
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with GitHubServer() as server:
        code, pr = _run_local(
            tmp_path,
            "pr",
            "--with",
            "suite=examples/quickstart/suite.yaml",
            "--event-path",
            str(_pr_event(tmp_path)),
            server=server,
            api_url=prefect_api_url,
        )
        comments = server.all_comments()
    assert code == 1, pr["log"][-4000:]  # 5/8 = 62.5 % < the gate's 70 %
    assert pr["outputs"]["passed"] == "false" and pr["outputs"]["pass-rate"] == "0.625000"
    assert len(comments) == 1 and comments[0]["body"].startswith(MARKER)
    assert pr["outputs"]["comment-id"] == str(comments[0]["id"])
    for text in (pr["summary"], comments[0]["body"]):
        assert "## Cases that changed" in text
        assert f"- 🔻 **newly failing: {changed.replace('-', chr(92) + '-')}** · ReferenceMatchMetric " in text
    assert any(a["level"] == "error" and "Gate failed" in a["message"] for a in pr["annotations"])
    # one of 8 paired cases worse is no significant regression (exact McNemar p = 1): inconclusive, not called one
    assert not any("Regression since the baseline" in a["message"] for a in pr["annotations"])
    assert pr["steps"]["gate"]["outcome"] == "failure"  # the last step applies the gate


def test_run_local_removes_its_scratch_directory_and_prints_what_it_kept(
    tmp_path: Path, workspace: Path, prefect_api_url: str
) -> None:
    """Without --runner-temp: RUNNER_TEMP is a temporary directory removed on exit; the job summary and outputs
    are kept in EVALTASKS_LOCAL_OUT, the reports and comment.md in the output directory, each path printed."""
    scratch, kept = tmp_path / "tmp", tmp_path / "kept"
    scratch.mkdir()
    env = subprocess_env(tmp_path / "prefect-kept", prefect_api_url)
    env.update(
        {
            "EVALTASKS_ACTION_PYTHON": sys.executable,
            "GITHUB_TOKEN": "test-token",
            "TMPDIR": str(scratch),
            "EVALTASKS_LOCAL_OUT": str(kept),
        }
    )
    env.pop("GITHUB_OUTPUT", None)
    with GitHubServer() as server:
        env["GITHUB_API_URL"] = server.url
        proc = subprocess.run(
            [
                "bash",
                str(ACTION / "run-local.sh"),
                "--cache-store",
                str(tmp_path / "cache-store"),
                "--workspace",
                str(workspace),
                "--with",
                "suite=examples/quickstart/suite.yaml",
                "--with",
                "baseline=none",
                "--event-path",
                str(_pr_event(tmp_path)),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        comments = server.all_comments()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"^── time to verdict: \d+\.\d s \(job start to the gate step's result\)$", proc.stdout, re.M)
    assert not list(scratch.glob("evaltasks-runner-*")), list(scratch.iterdir())  # the scratch folder is gone
    data = json.loads((kept / "outputs.json").read_text())
    assert (kept / "job-summary.md").read_text() == data["summary"] and "quickstart" in data["summary"]
    output_dir = workspace / "eval-results" / "quickstart"  # as `evaltasks run` names it (the suite's name)
    assert data["outputs"]["results-path"] == str(output_dir / "results.json")
    assert len(comments) == 1 and (output_dir / "comment.md").read_text().rstrip("\n") == comments[0]["body"].rstrip(
        "\n"
    )
    tail = proc.stdout[proc.stdout.index("── kept:") :].splitlines()
    assert tail == [
        "── kept:",
        f"   job summary  {kept / 'job-summary.md'}",
        f"   outputs      {kept / 'outputs.json'}",
        f"   reports      {output_dir / 'results.json'}, junit.xml, summary.md",
        f"   comment      {output_dir / 'comment.md'} (posted as comment {comments[0]['id']})",
    ]


def test_run_local_keeps_its_cache_and_baseline_per_checkout(tmp_path: Path, prefect_api_url: str) -> None:
    """Two clones, no --cache-store: the first clone's push saves its baseline in its own checkout
    (.evaltasks/action-cache, printed), so the second clone's pull request finds no baseline; nothing goes into a
    folder shared by every checkout (the home directory's cache)."""
    clones = [tmp_path / "clone-a", tmp_path / "clone-b"]
    for clone in clones:
        shutil.copytree(REPO_ROOT / "examples" / "quickstart", clone / "examples" / "quickstart")
    home = tmp_path / "home"
    home.mkdir()

    def run_local(clone: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
        env = subprocess_env(tmp_path / f"prefect-{clone.name}", prefect_api_url)
        env.update(
            {
                "EVALTASKS_ACTION_PYTHON": sys.executable,
                "GITHUB_TOKEN": "",
                "HOME": str(home),
                "EVALTASKS_LOCAL_OUT": str(clone / "kept"),
            }
        )
        env.pop("GITHUB_OUTPUT", None)
        proc = subprocess.run(
            [
                "bash",
                str(ACTION / "run-local.sh"),
                "--runner-temp",
                str(clone / "temp"),
                "--outputs-json",
                str(clone / "out.json"),
                "--with",
                "suite=examples/quickstart/suite.yaml",
                *args,
            ],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert (clone / "out.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc, json.loads((clone / "out.json").read_text())

    push, pushed = run_local(clones[0], "--event", "push")
    store = clones[0] / ".evaltasks" / "action-cache"
    assert push.returncode == 0 and pushed["steps"]["run"]["outputs"]["baseline-saved"] == "true", push.stdout[-3000:]
    assert f"── emulated Actions cache (baselines included): {store}" in push.stdout
    assert any("evaltasks-baseline-" in p.name for p in store.iterdir())
    _, pr = run_local(clones[1], "--event", "pull_request")
    assert "No baseline" in pr["summary"] and pr["outputs"]["verdict"] == "no baseline"
    assert not list(home.rglob("*"))  # nothing in a folder every checkout shares


def test_run_local_on_a_fork_skips_metrics_without_credentials_and_comments_nothing(
    tmp_path: Path, workspace: Path, prefect_api_url: str
) -> None:
    suite = workspace / "examples" / "quickstart" / "fork-suite.yaml"
    suite.write_text(
        "name: fork-check\n"
        "dataset: {path: answers.jsonl, fields: {id: id, input: question, actual_output: answer, references: references}}\n"
        "metrics:\n"
        "  - metric: ReferenceMatchMetric\n    embedding_provider: openai\n    threshold: 0.6\n"
        "  - metric: LengthCheckMetric\n    max_length: 30\n    unit: words\n"
        "gate: {min_pass_rate: 0.8}\n"
    )
    with GitHubServer() as server:
        code, fork = _run_local(
            tmp_path,
            "fork",
            "--with",
            "suite=examples/quickstart/fork-suite.yaml",
            "--with",
            "baseline=none",
            "--event-path",
            str(_pr_event(tmp_path, fork=True)),
            server=server,
            token="fork-token",
            api_url=prefect_api_url,
        )
        assert server.requests == []
    assert code == 0, fork["log"][-4000:]
    results = json.loads(Path(fork["outputs"]["results-path"]).read_text())
    metrics = results["summary"]["metrics"]
    assert metrics["ReferenceMatchMetric"]["skipped"] == 8 and metrics["LengthCheckMetric"]["passed"] == 7
    assert results["gate"]["pass_rate"] == pytest.approx(7 / 8) and results["passed"] is True
    assert any(a["level"] == "warning" and "skipped" in a["message"] for a in fork["annotations"])
    assert any(a["level"] == "warning" and "fork" in a["message"] for a in fork["annotations"])
    assert "workflow_run" in fork["summary"] and fork["outputs"]["comment-id"] == ""


def test_run_local_an_unreadable_cached_baseline_warns_and_an_explicit_one_is_invalid_input(
    tmp_path: Path, workspace: Path, prefect_api_url: str
) -> None:
    """baseline: auto with a corrupt results.json in the cache: a warning naming the file and why, and the run
    goes on without a baseline (it used to exit 2 on every pull request until the base branch was pushed again).
    The same file given as an explicit path is the user's mistake: exit 2. Also: an empty github-token input
    (an empty ${{ vars.X }}) means the default github.token."""
    prefix = f"evaltasks-baseline-Linux-{SUITE_ID}-b{_import('prepare')._short_hash('main')}-"
    entry = tmp_path / "cache-store" / f"{prefix}push-1"
    (entry / "data").mkdir(parents=True)
    corrupt = '{"summary": {"cases": 8, "pass_rate": 0.75}, "cases": [{"id": "q1"'  # a cut-off upload
    (entry / "data" / "results.json").write_text(corrupt, encoding="utf-8")
    (entry / "key").write_text(f"{prefix}push-1", encoding="utf-8")
    with GitHubServer() as server:
        code, pr = _run_local(
            tmp_path,
            "auto",
            "--with",
            "suite=examples/quickstart/suite.yaml",
            "--with",
            "github-token=",
            "--token",
            "test-token",
            "--event-path",
            str(_pr_event(tmp_path)),
            server=server,
            token="",
            api_url=prefect_api_url,
        )
        comments = server.all_comments()
    assert code == 0, pr["log"][-4000:]
    assert pr["steps"]["run"]["outputs"]["exit-code"] == "0" and pr["outputs"]["passed"] == "true"
    warnings = [a["message"] for a in pr["annotations"] if a["level"] == "warning"]
    cached = str(Path(pr["runner_temp"]) / "evaltasks-baseline" / SUITE_ID / "results.json")
    assert any(cached in w and "not JSON" in w and "Running without a baseline" in w for w in warnings), warnings
    assert "No baseline" in pr["summary"]
    assert len(comments) == 1 and comments[0]["body"].startswith(MARKER)  # github.token stood in for the empty input

    (workspace / "broken.json").write_text(corrupt, encoding="utf-8")
    code, explicit = _run_local(
        tmp_path,
        "explicit",
        "--with",
        "suite=examples/quickstart/suite.yaml",
        "--with",
        "baseline=broken.json",
        "--event-path",
        str(_pr_event(tmp_path)),
        api_url=prefect_api_url,
    )
    assert code == 1 and explicit["steps"]["run"]["outputs"]["exit-code"] == "2", explicit["log"][-4000:]
    assert "ws/broken\\.json, line 1\\: baseline is not JSON" in explicit["summary"]


def test_run_local_a_cached_baseline_of_a_newer_evaltasks_warns_and_the_pull_request_passes(
    tmp_path: Path, workspace: Path, prefect_api_url: str
) -> None:
    """The base branch's cache holds a results.json of a newer evaltasks (a schema version above this one's) with a NaN score: it passes
    the shape check but evaltasks refuses it. The pull request's run warns naming the cache entry (not the
    temporary copy run.sh compares with) and each problem, and goes on without a baseline (it exited 2)."""
    prefix = f"evaltasks-baseline-Linux-{SUITE_ID}-b{_import('prepare')._short_hash('main')}-"
    entry = tmp_path / "cache-store" / f"{prefix}v99.0.0-push-1"
    (entry / "data").mkdir(parents=True)
    from evaltasks.engine.outcome import SCHEMA_VERSION

    newer = {
        "schema_version": SCHEMA_VERSION + 1,
        "summary": {"cases": 1, "pass_rate": 1.0},
        "cases": [{"id": "q1", "metrics": [{"name": "ReferenceMatchMetric", "score": float("nan")}]}],
    }
    (entry / "data" / "results.json").write_text(json.dumps(newer), encoding="utf-8")
    (entry / "key").write_text(entry.name, encoding="utf-8")
    code, pr = _run_local(
        tmp_path,
        "newer",
        "--with",
        "suite=examples/quickstart/suite.yaml",
        "--event-path",
        str(_pr_event(tmp_path)),
        api_url=prefect_api_url,
    )
    assert code == 0, pr["log"][-4000:]
    assert pr["steps"]["run"]["outputs"]["exit-code"] == "0" and pr["outputs"]["passed"] == "true"
    cached = str(Path(pr["runner_temp"]) / "evaltasks-baseline" / SUITE_ID / "results.json")
    (warning,) = [
        a["message"] for a in pr["annotations"] if a["level"] == "warning" and "cached baseline" in a["message"]
    ]
    assert (
        f"{cached}: field 'schema_version' is {SCHEMA_VERSION + 1}" in warning
        and "Running without a baseline" in warning
    )
    assert "field 'metrics.ReferenceMatchMetric.score' must be a finite number or null, got nan" in warning
    assert "evaltasks-baseline-" not in warning.split("cannot be used:")[1].replace(cached, "")  # no temporary copy
    assert "No baseline" in pr["summary"]
