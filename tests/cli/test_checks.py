"""The run's pre-flight checks (:mod:`evaltasks.cli._checks`): a task-runner spec that cannot work is exit 2 with one
line before Prefect starts, not exit 3 from inside the flow (docs/cli.md#exit-codes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from evaltasks.cli._checks import check_task_runner

GOOD = ["threads", "threads:4", "processes:2", "dask", "dask:2", "dask:tcp://10.0.0.5:8786", "ray", "ray:auto"]
GOOD += ["threads:08", "dask:10.0.0.5:8786", "dask:tls://head:8786", "ray:10.0.0.5:6379", "ray:ray://head:10001"]
GOOD += ["ray:[::1]:6379", "ray:ray://[fd00::5]:10001"]
BAD = {
    "bogus": "unknown task runner 'bogus'",
    "threads:0": "the number of workers must be a positive integer",
    "processes:x": "the number of workers must be a positive integer",
    "dask:notaurl": "give a positive number of local workers (dask:2) or a scheduler's address",
    "dask:0": "give a positive number of local workers (dask:2)",
    "ray:nothing": "give a Ray cluster's address (ray:HOST:PORT",
    "ray:host:1:2": "give a Ray cluster's address",
    "threads:²": "the number of workers must be a positive integer",  # a digit to str.isdigit(), not to int()
    "dask:²": "give a positive number of local workers",
    "dask:tcp://": "give a positive number of local workers (dask:2) or a scheduler's address",
    "dask:foo://head:8786": "or a scheduler's address (dask:tcp://HOST:PORT)",
    "dask:tcp://head:99999": "or a scheduler's address",
    "ray:http://head:8265": "give a Ray cluster's address",  # the dashboard's, not the cluster's
    "ray:head:70000": "give a Ray cluster's address",
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


@pytest.mark.slow  # real runs against the session's Prefect server and a temporary one
def test_a_concurrency_limit_the_server_lacks_is_exit_2_before_any_task(tmp_path: Path, prefect_api_url: str) -> None:
    """``--concurrency-limit NAME`` where the run's Prefect server has no such global concurrency limit: exit 2 with
    one line saying how to create it, before any task runs (each embedding task used to fail on it, after Prefect's
    ERROR lines, and the run exited 3). With the limit created, the run passes through it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

    from tests.cli_forkserver import run_cli
    from tests.process_env import REPO_ROOT, subprocess_env

    quickstart = REPO_ROOT / "examples" / "quickstart"
    name = "evaltasks-test-embeddings"
    with get_client(sync_client=True) as client:  # the session's server (PREFECT_API_URL in this process)
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=2))
    served = subprocess_env(tmp_path / "ph", prefect_api_url)
    temporary = subprocess_env(tmp_path / "ph-temporary")
    with get_client(sync_client=True) as client:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=f"{name}-zero", limit=0))
    runs = {
        "zero on PREFECT_API_URL's server": (served, f"{name}-zero", 2),
        "missing on PREFECT_API_URL's server": (served, "no-such-limit", 2),
        "missing on the temporary server": (temporary, "no-such-limit", 2),
        "created": (served, name, 0),
    }
    for label, (env, limit, expected) in runs.items():
        out = tmp_path / label.replace(" ", "-")
        args = ["run", str(quickstart / "suite.yaml"), "--output-dir", str(out), "--index-dir", str(tmp_path / "idx")]
        done = run_cli(*args, "--concurrency-limit", limit, "--quiet", cwd=tmp_path, env=env, timeout=600)
        assert done.returncode == expected, (label, done.stderr)
        if expected == 2:
            assert done.stderr.count("\n") == 1 and "ERROR" not in done.stderr, (label, done.stderr)
            assert done.stderr.startswith(f"evaltasks: error: --concurrency-limit {limit}: "), done.stderr
            assert not (out / "results.json").exists()
            if label.startswith("zero"):  # Prefect refused every task's request for a slot (422): the run exited 3
                assert (
                    f"its limit is 0, so no embedding task could take a slot: raise it (`prefect gcl update {limit}"
                    in done.stderr
                )
                continue
            assert "prefect gcl create no-such-limit --limit 4" in done.stderr
            where = (
                "this run's temporary Prefect server" if env is temporary else "the Prefect server at PREFECT_API_URL"
            )
            assert where in done.stderr, done.stderr
            assert not (out / "results.json").exists()
        else:
            assert (out / "results.json").is_file()
