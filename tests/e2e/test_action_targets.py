"""The whole composite action (``action/run-local.sh``) on a fork's pull request whose suite has targets that need a
secret the fork does not get (docs/action.md#prompt-changes-on-every-pull-request): the targets' cases are skipped
with a warning and the check never fails for the missing key.

GITHUB_EVENT_PATH is a real pull_request payload (tests/data/pull_request_event.json) turned into a fork's, and
GITHUB_API_URL points at a real HTTP server on 127.0.0.1 (tests/github_server.py); the runs are real
``evaltasks run`` subprocesses with no OPENAI_API_KEY.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.github_server import GitHubServer
from tests.process_env import REPO_ROOT, subprocess_env

ACTION = REPO_ROOT / "action"
EVENT = REPO_ROOT / "tests" / "data" / "pull_request_event.json"


def _fork_event(tmp_path: Path) -> Path:
    event = json.loads(EVENT.read_text())
    event["pull_request"]["head"]["repo"] = {
        **event["pull_request"]["head"]["repo"],
        "full_name": "contributor/evaltasks-demo",
        "fork": True,
    }
    path = tmp_path / "fork_event.json"
    path.write_text(json.dumps(event))
    return path


def _run_local(
    tmp_path: Path, name: str, suite: str, server: GitHubServer, api_url: str, *event: str
) -> tuple[int, dict]:
    """run-local.sh with ``suite``; ``event``: its event arguments (default: a fork's pull request, no baseline)."""
    env = subprocess_env(tmp_path / f"prefect-{name}", api_url)
    env.update(
        {
            "EVALTASKS_ACTION_PYTHON": sys.executable,
            "GITHUB_TOKEN": "test-token" if event else "fork-token",  # a fork's token is read-only
            "GITHUB_API_URL": server.url,
            "EVALTASKS_LOCAL_OUT": str(tmp_path / f"kept-{name}"),
        }
    )
    for variable in ("GITHUB_OUTPUT", "OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT"):
        env.pop(variable, None)
    out = tmp_path / f"{name}.json"
    proc = subprocess.run(
        ["bash", str(ACTION / "run-local.sh"), "--runner-temp", str(tmp_path / f"temp-{name}")]
        + ["--cache-store", str(tmp_path / "cache-store"), "--workspace", str(tmp_path / "ws")]
        + ["--outputs-json", str(out), "--run-id", name, "--with", f"suite={suite}"]
        + list(event or ("--with", "baseline=none", "--event-path", str(_fork_event(tmp_path)))),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    data["log"] = proc.stdout + proc.stderr
    return proc.returncode, data


def test_a_fork_without_the_key_skips_the_chat_target_and_passes(tmp_path: Path, prefect_api_url: str) -> None:
    shutil.copytree(REPO_ROOT / "examples" / "prompt_change", tmp_path / "ws" / "evals")
    with GitHubServer() as server:
        code, fork = _run_local(tmp_path, "fork", "evals/suite.yaml", server, prefect_api_url)
        assert server.requests == []  # a fork's token comments nothing
    assert code == 0, fork["log"][-4000:]
    assert fork["steps"]["run"]["outputs"]["skipped"] == "true"
    assert fork["steps"]["gate"]["outcome"] == "success"
    assert (fork["outputs"]["passed"], fork["outputs"]["verdict"], fork["outputs"]["results-path"]) == ("", "", "")
    warnings = [a["message"] for a in fork["annotations"] if a["level"] == "warning"]
    assert any(m.startswith("target 'chat' cannot run without a secret") and "its 10 cases" in m for m in warnings)
    assert any(m.startswith("nothing was evaluated") for m in warnings)  # the gate step's
    assert not any(a["level"] == "error" for a in fork["annotations"])
    assert "⚠️ **Skipped**: target 'chat' cannot run" in fork["summary"]
    assert "could not run" not in fork["summary"]


def _listing(folder: Path) -> list[str]:
    """The names in ``folder``, sorted, but Python's ``__pycache__``: importing the suite's ``bot.py`` writes one there
    wherever PYTHONDONTWRITEBYTECODE is unset, as any import of a module from a folder does."""
    return sorted(p.name for p in folder.iterdir() if p.name != "__pycache__")


def test_a_fork_evaluates_the_targets_it_can_and_names_the_skipped_one(tmp_path: Path, prefect_api_url: str) -> None:
    folder = tmp_path / "ws" / "evals"
    shutil.copytree(REPO_ROOT / "examples" / "faq_bot", folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "prompts").mkdir()
    (folder / "prompts" / "answer.md").write_text("### system\nAnswer from Acme Drive's FAQ.\n### user\n{{ input }}\n")
    suite = yaml.safe_load((folder / "suite.yaml").read_text())
    del suite["target"]
    suite["targets"] = [
        {"name": "bot", "python": "bot:respond"},
        {"name": "gpt", "chat": {"model": "gpt-4o-mini", "prompt": "prompts/answer.md"}},
    ]
    (folder / "sbs.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    listed = _listing(folder)
    with GitHubServer() as server:
        code, fork = _run_local(tmp_path, "mixed", "evals/sbs.yaml", server, prefect_api_url)
    assert code == 0, fork["log"][-4000:]  # 23 of the bot's 25 answers pass the 80 % gate
    assert "skipped" not in fork["steps"]["run"]["outputs"]
    assert _listing(folder) == listed  # the filtered copy is gone
    results = json.loads(Path(fork["outputs"]["results-path"]).read_text())
    assert [t["name"] for t in results["targets"]] == ["bot"]
    assert results["summary"]["cases"] == 25 and results["summary"]["passed_cases"] == 23
    assert fork["outputs"]["passed"] == "true"
    warnings = [a["message"] for a in fork["annotations"] if a["level"] == "warning"]
    assert any(m.startswith("target 'gpt' cannot run without a secret") and "its 25 cases" in m for m in warnings)
    # the reason leads the summary's warnings, escaped as all text from the run
    assert "> ⚠️ Skipped\\: target 'gpt' cannot run without a secret" in fork["summary"]
    assert "Evaluated\\: 'bot'\\." in fork["summary"]


def test_a_pull_request_reuses_the_default_branchs_outputs_from_the_cache(tmp_path: Path, prefect_api_url: str) -> None:
    """The output store lives in the index directory, which the action caches: a push generates every answer and
    saves the cache and the baseline; a pull request that leaves the bot alone restores both and calls it for no
    case, then one that changes the bot generates every case again and is compared with the push's answers."""
    folder = tmp_path / "ws" / "evals"
    shutil.copytree(REPO_ROOT / "examples" / "faq_bot", folder, ignore=shutil.ignore_patterns("__pycache__"))
    pull_request = ("--event-path", str(EVENT))
    with GitHubServer() as server:
        code, push = _run_local(tmp_path, "push", "evals/suite.yaml", server, prefect_api_url, "--event", "push")
        assert code == 0, push["log"][-4000:]
        assert push["steps"]["run"]["outputs"]["baseline-saved"] == "true"
        pushed = json.loads(Path(push["outputs"]["results-path"]).read_text())
        assert (pushed["targets"][0]["requests"], pushed["targets"][0]["cached"]) == (25, 0)

        code, same = _run_local(tmp_path, "same", "evals/suite.yaml", server, prefect_api_url, *pull_request)
        assert code == 0, same["log"][-4000:]
        results = json.loads(Path(same["outputs"]["results-path"]).read_text())
        assert (results["targets"][0]["requests"], results["targets"][0]["cached"]) == (0, 25)
        assert results["comparison"]["pass_rate_delta"] == 0 and results["comparison"]["newly_failing"] == []
        assert same["outputs"]["verdict"] == "inconclusive"  # 25 identical pairs: too few to rule out a small change

        bot = folder / "bot.py"
        bot.write_text(bot.read_text().replace("MIN_SIMILARITY = 0.5 ", "MIN_SIMILARITY = 0.6 "))
        code, changed = _run_local(tmp_path, "changed", "evals/suite.yaml", server, prefect_api_url, *pull_request)
        comments = server.all_comments()
    assert code == 1, changed["log"][-4000:]  # the gate fails: 15 of 25
    results = json.loads(Path(changed["outputs"]["results-path"]).read_text())
    assert (results["targets"][0]["requests"], results["targets"][0]["cached"]) == (25, 0)
    assert changed["outputs"]["verdict"] == "regressed"
    assert len(comments) == 1 and "newly failing: linux" in comments[0]["body"]
    assert "output after: Sorry, I don" in comments[0]["body"]
