"""The run's pre-flight checks (:mod:`evaltasks.cli._checks`): a task-runner spec that cannot work is exit 2 with one
line before Prefect starts, not exit 3 from inside the flow (docs/cli.md#exit-codes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from evaltasks.cli._checks import check_task_runner

GOOD = ["threads", "threads:4", "processes:2", "dask", "dask:2", "dask:tcp://10.0.0.5:8786", "ray", "ray:auto"]
GOOD += ["ray:10.0.0.5:6379", "ray:ray://head:10001"]
BAD = {
    "bogus": "unknown task runner 'bogus'",
    "threads:0": "the number of workers must be a positive integer",
    "processes:x": "the number of workers must be a positive integer",
    "dask:notaurl": "give a positive number of local workers (dask:2) or a scheduler's address",
    "dask:0": "give a positive number of local workers (dask:2)",
    "ray:nothing": "give a Ray cluster's address (ray:HOST:PORT",
    "ray:host:1:2": "give a Ray cluster's address",
}


def _installed(spec: str) -> bool:
    module = {"dask": "prefect_dask", "ray": "prefect_ray"}.get(spec.partition(":")[0])
    return module is None or importlib.util.find_spec(module) is not None


@pytest.mark.parametrize("spec", GOOD)
def test_the_documented_task_runner_specs_pass(spec: str) -> None:
    if not _installed(spec):
        pytest.skip(f"the integration of {spec} is not installed")
    assert check_task_runner(spec) is None


@pytest.mark.parametrize(("spec", "said"), BAD.items())
def test_a_task_runner_spec_that_cannot_work_is_exit_2_with_one_line(
    spec: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from evaltasks import cli

    if not _installed(spec):
        pytest.skip(f"the integration of {spec} is not installed")
    assert said in (check_task_runner(spec) or "")
    (tmp_path / "d.jsonl").write_text('{"actual_output": "one"}\n', encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: s\ndataset: d.jsonl\nmetrics: [{metric: LengthCheckMetric}]\n", encoding="utf-8")
    assert cli.main(["run", str(suite), "--task-runner", spec, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()
