"""The ``evaluate-suite`` Prefect flow (issue #2 §5, §7) on the real engine: a temporary Prefect server
(``prefect_harness``), the bundled all-MiniLM-L6-v2, the FAISS reference index.

Expected ReferenceMatch scores are computed independently with sentence-transformers + numpy (cosine,
clamped to [0, 1], max); LengthCheck word counts are counted by hand.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "examples" / "quickstart" / "suite.yaml"
TRUTHFULQA_SUITE = REPO / "examples" / "truthfulqa" / "suite.yaml"
TOL = 1e-6

# Words in each quickstart answer, counted by hand (punctuation and ">" are not words; "1969" is).
QUICKSTART_WORDS = {
    "capital-fr": 6, "boiling": 9, "password": 8, "planets": 8, "photosynthesis": 11, "moon": 13,
    "off-topic": 12, "verbose": 38,
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
            return await client.read_artifacts(artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=keys), flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]),
            ))

    return {artifact.key: artifact for artifact in asyncio.run(read())}


def _run_flow(suite: Path, output_dir: Path, index_dir: Path):
    """Run the flow; return (its return value, its flow run id)."""
    from evaltasks.flows.evaluate_suite import evaluate_suite

    state = evaluate_suite(suite_path=str(suite), output_dir=str(output_dir), index_dir=str(index_dir),
                           return_state=True)
    assert state.is_completed(), state
    return state.result(), state.state_details.flow_run_id


def test_flows_are_importable_as_evaltasks_flows() -> None:
    import evaltasks.flows
    from evaltasks.flows.evaluate_suite import evaluate_suite
    from prefect import Flow

    assert evaltasks.flows.evaluate_suite is evaluate_suite
    assert isinstance(evaluate_suite, Flow)
    assert evaluate_suite.name == "evaluate-suite"
    assert Path(evaltasks.flows.__file__).resolve() == REPO / "flows" / "__init__.py"


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
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(tmp_path / "dist"), str(source)],
        check=True, capture_output=True, text=True, timeout=120,
    )
    [wheel] = (tmp_path / "dist").glob("evaltasks-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"evaltasks/flows/__init__.py", "evaltasks/flows/evaluate_suite.py",
            "evaltasks/schema/suite.schema.json"} <= set(names)
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
    assert markdown.data == (tmp_path / "out1" / "summary.md").read_text(encoding="utf-8")

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
    from conftest import subprocess_env
    from fresh_process import cli_in_fresh_process

    def run(name: str) -> tuple[dict, dict]:
        argv = ["run", str(QUICKSTART), "--output-dir", str(tmp_path / name), "--index-dir", str(tmp_path / "index"),
                "--quiet", "--no-cache"]
        done = cli_in_fresh_process(argv, env=subprocess_env(tmp_path / f"home-{name}", prefect_api_url), cwd=tmp_path)
        assert done["exit"] == 0, done
        return done, json.loads((tmp_path / name / "results.json").read_text(encoding="utf-8"))

    cold_run, cold = run("cold")
    assert "torch" in cold_run["imported"]  # the first run loads the model
    warm_run, warm = run("warm")
    assert warm_run["imported"] == []
    assert warm["summary"]["embeddings"] == {"references_computed": 0, "references_reused": 10,
                                             "outputs_computed": 0, "outputs_reused": 8}
    assert [m["score"] for c in warm["cases"] for m in c["metrics"]] == [
        m["score"] for c in cold["cases"] for m in c["metrics"]]


def test_truthfulqa_flow(prefect_harness, st_model, truthfulqa_dir: Path, tmp_path: Path) -> None:
    """The published figures: mean ReferenceMatch 0.63055 ± 0.00005, 50.4 % of the cases reach 0.7."""
    assert (TRUTHFULQA_SUITE.parent / yaml.safe_load(TRUTHFULQA_SUITE.read_text("utf-8"))["dataset"]["path"]
            ).resolve() == (truthfulqa_dir / "davinci_answers.csv").resolve()
    out, _ = _run_flow(TRUTHFULQA_SUITE, tmp_path / "out", tmp_path / "index")
    summary = out["summary"]
    assert summary["cases"] == 817
    rm = summary["metrics"]["ReferenceMatchMetric"]
    assert abs(rm["mean_score"] - 0.63055) <= 0.00005
    assert abs(rm["pass_rate"] - 0.504) < 0.0005
    assert rm["threshold"] == 0.7
    assert summary["pass_rate"] >= 0.5
    assert out["passed"] is True

    # Spot-check individual scores against an independent computation.
    with open(truthfulqa_dir / "davinci_answers.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert len(results["cases"]) == 817
    for i in range(0, 817, 41):
        row, case = rows[i], results["cases"][i]
        refs = [r.strip() for r in row["correct_answers"].split(";") if r.strip()]
        assert case["actual_output"] == row["model_answer"]
        assert abs(case["metrics"][0]["score"] - _rm_score(st_model, row["model_answer"], refs)) <= TOL
