"""The ``evaluate-suite`` Prefect flow (docs/prefect.md#prefect) on the real engine: a temporary Prefect server
(``prefect_harness``), the bundled all-MiniLM-L6-v2, the FAISS reference index.

Expected ReferenceMatch scores are computed independently with sentence-transformers + numpy (cosine,
clamped to [0, 1], max); LengthCheck word counts are counted by hand.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.cli_forkserver import run_cli
from tests.suite_helpers import length_suite

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart" / "suite.yaml"
TOL = 1e-6

# Words in each quickstart answer, counted by hand (punctuation and ">" are not words; "1969" is).
QUICKSTART_WORDS = {
    "capital-fr": 6,
    "boiling": 9,
    "password": 8,
    "planets": 8,
    "photosynthesis": 11,
    "moon": 13,
    "off-topic": 12,
    "verbose": 38,
}


def _rm_score(st_model, output: str, references: list[str]) -> float:
    vectors = st_model.encode([output, *references], convert_to_numpy=True, show_progress_bar=False)
    vectors = vectors.astype(np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return float(np.clip(vectors[1:] @ vectors[0], 0.0, 1.0).max())


def _read_artifacts(flow_run_id, keys: list[str]) -> dict:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    async def read():
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    key=ArtifactFilterKey(any_=keys),
                    flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]),
                )
            )

    return {artifact.key: artifact for artifact in asyncio.run(read())}


def _run_flow(suite: Path, output_dir: Path, index_dir: Path):
    """Run the flow; return (its return value, its flow run id)."""
    from evaltasks.flows.evaluate_suite import evaluate_suite

    state = evaluate_suite(
        suite_path=str(suite), output_dir=str(output_dir), index_dir=str(index_dir), return_state=True
    )
    assert state.is_completed(), state
    return state.result(), state.state_details.flow_run_id


def test_flows_are_importable_as_evaltasks_flows() -> None:
    from prefect import Flow

    import evaltasks.flows
    from evaltasks.flows.evaluate_suite import evaluate_suite

    assert evaltasks.flows.evaluate_suite is evaluate_suite
    assert isinstance(evaluate_suite, Flow)
    assert evaluate_suite.name == "evaluate-suite"
    assert Path(evaltasks.flows.__file__).resolve() == REPO / "flows" / "__init__.py"


@pytest.mark.slow
def test_wheel_installs_flows_as_evaltasks_flows_only(tmp_path: Path) -> None:
    """A plain (non-editable) install ships flows/ as evaltasks.flows and claims no top-level ``flows``."""
    import shutil
    import subprocess
    import sys
    import zipfile

    pytest.importorskip("setuptools", reason="building a wheel offline needs setuptools in the environment")
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for name in ("evaltasks", "flows"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    [wheel] = (tmp_path / "dist").glob("evaltasks-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {
        "evaltasks/flows/__init__.py",
        "evaltasks/flows/evaluate_suite.py",
        "evaltasks/schema/suite.schema.json",
        "evaltasks/index/__init__.py",
        "evaltasks/index/_segments.py",
        "evaltasks/index/_blas.py",
    } <= set(names)
    assert {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")} == {"evaltasks"}


def test_prefect_yaml_entry_points_name_files_in_flows() -> None:
    from prefect.flows import load_flow_from_entrypoint

    config = yaml.safe_load((REPO / "prefect.yaml").read_text(encoding="utf-8"))
    assert config["deployments"]
    for deployment in config["deployments"]:
        file, _, function = deployment["entrypoint"].partition(":")
        assert file.startswith("flows/") and (REPO / file).is_file(), deployment["entrypoint"]
        flow = load_flow_from_entrypoint(f"{REPO / file}:{function}")
        assert flow.name == "evaluate-suite"
        suite_path = deployment.get("parameters", {}).get("suite_path")
        if suite_path:
            assert (REPO / suite_path).is_file(), suite_path


def test_quickstart_flow_scores_index_reuse_and_artifacts(prefect_harness, st_model, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (QUICKSTART.parent / "answers.jsonl").read_text("utf-8").splitlines()]
    unique_refs = {r for row in rows for r in row["references"]}
    assert len(unique_refs) == 10
    expected_rm = {row["id"]: _rm_score(st_model, row["answer"], row["references"]) for row in rows}
    assert all(abs(score - 0.6) > 1e-4 for score in expected_rm.values())
    expected_status = {
        row["id"]: "passed" if expected_rm[row["id"]] >= 0.6 and QUICKSTART_WORDS[row["id"]] <= 30 else "failed"
        for row in rows
    }
    assert [k for k, v in expected_status.items() if v == "failed"] == ["off-topic", "verbose"]

    index_dir = tmp_path / "index"
    first, flow_run_id = _run_flow(QUICKSTART, tmp_path / "out1", index_dir)

    # The returned summary.
    assert first["suite"] == "quickstart"
    assert first["passed"] is True  # 6/8 = 0.75 >= 0.7
    assert Path(first["results_path"]) == tmp_path / "out1" / "results.json"
    summary = first["summary"]
    assert (summary["cases"], summary["passed_cases"], summary["failed_cases"]) == (8, 6, 2)
    assert summary["pass_rate"] == pytest.approx(6 / 8, abs=TOL)
    rm = summary["metrics"]["ReferenceMatchMetric"]
    assert rm["mean_score"] == pytest.approx(sum(expected_rm.values()) / 8, abs=TOL)
    assert rm["pass_rate"] == pytest.approx(sum(s >= 0.6 for s in expected_rm.values()) / 8, abs=TOL)
    lc = summary["metrics"]["LengthCheckMetric"]
    assert lc["mean_score"] == lc["pass_rate"] == pytest.approx(7 / 8, abs=TOL)
    emb = summary["embeddings"]
    assert emb["references_computed"] == len(unique_refs)
    assert emb["references_reused"] == 0
    assert (emb["outputs_computed"], emb["outputs_reused"]) == (8, 0)  # a fresh index: every output embedded

    # The reports, case by case.
    results = json.loads((tmp_path / "out1" / "results.json").read_text(encoding="utf-8"))
    assert results["suite_sha256"] == hashlib.sha256(QUICKSTART.read_bytes()).hexdigest()
    assert results["summary"] == summary
    for case, row in zip(results["cases"], rows):
        assert case["id"] == row["id"]
        assert case["status"] == expected_status[row["id"]]
        rm_result, lc_result = case["metrics"]
        assert abs(rm_result["score"] - expected_rm[row["id"]]) <= TOL
        assert rm_result["success"] is (expected_rm[row["id"]] >= 0.6)
        assert lc_result["evaluation_log"]["length"] == QUICKSTART_WORDS[row["id"]]
    for name in ("junit.xml", "summary.md"):
        assert (tmp_path / "out1" / name).is_file()

    # The artifacts: a per-metric table and the markdown summary.
    artifacts = _read_artifacts(flow_run_id, ["quickstart-metrics", "quickstart-summary"])
    assert set(artifacts) == {"quickstart-metrics", "quickstart-summary"}
    table = artifacts["quickstart-metrics"]
    assert table.type == "table"
    data = json.loads(table.data) if isinstance(table.data, str) else table.data
    by_metric = {row["metric"]: row for row in data}
    assert set(by_metric) == {"ReferenceMatchMetric", "LengthCheckMetric"}
    assert by_metric["ReferenceMatchMetric"]["mean_score"] == pytest.approx(rm["mean_score"], abs=1e-6)
    assert (by_metric["ReferenceMatchMetric"]["passed"], by_metric["ReferenceMatchMetric"]["failed"]) == (6, 2)
    assert (by_metric["LengthCheckMetric"]["passed"], by_metric["LengthCheckMetric"]["failed"]) == (7, 1)
    markdown = artifacts["quickstart-summary"]
    assert markdown.type == "markdown"
    # summary.md with text charts instead of Mermaid (Prefect's UI renders none): the same up to the folded
    # parts, which follow under "## More" (Prefect shows <details> open)
    summary_md = (tmp_path / "out1" / "summary.md").read_text(encoding="utf-8")
    assert markdown.data.startswith(summary_md.split("<details>")[0]) and "<details>" not in markdown.data
    assert "```mermaid" in summary_md and "```mermaid" not in markdown.data and "```text" in markdown.data

    # A second run over the same index embeds no reference and no output, and scores the same.
    second, _ = _run_flow(QUICKSTART, tmp_path / "out2", index_dir)
    emb2 = second["summary"]["embeddings"]
    assert (emb2["references_computed"], emb2["outputs_computed"]) == (0, 0)
    assert (emb2["references_reused"], emb2["outputs_reused"]) == (len(unique_refs), 8)
    results2 = json.loads((tmp_path / "out2" / "results.json").read_text(encoding="utf-8"))
    for case1, case2 in zip(results["cases"], results2["cases"]):
        for m1, m2 in zip(case1["metrics"], case2["metrics"]):
            assert abs(m1["score"] - m2["score"]) <= TOL and m1["success"] == m2["success"]


def test_cli_warm_run_with_no_cache_loads_no_model(prefect_api_url, tmp_path: Path) -> None:
    """`evaltasks run --no-cache` over an index a first run filled (a new PREFECT_HOME: no task cache at all)
    embeds nothing: the model is not loaded (torch is never imported), every output is reused from the index,
    and the scores are bitwise those of the first run."""
    from tests.fresh_process import cli_in_fresh_process
    from tests.process_env import subprocess_env

    def run(name: str) -> tuple[dict, dict]:
        argv = [
            "run",
            str(QUICKSTART),
            "--output-dir",
            str(tmp_path / name),
            "--index-dir",
            str(tmp_path / "index"),
            "--quiet",
            "--no-cache",
        ]
        done = cli_in_fresh_process(argv, env=subprocess_env(tmp_path / f"home-{name}", prefect_api_url), cwd=tmp_path)
        assert done["exit"] == 0, done
        return done, json.loads((tmp_path / name / "results.json").read_text(encoding="utf-8"))

    cold_run, cold = run("cold")
    assert "torch" in cold_run["imported"]  # the first run loads the model
    warm_run, warm = run("warm")
    assert warm_run["imported"] == []
    assert warm["summary"]["embeddings"] == {
        "references_computed": 0,
        "references_reused": 10,
        "outputs_computed": 0,
        "outputs_reused": 8,
    }
    assert [m["score"] for c in warm["cases"] for m in c["metrics"]] == [
        m["score"] for c in cold["cases"] for m in c["metrics"]
    ]


# -- a failed gate ends the flow run Failed; run history, drift events, the documented automation ---------------------


def _flow_run(flow_run_id):
    from prefect.client.orchestration import get_client

    async def read():
        async with get_client() as client:
            return await client.read_flow_run(flow_run_id)

    return asyncio.run(read())


def test_a_failed_gate_ends_the_flow_run_failed_with_the_verdict(prefect_harness, tmp_path: Path) -> None:
    """A failing gate: the run's state is Failed with the verdict as its message (read back from the server), a
    direct call raises GateFailed carrying the returned dict; a passing gate stays Completed."""
    from evaltasks.errors import GateFailed
    from evaltasks.flows.evaluate_suite import evaluate_suite

    failing = length_suite(tmp_path / "f", [3, 3, 9, 9], name="gate-fails", gate="gate: {min_pass_rate: 0.9}")
    state = evaluate_suite(
        suite_path=str(failing), output_dir=str(tmp_path / "out"), index_dir=str(tmp_path / "i"), return_state=True
    )
    assert state.is_failed() and state.message == "FAILED: pass rate 50.00% (2 of 4 cases), gate 90.00%"
    stored = _flow_run(state.state_details.flow_run_id)
    assert stored.state.type.value == "FAILED" and stored.state.message == state.message
    with pytest.raises(GateFailed) as raised:
        state.result()
    assert raised.value.result["passed"] is False and raised.value.result["summary"]["passed_cases"] == 2
    assert json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))["passed"] is False
    with pytest.raises(GateFailed, match=r"^gate failed: pass rate 50\.00% below 90\.00%$"):
        evaluate_suite(suite_path=str(failing), output_dir=str(tmp_path / "out2"), index_dir=str(tmp_path / "i"))

    passing = length_suite(tmp_path / "p", [3, 3, 9, 9], name="gate-holds", gate="gate: {min_pass_rate: 0.5}")
    state = evaluate_suite(
        suite_path=str(passing), output_dir=str(tmp_path / "out3"), index_dir=str(tmp_path / "i"), return_state=True
    )
    assert state.is_completed() and state.result()["passed"] is True
    assert _flow_run(state.state_details.flow_run_id).state.type.value == "COMPLETED"


def test_the_cli_keeps_its_exit_codes_and_history_prints_the_trend(prefect_api_url, tmp_path: Path) -> None:
    """`evaltasks run` on a failing gate (a Failed flow run) still exits 1 and on a passing one 0, each recorded
    with --history-dir; `evaltasks history` prints both runs, and exits 2 where there is no history."""
    import subprocess

    from tests.process_env import subprocess_env

    suite = length_suite(tmp_path / "s", [3, 3, 9, 9], name="cli-history", gate="gate: {min_pass_rate: 0.9}")
    env = subprocess_env(tmp_path / "home", prefect_api_url)
    env.pop("EVALTASKS_HISTORY_DIR", None)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return run_cli(*args, cwd=tmp_path, env=env, timeout=600)

    run = [
        "run",
        str(suite),
        "--index-dir",
        str(tmp_path / "i"),
        "--history-dir",
        str(tmp_path / "h"),
        "--no-server",
        "--quiet",
    ]
    failed = cli(*run, "--output-dir", str(tmp_path / "o1"))
    assert failed.returncode == 1, failed.stderr
    assert "Traceback" not in failed.stderr
    (tmp_path / "s" / "d.jsonl").write_text(
        "".join(json.dumps({"id": f"c{i}", "actual_output": "a b"}) + "\n" for i in range(4)), encoding="utf-8"
    )
    passed = cli(*run, "--output-dir", str(tmp_path / "o2"))
    assert passed.returncode == 0, passed.stderr

    records = [json.loads(line) for line in (tmp_path / "h" / "cli-history.jsonl").read_text("utf-8").splitlines()]
    assert [(r["passed"], r["passed_cases"], r["cases"]) for r in records] == [(False, 2, 4), (True, 4, 4)]
    assert records[1]["metrics"]["LengthCheckMetric"]["config"] == {
        "metric": "LengthCheckMetric",
        "max_length": 5,
        "unit": "words",
    }
    assert all(r["flow_run_id"] for r in records) and records[0]["flow_run_id"] != records[1]["flow_run_id"]
    shown = cli("history", str(suite), "--history-dir", str(tmp_path / "h"))
    assert shown.returncode == 0, shown.stderr
    assert "50.0%" in shown.stdout and "100.0%" in shown.stdout and "FAILED" in shown.stdout
    as_json = cli("history", str(suite), "--history-dir", str(tmp_path / "h"), "--json", "--last", "1")
    assert [json.loads(line)["passed_cases"] for line in as_json.stdout.splitlines()] == [4]
    none = cli("history", str(suite), "--history-dir", str(tmp_path / "nothing"))
    assert none.returncode == 2 and "no run history of suite 'cli-history'" in none.stderr
    assert "Traceback" not in none.stderr


def _automation_code() -> str:
    """The automation's Python block in docs/history.md (the block after ``<!-- automation -->``)."""
    text = (REPO / "docs" / "history.md").read_text(encoding="utf-8")
    block = text.split("<!-- automation -->", 1)[1]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


def test_drift_emits_an_event_the_documented_automation_sends_to_a_webhook(prefect_harness, tmp_path: Path) -> None:
    """Two recorded runs, the second much worse: the flow returns the drift (Fisher exact, checked by hand), the
    history holds both runs, the history artifact shows them, the server's events API has the
    ``evaltasks.suite.regressed`` event with its payload, and the automation created by docs/history.md's own code
    (the test server runs Prefect's triggers and actions services) calls a webhook on 127.0.0.1 with it."""
    import http.server
    import math
    import threading
    import time
    import uuid

    from prefect.client.orchestration import get_client

    from evaltasks.flows.evaluate_suite import evaluate_suite

    received: list[dict] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            received.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        namespace: dict = {}
        import os

        os.environ["EVALTASKS_ALERT_URL"] = f"http://127.0.0.1:{server.server_address[1]}/hook"
        try:
            exec(compile(_automation_code(), "docs/history.md", "exec"), namespace)  # noqa: S102
        finally:
            del os.environ["EVALTASKS_ALERT_URL"]
        assert namespace["automation"].id is not None

        name = f"drifting-{uuid.uuid4().hex[:8]}"
        history = "history: {dir: hist, window: 3}\n"
        suite = length_suite(tmp_path / "s", [3] * 40, name=name, history=history)
        first = evaluate_suite(suite_path=str(suite), output_dir=str(tmp_path / "o1"), index_dir=str(tmp_path / "i"))
        assert first["drift"] is None  # nothing to compare with yet
        length_suite(tmp_path / "s", [3] * 20 + [9] * 20, name=name, history=history)  # half now fail
        state = evaluate_suite(
            suite_path=str(suite), output_dir=str(tmp_path / "o2"), index_dir=str(tmp_path / "i"), return_state=True
        )
        second = state.result()
        drift = second["drift"]
        assert drift["verdict"] == "regressed" and drift["window"] == 1
        overall = drift["tests"][0]
        # Fisher exact on [[20, 20], [40, 0]] by hand: 60 passes among 80 cases, 40 per run; the observed table (20
        # of the passes in this run) is the least likely one on its side, and its mirror (40) equally likely
        one_side = math.comb(60, 20) * math.comb(20, 20) / math.comb(80, 40)
        assert overall["p_value"] == pytest.approx(2 * one_side, rel=1e-9)
        assert (overall["before"], overall["after"], overall["test"]) == (1.0, 0.5, "Fisher exact")
        assert {(t["name"], t["statistic"]) for t in drift["tests"] if t["verdict"] == "regressed"} == {
            ("overall", "pass_rate"),
            ("LengthCheckMetric", "pass_rate"),
            ("LengthCheckMetric", "mean_score"),
        }
        records = [json.loads(line) for line in (tmp_path / "s" / "hist" / f"{name}.jsonl").read_text().splitlines()]
        assert [r["passed_cases"] for r in records] == [40, 20]
        assert records[1]["drift"] == ["overall", "LengthCheckMetric pass_rate", "LengthCheckMetric mean_score"]
        assert records[0]["metrics"]["LengthCheckMetric"]["score_sd"] == 0.0

        flow_run_id = state.state_details.flow_run_id
        artifact = _read_artifacts(flow_run_id, [f"{name}-history"])[f"{name}-history"]
        assert artifact.type == "markdown" and "`####################`" in artifact.data
        assert "`##########..........`" in artifact.data and "mermaid" not in artifact.data

        async def events() -> list:
            async with get_client() as client:
                response = await client._client.post(
                    "/events/filter",
                    json={
                        "filter": {
                            "event": {"name": ["evaltasks.suite.regressed"]},
                            "any_resource": {"id": [f"evaltasks.suite.{name}"]},
                            "occurred": {"since": "2000-01-01T00:00:00Z"},
                        },
                        "limit": 50,
                    },
                )
                response.raise_for_status()
                return response.json()["events"]

        deadline, found = time.monotonic() + 180, []
        while time.monotonic() < deadline and len(found) < 3:
            found = asyncio.run(events())
            time.sleep(0.5)
        assert len(found) == 3, found
        by_metric = {(e["payload"]["metric"], e["payload"]["statistic"]): e for e in found}
        event = by_metric[("overall", "pass_rate")]
        assert event["resource"] == {"prefect.resource.id": f"evaltasks.suite.{name}", "prefect.resource.name": name}
        assert event["payload"]["before"] == 1.0 and event["payload"]["after"] == 0.5
        assert event["payload"]["p_value"] == pytest.approx(2 * one_side, rel=1e-9)
        assert (event["payload"]["test"], event["payload"]["window"]) == ("Fisher exact", 1)
        assert event["payload"]["results_path"] == str((tmp_path / "o2" / "results.json").resolve())
        assert any(r.get("prefect.resource.id") == f"prefect.flow-run.{flow_run_id}" for r in event["related"])

        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len([r for r in received if name in r.get("text", "")]) < 3:
            time.sleep(0.5)
        texts = sorted(r["text"] for r in received if name in r.get("text", ""))
        assert len(texts) == 3, received
        assert f"{name}: overall pass_rate 1.0 -> 0.5 (Fisher exact, p = " in " ".join(texts)
    finally:
        server.shutdown()


def test_gate_failure_messages_name_each_verdict() -> None:
    """The Failed state's message (results.json gate.message) for each way a gate fails, built from the summary,
    the suite's gate and the comparison alone (no run needed)."""
    from evaltasks.engine.compare import ChangeTest, Comparison
    from evaltasks.engine.lifecycle import gate_message
    from evaltasks.inputs.suite import Gate
    from evaltasks.results import EvaluationResult, EvaluationSummary

    def result(cases: int, passed: int, budget_skipped: int = 0) -> EvaluationResult:
        summary = EvaluationSummary(
            cases=cases,
            passed_cases=passed,
            failed_cases=cases - passed,
            errored_cases=0,
            skipped_cases=0,
            pass_rate=passed / cases if cases else 0.0,
            metrics={},
            budget_skipped=budget_skipped,
        )
        return EvaluationResult(test_results=[], summary=summary)

    assert gate_message(result(8, 4), Gate(min_pass_rate=0.9), None) == "gate failed: pass rate 50.00% below 90.00%"
    assert gate_message(result(8, 8), Gate(min_pass_rate=0.9), None) is None
    assert gate_message(result(0, 0), Gate(min_pass_rate=0.9), None) == "gate failed: no test cases were evaluated"
    assert gate_message(result(8, 8, budget_skipped=3), Gate(min_pass_rate=0.9), None) == (
        "gate failed: the --max-cost budget ran out: 3 of 0 case × metric results were not judged"
    )
    test = ChangeTest(
        statistic="pass_rate",
        test="exact McNemar",
        paired_cases=800,
        baseline=0.81,
        current=0.74,
        delta=-0.07,
        p_value=0.0003,
        worse=60,
        better=4,
        verdict="regressed",
    )
    sentence = "pass rate 81.00% → 74.00% (-7.00 points, p = 0.0003)"
    regressed = Comparison(
        baseline="main",
        tolerance=0.01,
        pass_rate_test=test,
        verdict="regressed",
        regressed=True,
        regressions=[sentence],
    )
    assert gate_message(result(800, 592), Gate(min_pass_rate=0.5, fail_on="regression"), regressed) == (
        f"gate failed: regressed since the baseline: {sentence}"
    )
    assert gate_message(result(800, 592), Gate(min_pass_rate=0.5, fail_on="min_pass_rate"), regressed) is None
    assert gate_message(result(800, 592), Gate(min_pass_rate=0.9, fail_on="either"), regressed) == (
        f"gate failed: pass rate 74.00% below 90.00%; regressed since the baseline: {sentence}"
    )
