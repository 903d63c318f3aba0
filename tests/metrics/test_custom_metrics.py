"""Users' own metrics (``module:Class`` and entry points), per-case error isolation, and the suite schema union.

Everything runs for real: the CLI in subprocesses against the session's Prefect server, a real installed
distribution (a ``*.dist-info`` directory on PYTHONPATH is what importlib.metadata finds), Prefect's task cache.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest
import yaml

from evaltasks import BaseMetric, EvalTestCase, LengthCheckMetric, MetricResult, evaluate_sync
from evaltasks.engine.evaluate import score_metric_batch
from evaltasks.errors import ConfigError, Problem
from evaltasks.inputs.suite import load_suite, metric_arguments_schema, suite_json_schema
from tests.cli_forkserver import run_cli
from tests.process_env import subprocess_env

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "custom_metric"
SCHEMA_FILE = REPO / "evaltasks" / "schema" / "suite.schema.json"

# A user's metric module: scores 1.0 when the output contains WORD; raises on outputs containing "boom" (and on
# every output while the file tmp/FAIL exists), for the error-isolation and cache tests.
USER_MODULE = '''
from pathlib import Path
from evaltasks import BaseMetric, MetricResult

WORD = "{word}"


class ContainsWord(BaseMetric):
    """1.0 when the output contains WORD."""

    def __init__(self, threshold: float = 1.0, *, name: str | None = None) -> None:
        super().__init__(threshold, name=name)

    def score_batch(self, cases, vectors=None):
        if Path(__file__).with_name("FAIL").exists():
            raise RuntimeError("told to fail")
        out = []
        for case in cases:
            if "boom" in case.actual_output:
                raise ValueError(f"cannot score {{case.actual_output!r}}")
            out.append(MetricResult.scored(self.name, float(WORD in case.actual_output), self.threshold, "r", {{}}))
        return out
'''


@pytest.fixture
def isolated_imports(monkeypatch: pytest.MonkeyPatch):
    """Undo what loading a user's metric does to this process: sys.path, PYTHONPATH, imported modules."""
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.syspath_prepend(str(REPO))  # snapshots sys.path, restored afterwards
    import cloudpickle

    before = set(sys.modules)
    by_value = set(cloudpickle.list_registry_pickle_by_value())
    yield monkeypatch
    for module in set(cloudpickle.list_registry_pickle_by_value()) - by_value:
        cloudpickle.unregister_pickle_by_value(sys.modules[module])
    for module in set(sys.modules) - before:
        if not module.startswith(("evaltasks", "prefect", "jsonschema")):
            sys.modules.pop(module, None)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _cli(
    cwd: Path, *args: str, api_url: str, extra_env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    env = subprocess_env(cwd / "prefect-home", api_url)
    env.update(extra_env or {})
    return run_cli(*args, cwd=cwd, env=env, timeout=timeout)


def _scores(results_json: Path) -> dict[str, dict[str, tuple]]:
    data = json.loads(results_json.read_text(encoding="utf-8"))
    return {
        case["id"]: {m["name"]: (m["score"], m["status"], m.get("error")) for m in case["metrics"]}
        for case in data["cases"]
    }


def _brand_score(answer: str) -> float:
    """The example's rule computed another way: word tokens vs. the banned set, and the sign-off by endswith."""
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", answer)}
    checks = [not words & {"cheap", "guarantee"}, answer.rstrip().endswith("Acme Support")]
    return sum(checks) / 2


# -- the worked example through the CLI -------------------------------------------------------------------------


def test_example_custom_metric_runs_through_the_cli(tmp_path: Path, prefect_api_url: str) -> None:
    """`evaltasks run examples/custom_metric/suite.yaml` from another directory: brand_checks is imported from
    the suite's folder; every score equals the rule computed independently; the gate passes (2 of 6 >= 0.3)."""
    proc = _cli(tmp_path, "run", str(EXAMPLE / "suite.yaml"), "--output-dir", "out", "--quiet", api_url=prefect_api_url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    scores = _scores(tmp_path / "out" / "results.json")
    answers = {
        json.loads(line)["id"]: json.loads(line)["answer"]
        for line in (EXAMPLE / "answers.jsonl").read_text(encoding="utf-8").splitlines()
    }
    assert set(scores) == set(answers)
    for case_id, answer in answers.items():
        score, status, _ = scores[case_id]["BrandVoiceMetric"]
        assert score == _brand_score(answer), case_id
        assert status == ("passed" if score == 1.0 else "failed")
    assert [scores[i]["BrandVoiceMetric"][0] for i in answers] == [1.0, 0.5, 0.0, 1.0, 0.5, 0.5]


@pytest.mark.parametrize("runner", ["processes:2", "dask:2"])
def test_example_custom_metric_in_worker_processes(tmp_path: Path, prefect_api_url: str, runner: str) -> None:
    """The `processes` task runner and a Dask LocalCluster: metric instances are pickled to worker processes
    (brand_checks by value for the process pool; Dask's spawned workers inherit sys.path, the suite's folder
    last); scores equal the in-process ones."""
    if runner.startswith("dask"):
        pytest.importorskip("prefect_dask")
    proc = _cli(
        tmp_path,
        "run",
        str(EXAMPLE / "suite.yaml"),
        "--output-dir",
        "out",
        "--quiet",
        "--no-cache",
        "--task-runner",
        runner,
        "--batch-size",
        "2",
        api_url=prefect_api_url,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    scores = _scores(tmp_path / "out" / "results.json")
    assert [s["BrandVoiceMetric"][0] for s in scores.values()] == [1.0, 0.5, 0.0, 1.0, 0.5, 0.5]


# -- entry points -----------------------------------------------------------------------------------------------


def _distribution(site: Path, name: str, entry_points: str) -> None:
    """A real installed distribution under ``site``: METADATA + entry_points.txt in ``NAME-1.0.dist-info``."""
    info = site / f"{name}-1.0.dist-info"
    _write(info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    _write(info / "entry_points.txt", entry_points)


def test_entry_point_metric_through_the_cli(tmp_path: Path, prefect_api_url: str) -> None:
    """A suite names `acme-contains` (an entry point of the installed distribution acme-metrics); its module lives
    in site-packages, not next to the suite. A second entry point whose module fails to import is a located
    config error (exit 2) naming the distribution."""
    site = tmp_path / "site"
    _write(site / "acme_metrics.py", USER_MODULE.format(word="Paris"))
    _write(site / "broken_metrics.py", "import no_such_dependency_xyz\n")
    _distribution(site, "acme-metrics", "[evaltasks.metrics]\nacme-contains = acme_metrics:ContainsWord\n")
    _distribution(site, "broken-metrics", "[evaltasks.metrics]\nbroken = broken_metrics:Whatever\n")
    suites = tmp_path / "suites"
    _write(suites / "data.jsonl", '{"id": "a", "answer": "Paris is in France."}\n{"id": "b", "answer": "Lyon."}\n')
    _write(
        suites / "suite.yaml",
        """\
        name: ep
        dataset: {path: data.jsonl, fields: {id: id, actual_output: answer}}
        metrics:
          - {metric: acme-contains, name: paris}
        gate: {min_pass_rate: 0.5}
        """,
    )
    env = {"PYTHONPATH": str(site)}
    proc = _cli(
        tmp_path, "run", "suites/suite.yaml", "--output-dir", "out", "--quiet", api_url=prefect_api_url, extra_env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _scores(tmp_path / "out" / "results.json") == {
        "a": {"paris": (1.0, "passed", None)},
        "b": {"paris": (0.0, "failed", None)},
    }

    _write(suites / "bad.yaml", (suites / "suite.yaml").read_text().replace("acme-contains, name: paris", "broken"))
    proc = _cli(tmp_path, "run", "suites/bad.yaml", "--output-dir", "out2", api_url=prefect_api_url, extra_env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "metrics[0]" in proc.stderr and "broken-metrics" in proc.stderr
    assert "ModuleNotFoundError: No module named 'no_such_dependency_xyz'" in proc.stderr

    _write(suites / "nowhere.yaml", (suites / "suite.yaml").read_text().replace("acme-contains", "nowhere_q:X"))
    proc = _cli(tmp_path, "run", "suites/nowhere.yaml", "--output-dir", "out3", api_url=prefect_api_url)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"module 'nowhere_q' not found (looked in the suite's directory {suites.resolve()}" in proc.stderr


# -- resolution errors: located config problems ------------------------------------------------------------------


@pytest.mark.slow
def test_user_metric_problems_are_located(tmp_path: Path, isolated_imports: pytest.MonkeyPatch) -> None:
    _write(
        tmp_path / "checks.py",
        """\
        from evaltasks import BaseMetric
        NOT_A_METRIC = 3
        class Plain:
            pass
        class Needs(BaseMetric):
            def __init__(self, threshold: float = 1.0, *, word: str, name=None):
                super().__init__(threshold, name=name)
            def score_batch(self, cases, vectors=None):
                return []
        class Crashes(Needs):
            def __init__(self, threshold: float = 1.0, *, name=None):
                raise RuntimeError("no config file")
        """,
    )
    _write(tmp_path / "d.jsonl", '{"actual_output": "x"}\n')
    suite = _write(
        tmp_path / "suite.yaml",
        """\
        name: s
        dataset: {path: d.jsonl}
        metrics:
          - {metric: "no_such_module_q:X"}
          - {metric: "checks:Nedds"}
          - {metric: "checks:NOT_A_METRIC"}
          - {metric: "checks:Plain"}
          - {metric: "checks:Needs"}
          - {metric: "checks:Needs", word: a, wrod: b}
          - {metric: "checks:Crashes"}
          - {metric: "checks:Needs", word: a}
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_suite(suite)
    problems = {p.location: p for p in info.value.problems}
    assert set(problems) == {f"metrics[{i}]" for i in range(7)}
    assert problems["metrics[0]"].field == "metric"
    assert (
        f"module 'no_such_module_q' not found (looked in the suite's directory {tmp_path.resolve()} and sys.path"
    ) in problems["metrics[0]"].message
    assert "has no attribute 'Nedds' (did you mean 'Needs'?)" in problems["metrics[1]"].message
    assert "is not a subclass of evaltasks.BaseMetric: it is a value of type int (3)" in problems["metrics[2]"].message
    assert "it is the class checks.Plain" in problems["metrics[3]"].message
    assert (problems["metrics[4]"].field, problems["metrics[4]"].message) == ("word", "is required")
    assert problems["metrics[5]"] == Problem(
        str(suite),
        "metrics[5]",
        "wrod",
        "unknown argument 'wrod' for checks:Needs (did you mean 'word'?); accepted: threshold, word, name",
    )
    assert problems["metrics[6]"].message == "constructing checks:Crashes failed: RuntimeError: no config file"


@pytest.mark.slow
def test_a_raising_validate_case_exits_2_naming_metric_row_and_exception(
    tmp_path: Path, isolated_imports: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the CLI: a user's ``validate_case`` that raises is a located input error (exit 2, no traceback;
    it used to abort the run with exit 3), reported with the other metrics' problems. One raising the same way
    on every row is listed once with a count; different exceptions are listed up to 5 per metric, the rest
    counted."""
    from evaltasks import cli

    _write(
        tmp_path / "checks.py",
        """\
        from evaltasks import BaseMetric, MetricResult
        class BrandVoiceMetric(BaseMetric):
            def __init__(self, threshold: float = 0.5, *, name=None):
                super().__init__(threshold, name=name)
            def validate_case(self, case):
                raise RuntimeError("validate broke")
            def score_batch(self, cases, vectors=None):
                return [MetricResult.scored(self.name, 1.0, self.threshold, "ok", {}) for _ in cases]
        class Picky(BrandVoiceMetric):
            def validate_case(self, case):
                raise ValueError(f"cannot check {case.actual_output!r}")
        """,
    )
    rows = "".join(f'{{"actual_output": "o{i}", "expected_output": "o{i}"}}\n' for i in range(1, 8))
    _write(tmp_path / "d.jsonl", rows.replace(', "expected_output": "o2"', ""))
    suite = _write(
        tmp_path / "suite.yaml",
        """\
        name: s
        dataset: {path: d.jsonl}
        metrics:
          - metric: ExactMatchMetric
          - metric: checks:BrandVoiceMetric
          - {metric: "checks:Picky", name: picky}
        """,
    )
    code = cli.main(["run", str(suite), "--output-dir", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert "Traceback" not in captured.err + captured.out
    source = tmp_path / "d.jsonl"
    picky = "Picky.validate_case (metric 'picky') raised ValueError: cannot check"
    assert captured.err.splitlines() == [
        "evaltasks: error: invalid dataset: 8 problem(s)",
        f"  - {source}, line 1: BrandVoiceMetric.validate_case raised RuntimeError: validate broke "
        "(also on 6 more case(s))",
        f"  - {source}, line 1: {picky} 'o1'",
        f"  - {source}, line 2: {picky} 'o2'",
        f"  - {source}, line 2: field 'expected_output' is missing (needed by ExactMatchMetric)",
        f"  - {source}, line 3: {picky} 'o3'",
        f"  - {source}, line 4: {picky} 'o4'",
        f"  - {source}, line 5: {picky} 'o5'",
        f"  - {source}, line 6: {picky} 'o6' (and 1 more failure(s) not listed)",
    ]
    assert not (tmp_path / "out").exists()


def test_validate_case_failures_through_the_python_api() -> None:
    """``evaluate_sync``: a raising ``validate_case`` (message-less too) and one returning something other than
    ``(field, message)`` pairs are InputError problems located by item, beside the other cases' problems; a
    field two metrics need is one problem naming both."""
    from evaltasks import ExactMatchMetric, InputError, SemanticSimilarityMetric

    class Raises(_Raises):
        def validate_case(self, case):
            if case.actual_output == "boom":
                raise KeyError
            return [] if case.actual_output != "none" else 42

    cases = [
        EvalTestCase(actual_output="boom", expected_output="x"),
        EvalTestCase(actual_output="a"),
        EvalTestCase(actual_output="none", expected_output="x"),
    ]
    metrics = [ExactMatchMetric(), Raises(), SemanticSimilarityMetric(embedding_provider="local")]
    with pytest.raises(InputError) as info:
        evaluate_sync(cases, metrics)
    assert [str(p) for p in info.value.problems] == [
        "<python>, item 0: Raises.validate_case raised KeyError",
        "<python>, item 1: field 'expected_output' is missing (needed by ExactMatchMetric, SemanticSimilarityMetric)",
        "<python>, item 2: Raises.validate_case returned 42, not a list of (field, message) pairs",
    ]


# -- per-case error isolation ------------------------------------------------------------------------------------


class _Raises(BaseMetric):
    """Scores 1.0, but raises on outputs containing "boom"."""

    def __init__(self, threshold: float = 0.5, *, name: str | None = None) -> None:
        super().__init__(threshold, name=name)
        self.calls = 0

    def score_batch(self, cases, vectors=None):
        self.calls += 1
        for case in cases:
            if "boom" in case.actual_output:
                raise ZeroDivisionError(f"bad case {case.actual_output}")
        return [MetricResult.scored(self.name, 1.0, self.threshold, "ok", {}) for _ in cases]


class _Miscounts(BaseMetric):
    """Returns one result too few, or a dict instead of a result."""

    def __init__(self, mode: str, *, name: str | None = None) -> None:
        super().__init__(0.5, name=name)
        self.mode = mode

    def score_batch(self, cases, vectors=None):
        good = [MetricResult.scored(self.name, 1.0, self.threshold, "ok", {}) for _ in cases]
        return good[:-1] if self.mode == "short" else [*good[:-1], {"score": 1.0}]


def test_a_raising_metric_errors_only_the_cases_that_raise() -> None:
    """Through the Python API: a user's metric raising on 2 of 5 cases errors those 2 (`ExceptionType: message`),
    scores the other 3, and LengthCheck beside it scores all 5."""
    outputs = ["fine", "boom 1", "ok", "boom 2", "good"]
    cases = [EvalTestCase(actual_output=o) for o in outputs]
    raising = _Raises(name="mine")
    result = evaluate_sync(cases, [raising, LengthCheckMetric(max_length=100)], batch_size=5)
    mine = [case.metrics[0] for case in result.test_results]
    assert [m.status for m in mine] == ["passed", "errored", "passed", "errored", "passed"]
    assert [m.error for m in mine] == [
        None,
        "ZeroDivisionError: bad case boom 1",
        None,
        "ZeroDivisionError: bad case boom 2",
        None,
    ]
    assert [m.score for m in mine] == [1.0, None, 1.0, None, 1.0]
    assert all(case.metrics[1].status == "passed" for case in result.test_results)
    assert result.summary.metrics["mine"].errored == 2 and result.summary.metrics["mine"].passed == 3
    assert raising.calls == 1 + 5  # the batch, then each of its cases once


@pytest.mark.parametrize(
    ("mode", "errors"),
    [
        (
            "short",
            [
                "metric m (_Miscounts) returned 2 results for 3 cases: score_batch must return one MetricResult "
                "per case, in order"
            ]
            * 3,
        ),
        ("dict", [None, None, "metric m (_Miscounts) returned a dict instead of a MetricResult"]),
    ],
)
def test_a_metric_returning_the_wrong_results_errors_with_a_clear_message(mode: str, errors: list) -> None:
    cases = [EvalTestCase(actual_output=o) for o in ("a", "b", "c")]
    results = score_metric_batch(_Miscounts(mode, name="m"), cases, None)
    assert [r.error for r in results] == errors
    assert [r.status for r in results] == ["errored" if e else "passed" for e in errors]


@pytest.mark.parametrize("bad", [float("nan"), 1.5, -0.5, float("inf"), float("-inf")])
def test_metric_result_scored_rejects_a_score_or_threshold_out_of_0_1(bad: float) -> None:
    """docs/metrics/custom.md#your-own-metrics: a score and a threshold are numbers in [0, 1]; NaN (for which every comparison is False), inf,
    1.5 and -0.5 are ValueErrors naming the metric and the value; 0 and 1 are fine."""
    with pytest.raises(ValueError) as score_error:
        MetricResult.scored("BrandVoiceMetric", bad, 0.5, "r", {})
    assert str(score_error.value) == f"BrandVoiceMetric returned score {bad}: a score must be a number in [0, 1]"
    with pytest.raises(ValueError) as threshold_error:
        MetricResult.scored("BrandVoiceMetric", 0.5, bad, "r", {})
    assert str(threshold_error.value) == (
        f"BrandVoiceMetric returned threshold {bad}: a threshold must be a number in [0, 1]"
    )
    assert [MetricResult.scored("m", s, 1.0, "r", {}).status for s in (0.0, 1.0, 1)] == ["failed", "passed", "passed"]


class _ReturnsBuilt(BaseMetric):
    """Returns results built without MetricResult.scored: validated (MetricResult(...)) or model_construct."""

    def __init__(self, threshold: float = 0.5, *, name: str | None = None) -> None:
        super().__init__(threshold, name=name)

    def score_batch(self, cases, vectors=None):
        out = []
        for i, case in enumerate(cases):
            build = MetricResult if i % 2 else MetricResult.model_construct
            score = float(case.actual_output)
            out.append(
                build(
                    name=self.name,
                    score=score,
                    threshold=self.threshold,
                    success=score >= 0.5,
                    reason="r",
                    status="passed" if score >= 0.5 else "failed",
                )
            )
        return out


def test_results_built_another_way_with_a_score_out_of_0_1_are_errored() -> None:
    """score_metric_batch checks every returned result's score and threshold, whoever built it: the bad ones are
    errored naming the metric and the value, the good ones kept."""
    outputs = ["0.25", "nan", "1.5", "1.0", "-0.5", "inf"]
    results = score_metric_batch(_ReturnsBuilt(name="built"), [EvalTestCase(actual_output=o) for o in outputs], None)
    assert [r.status for r in results] == ["failed", "errored", "errored", "passed", "errored", "errored"]
    assert [r.score for r in results][:1] + [r.score for r in results][3:4] == [0.25, 1.0]
    assert [r.error for r in results] == [
        None,
        "built returned score nan: a score must be a number in [0, 1]",
        "built returned score 1.5: a score must be a number in [0, 1]",
        None,
        "built returned score -0.5: a score must be a number in [0, 1]",
        "built returned score inf: a score must be a number in [0, 1]",
    ]


def test_a_metric_scoring_out_of_0_1_errors_those_cases_through_the_cli(tmp_path: Path, prefect_api_url: str) -> None:
    """A user's metric returns MetricResult.scored(name, float(output)): the cases scoring nan, 1.5, -0.5 and inf
    are errored (used to: exit 3 on NaN in the report's histogram, 1.5 passed with mean 1.5), the others scored;
    the gate decides the exit (1 of 6 passed < 0.5: exit 1), no traceback, every report written."""
    _write(
        tmp_path / "echo_metrics.py",
        """\
        from evaltasks import BaseMetric, MetricResult


        class EchoScore(BaseMetric):
            def __init__(self, threshold: float = 0.5, *, name=None):
                super().__init__(threshold, name=name)

            def score_batch(self, cases, vectors=None):
                return [MetricResult.scored(self.name, float(c.actual_output), self.threshold, "r", {}) for c in cases]
        """,
    )
    outputs = ["0.5", "nan", "1.5", "-0.5", "inf", "0.25"]
    _write(
        tmp_path / "data.jsonl",
        "".join(json.dumps({"id": f"c{i}", "actual_output": o}) + "\n" for i, o in enumerate(outputs)),
    )
    _write(
        tmp_path / "suite.yaml",
        """\
        name: echo
        dataset: {path: data.jsonl}
        metrics:
          - {metric: 'echo_metrics:EchoScore'}
        gate: {min_pass_rate: 0.5}
        """,
    )
    proc = _cli(
        tmp_path,
        "run",
        "suite.yaml",
        "--output-dir",
        "out",
        "--quiet",
        "--no-cache",
        "--batch-size",
        "3",
        api_url=prefect_api_url,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {"results.json", "junit.xml", "summary.md"}
    scores = {case_id: m["EchoScore"] for case_id, m in _scores(tmp_path / "out" / "results.json").items()}
    assert scores == {
        "c0": (0.5, "passed", None),
        "c1": (None, "errored", "ValueError: EchoScore returned score nan: a score must be a number in [0, 1]"),
        "c2": (None, "errored", "ValueError: EchoScore returned score 1.5: a score must be a number in [0, 1]"),
        "c3": (None, "errored", "ValueError: EchoScore returned score -0.5: a score must be a number in [0, 1]"),
        "c4": (None, "errored", "ValueError: EchoScore returned score inf: a score must be a number in [0, 1]"),
        "c5": (0.25, "failed", None),
    }
    summary = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))["summary"]
    assert (summary["metrics"]["EchoScore"]["mean_score"], summary["metrics"]["EchoScore"]["errored"]) == (0.375, 4)


def test_errored_results_are_not_cached_and_edits_invalidate_the_cache(tmp_path: Path, prefect_api_url: str) -> None:
    """With Prefect's task cache on (the CLI default), run a suite whose user metric fails (file FAIL next to
    it): every case errored (exit 1). Remove FAIL, the metric's file unchanged: the re-run scores again instead
    of serving the cached errors. Then edit the metric's file (WORD): the next run's scores follow the edit,
    not the cache."""
    _write(tmp_path / "mine.py", USER_MODULE.format(word="Paris"))
    _write(tmp_path / "d.jsonl", '{"id": "a", "answer": "Paris"}\n{"id": "b", "answer": "Rome"}\n')
    _write(
        tmp_path / "suite.yaml",
        """\
        name: cached
        dataset: {path: d.jsonl, fields: {id: id, actual_output: answer}}
        metrics:
          - {metric: "mine:ContainsWord", name: word}
        gate: {min_pass_rate: 0.5}
        """,
    )
    home = {"PREFECT_HOME": str(tmp_path / "home")}  # one home: one local result store, shared by the runs

    def run(out: str) -> tuple[int, dict]:
        proc = _cli(
            tmp_path, "run", "suite.yaml", "--output-dir", out, "--quiet", api_url=prefect_api_url, extra_env=home
        )
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
        return proc.returncode, _scores(tmp_path / out / "results.json")

    (tmp_path / "FAIL").write_text("", encoding="utf-8")
    code, scores = run("out1")
    assert code == 1
    assert scores == {k: {"word": (None, "errored", "RuntimeError: told to fail")} for k in ("a", "b")}
    (tmp_path / "FAIL").unlink()
    assert run("out2") == (0, {"a": {"word": (1.0, "passed", None)}, "b": {"word": (0.0, "failed", None)}})
    assert run("out3")[1] == _scores(tmp_path / "out2" / "results.json")  # a scored batch is served from cache
    _write(tmp_path / "mine.py", USER_MODULE.format(word="Rome"))
    assert run("out4") == (0, {"a": {"word": (0.0, "failed", None)}, "b": {"word": (1.0, "passed", None)}})


# -- the schema union --------------------------------------------------------------------------------------------


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _suite_with(*metrics: dict) -> dict:
    return {"name": "s", "dataset": {"path": "a.csv"}, "metrics": list(metrics)}


@pytest.mark.parametrize(
    "metric",
    [
        {"metric": "LengthCheckMetric", "max_length": 3, "unit": "words"},
        {
            "metric": "ReferenceMatchMetric",
            "embedding_provider": "local",
            "reference_set": "facts",
            "provider_options": {"dimensions": 64},
        },
        {"metric": "brand_checks:BrandVoiceMetric", "banned_words": ["x"], "anything": {"goes": 1}},
        {"metric": "my.pkg.checks:Outer.Inner"},
    ],
    ids=["length", "refmatch", "user", "dotted"],
)
def test_schema_accepts_each_metric_with_its_own_arguments(metric: dict) -> None:
    _validator().validate(_suite_with(metric))


@pytest.mark.parametrize(
    "metric",
    [
        {"metric": "LengthCheckMetric", "max_lenght": 3},  # another metric's argument / a typo
        {"metric": "LengthCheckMetric", "unit": "tokens"},  # not in the Literal
        {"metric": "LengthCheckMetric", "threshold": 1.5},  # outside [0, 1]
        {"metric": "LengthCheckMetric", "aggregation": "max"},  # ReferenceMatch's argument
        {"metric": "ReferenceMatchMetric", "references": "one"},  # list[str]
        {"metric": "NoSuchMetric"},  # neither built-in nor module:Class
        {"metric": "module:"},
    ],
    ids=["typo", "literal", "threshold", "other-metric-arg", "list", "unknown", "half-path"],
)
def test_schema_rejects_wrong_arguments(metric: dict) -> None:
    with pytest.raises(jsonschema.ValidationError):
        _validator().validate(_suite_with(metric))


@pytest.mark.slow
def test_schema_of_a_class_marks_required_arguments_and_reads_descriptions(
    isolated_imports: pytest.MonkeyPatch,
) -> None:
    isolated_imports.syspath_prepend(str(EXAMPLE))
    from brand_checks import BrandVoiceMetric

    schema = metric_arguments_schema(BrandVoiceMetric)
    assert schema["required"] == ["metric", "banned_words"]
    assert schema["properties"]["banned_words"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "words the brand never uses (required; at least one, none empty).",
    }
    assert schema["properties"]["threshold"]["default"] == 1.0
    assert schema["additionalProperties"] is False


@pytest.mark.slow
def test_schema_lists_installed_entry_points(tmp_path: Path) -> None:
    """`evaltasks schema` where a metric package is installed: its entry point is a branch with its own
    arguments (so the shipped schema, generated without plugins, differs from such a one only by that)."""
    site = tmp_path / "site"
    _write(site / "acme_metrics.py", USER_MODULE.format(word="Paris"))
    _distribution(site, "acme-metrics", "[evaltasks.metrics]\nacme-contains = acme_metrics:ContainsWord\n")
    env = subprocess_env(tmp_path / "home")
    env["PYTHONPATH"] = str(site)
    proc = run_cli("schema", cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(_suite_with({"metric": "acme-contains", "threshold": 0.5}))
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(_suite_with({"metric": "acme-contains", "word": "x"}))
    assert suite_json_schema() == json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))  # none installed here


def test_example_suite_validates_against_the_schema() -> None:
    _validator().validate(yaml.safe_load((EXAMPLE / "suite.yaml").read_text(encoding="utf-8")))


@pytest.mark.slow
def test_cache_keys_of_user_and_entry_point_classes_hash_their_files(
    tmp_path: Path, isolated_imports: pytest.MonkeyPatch
) -> None:
    """The code part of the cache key covers the file defining the class, for an entry point's class and a
    module:Class alike: the digest is sha256(evaltasks' sources digest + that file's bytes)."""
    import hashlib

    from evaltasks.metrics import get_metric_class
    from evaltasks.metrics.base import _package_digest

    site = tmp_path / "site"
    _write(site / "ep_digest_metrics.py", USER_MODULE.format(word="x"))
    _distribution(site, "ep-digest", "[evaltasks.metrics]\nep-digest = ep_digest_metrics:ContainsWord\n")
    _write(tmp_path / "own_digest_metrics.py", USER_MODULE.format(word="y"))
    isolated_imports.syspath_prepend(str(site))
    for name, path in (
        ("ep-digest", site / "ep_digest_metrics.py"),
        ("own_digest_metrics:ContainsWord", tmp_path / "own_digest_metrics.py"),
    ):
        cls = get_metric_class(name, tmp_path)
        expected = hashlib.sha256(_package_digest().encode() + path.read_bytes()).hexdigest()[:16]
        assert cls().cache_key().endswith(f"#code={expected}"), name


@pytest.mark.slow
def test_loading_a_suite_puts_its_directory_last_on_sys_path(
    tmp_path: Path, isolated_imports: pytest.MonkeyPatch
) -> None:
    """The suite's directory goes LAST on sys.path (installed packages and the standard library win), PYTHONPATH
    is left alone, and the user's module is pickled by value: a worker unpickles the metric without importing
    it."""
    import pickle

    import cloudpickle

    _write(tmp_path / "sp_metrics.py", USER_MODULE.format(word="z"))
    _write(tmp_path / "d.jsonl", '{"actual_output": "z"}\n')
    suite = _write(
        tmp_path / "suite.yaml",
        "name: s\ndataset: {path: d.jsonl}\nmetrics:\n  - {metric: 'sp_metrics:ContainsWord'}\n",
    )
    isolated_imports.setenv("PYTHONPATH", "/elsewhere")
    loaded = load_suite(suite)
    assert type(loaded.metrics[0]).__module__ == "sp_metrics"
    assert sys.path[-1] == str(tmp_path.resolve())
    assert os.environ["PYTHONPATH"] == "/elsewhere"
    assert "sp_metrics" in cloudpickle.list_registry_pickle_by_value()
    payload = cloudpickle.dumps(loaded.metrics[0])
    del sys.modules["sp_metrics"]
    sys.path.remove(str(tmp_path.resolve()))  # what a worker without the folder sees
    clone = pickle.loads(payload)
    assert clone.score_batch([EvalTestCase(input="", actual_output="z")])[0].score == 1.0
    sys.path.append(str(tmp_path.resolve()))
    load_suite(suite)  # a second load adds nothing
    assert sys.path.count(str(tmp_path.resolve())) == 1


SHADOW_METRIC = """\
    from evaltasks import BaseMetric, MetricResult


    class Shout(BaseMetric):
        def __init__(self, threshold: float = 0.5, *, name=None):
            super().__init__(threshold, name=name)

        def score_batch(self, cases, vectors=None):
            return [MetricResult.scored(self.name, float(c.actual_output.isupper()), self.threshold, "r", {})
                    for c in cases]
    """


def test_files_next_to_a_suite_never_shadow_installed_modules(tmp_path: Path, prefect_api_url: str) -> None:
    """prefect.py and fasttext.py next to a suite naming `shout_metrics:Shout` (both raise when imported): the run
    (in worker processes, which used to get the folder first on PYTHONPATH) uses the installed prefect and
    fastText; every score equals the one computed here."""
    suites = tmp_path / "suites"
    _write(suites / "shout_metrics.py", SHADOW_METRIC)
    for name in ("prefect", "fasttext"):
        _write(suites / f"{name}.py", f"raise ImportError('the user\\'s {name}.py was imported')\n")
    answers = ["HELLO THERE", "The weather is lovely today.", "Il fait beau aujourd'hui."]
    _write(
        suites / "data.jsonl",
        "".join(json.dumps({"id": str(i), "actual_output": a}) + "\n" for i, a in enumerate(answers)),
    )
    _write(
        suites / "suite.yaml",
        """\
        name: shadow
        dataset: {path: data.jsonl}
        metrics:
          - {metric: 'shout_metrics:Shout', name: shout}
          - {metric: LanguageDetectionMetric, expected_language: en}
        gate: {min_pass_rate: 0}
        """,
    )
    proc = _cli(
        tmp_path,
        "run",
        str(suites / "suite.yaml"),
        "--output-dir",
        "out",
        "--quiet",
        "--no-cache",
        "--task-runner",
        "processes:2",
        "--batch-size",
        "2",
        api_url=prefect_api_url,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    scores = _scores(tmp_path / "out" / "results.json")
    from evaltasks import LanguageDetectionMetric

    expected = LanguageDetectionMetric(expected_language="en").score_batch(
        [EvalTestCase(input="", actual_output=a) for a in answers]
    )
    assert [r.status for r in expected] != ["errored"] * 3
    for i, (answer, language) in enumerate(zip(answers, expected)):
        assert scores[str(i)]["shout"][:2] == (float(answer.isupper()), "passed" if answer.isupper() else "failed")
        assert scores[str(i)]["LanguageDetectionMetric"][:2] == (language.score, language.status)
    assert [scores[str(i)]["LanguageDetectionMetric"][0] for i in range(3)] == [1.0, 1.0, 0.0]


def test_a_local_module_hidden_by_an_installed_one_is_a_located_error(tmp_path: Path, prefect_api_url: str) -> None:
    """`json:Foo` with json.py next to the suite: the standard library's json wins, so the suite names a module
    the user did not write; exit 2 saying which file hides theirs and to rename it."""
    _write(tmp_path / "json.py", SHADOW_METRIC)
    _write(tmp_path / "data.jsonl", '{"actual_output": "x"}\n')
    _write(tmp_path / "suite.yaml", "name: s\ndataset: {path: data.jsonl}\nmetrics:\n  - {metric: 'json:Shout'}\n")
    (tmp_path / "elsewhere").mkdir()
    proc = _cli(
        tmp_path / "elsewhere", "run", str(tmp_path / "suite.yaml"), "--output-dir", "out", api_url=prefect_api_url
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    import json as stdlib_json

    assert (
        f"metric 'json:Shout': the suite's folder has json.py, but module 'json' is the installed module at "
        f"{stdlib_json.__file__}, which hides it"
    ) in proc.stderr
    assert "rename json.py" in proc.stderr


# -- a user's metric that exits, claims success without a score, or validates by returning None -------------------


class _Exits(BaseMetric):
    """sys.exit() on outputs starting with "exit" (a user's metric calling it by mistake)."""

    def __init__(self, threshold: float = 0.5, *, name: str | None = None) -> None:
        super().__init__(threshold, name=name)

    def validate_case(self, case: EvalTestCase):  # returns None: "no problems", the usual Python idiom
        if case.actual_output == "invalid":
            return [("actual_output", "is 'invalid'")]

    def score_batch(self, cases, vectors=None):
        if any(c.actual_output.startswith("exit") for c in cases):
            sys.exit(0)
        return [MetricResult.scored(self.name, 1.0, self.threshold, "ok", {}) for _ in cases]


def test_sys_exit_in_score_batch_errors_those_cases_and_none_from_validate_case_means_no_problems() -> None:
    """sys.exit(0) inside score_batch must not end the run with exit 0 and no reports (a false pass of a CI
    gate): the cases are errored like any other exception; validate_case returning None is 'no problems'."""
    cases = [EvalTestCase(actual_output=o) for o in ("fine", "exit now", "good")]
    result = evaluate_sync(cases, [_Exits(name="exits")], batch_size=3)
    assert [c.metrics[0].status for c in result.test_results] == ["passed", "errored", "passed"]
    assert result.test_results[1].metrics[0].error == "SystemExit: 0"
    with pytest.raises(ValueError, match="is 'invalid'"):
        evaluate_sync([EvalTestCase(actual_output="invalid")], [_Exits()])


class Boom(BaseException):
    """A user's own BaseException subclass (not an Exception)."""


class _RaisesBase(_Exits):
    """Raises ``Boom`` on outputs starting with "boom", KeyboardInterrupt on "ctrl-c"."""

    def score_batch(self, cases, vectors=None):
        if any(c.actual_output.startswith("boom") for c in cases):
            raise Boom("the metric's own BaseException")
        if any(c.actual_output == "ctrl-c" for c in cases):
            raise KeyboardInterrupt
        return super().score_batch(cases, vectors)


def test_a_users_base_exception_errors_its_case_and_a_keyboard_interrupt_goes_on_up() -> None:
    """A metric raising its own BaseException subclass errors those cases, named, like any exception (it ended
    the run with a traceback and exit 3); KeyboardInterrupt is not the metric's failure: it stops the run."""
    from evaltasks.engine.evaluate import metric_failure

    cases = [EvalTestCase(actual_output=o) for o in ("fine", "boom now", "good")]
    result = evaluate_sync(cases, [_RaisesBase(name="raises")], batch_size=3)
    assert [c.metrics[0].status for c in result.test_results] == ["passed", "errored", "passed"]
    assert result.test_results[1].metrics[0].error == "Boom: the metric's own BaseException"
    with pytest.raises(KeyboardInterrupt):
        evaluate_sync([EvalTestCase(actual_output="ctrl-c")], [_RaisesBase()])
    import asyncio

    from prefect.exceptions import TerminationSignal

    assert not metric_failure(asyncio.CancelledError()) and not metric_failure(TerminationSignal(15))
    assert not metric_failure(GeneratorExit()) and metric_failure(SystemExit(0)) and metric_failure(Boom())


class _ClaimsSuccess(BaseMetric):
    def __init__(self, threshold: float = 0.5, *, name: str | None = None) -> None:
        super().__init__(threshold, name=name)

    def score_batch(self, cases, vectors=None):
        out = []
        for c in cases:
            score = None if c.actual_output == "none" else float(c.actual_output)
            out.append(
                MetricResult(
                    name=self.name,
                    score=score,
                    threshold=self.threshold,
                    success=True,
                    reason="trust me",
                    status="passed",
                )
            )
        return out


def test_results_whose_status_contradicts_their_score_are_errored() -> None:
    """A result with no score claiming success, or a score under the threshold marked passed, is errored (it
    used to count as passed); a consistent one is kept."""
    cases = [EvalTestCase(actual_output=o) for o in ("none", "0.1", "0.9")]
    results = score_metric_batch(_ClaimsSuccess(name="claims"), cases, None)
    assert [r.status for r in results] == ["errored", "errored", "passed"]
    assert results[0].error.startswith("claims returned a result without a score marked passed")
    assert results[1].error.startswith("claims returned score 0.1 with threshold 0.5 marked passed")


@pytest.mark.slow
def test_sys_exit_while_importing_a_user_metric_is_a_located_error(
    tmp_path: Path, isolated_imports: pytest.MonkeyPatch
) -> None:
    """A module:Class whose module calls sys.exit() at import is a config error (exit 2), not a silent exit 0."""
    _write(tmp_path / "quits.py", "import sys\nsys.exit(0)\n")
    _write(tmp_path / "d.jsonl", '{"actual_output": "a"}\n')
    suite = _write(tmp_path / "suite.yaml", "name: s\ndataset: {path: d.jsonl}\nmetrics:\n  - metric: quits:X\n")
    with pytest.raises(ConfigError) as info:
        load_suite(suite)
    assert "importing module 'quits' failed: SystemExit: 0" in str(info.value)


@pytest.mark.slow
def test_modules_of_an_environment_inside_the_suite_folder_are_not_pickled_by_value(
    tmp_path: Path, isolated_imports: pytest.MonkeyPatch
) -> None:
    """A project keeps its .venv next to its suite: the packages installed there (under site-packages) travel
    to process workers by reference; only the user's own module goes by value."""
    import cloudpickle

    site = tmp_path / ".venv" / "lib" / "python3" / "site-packages"
    _write(site / "vendored_pkg.py", "VALUE = 3\n")
    isolated_imports.syspath_prepend(str(site))
    _write(
        tmp_path / "mine.py",
        """\
        import vendored_pkg
        from evaltasks import BaseMetric, MetricResult
        class Mine(BaseMetric):
            def __init__(self, threshold: float = 0.5, *, name=None):
                super().__init__(threshold, name=name)
            def score_batch(self, cases, vectors=None):
                return [MetricResult.scored(self.name, vendored_pkg.VALUE / 3, self.threshold, "ok", {})
                        for _ in cases]
        """,
    )
    _write(tmp_path / "d.jsonl", '{"actual_output": "a"}\n')
    suite = _write(tmp_path / "suite.yaml", "name: s\ndataset: {path: d.jsonl}\nmetrics:\n  - metric: mine:Mine\n")
    load_suite(suite)
    by_value = set(cloudpickle.list_registry_pickle_by_value())
    assert "mine" in by_value and "vendored_pkg" not in by_value


@pytest.mark.slow
def test_a_helper_next_to_the_suite_hidden_by_an_installed_module_is_a_located_error(
    tmp_path: Path, isolated_imports: pytest.MonkeyPatch
) -> None:
    """The metric's module imports a helper `six` next to it, which the installed six hides: a config error
    saying so (it used to run with the installed six, erroring every case with an AttributeError); a helper
    nothing installed hides works."""
    pytest.importorskip("six")
    _write(tmp_path / "six.py", "WORD = 'hello'\n")
    _write(tmp_path / "wording.py", "WORD = 'hello'\n")
    body = """\
        import {helper} as helper
        from evaltasks import BaseMetric, MetricResult
        class Mine(BaseMetric):
            def __init__(self, threshold: float = 0.5, *, name=None):
                super().__init__(threshold, name=name)
            def score_batch(self, cases, vectors=None):
                return [MetricResult.scored(self.name, float(helper.WORD in c.actual_output), self.threshold,
                                            "ok", {{}}) for c in cases]
        """
    _write(tmp_path / "uses_six.py", body.format(helper="six"))
    _write(tmp_path / "uses_wording.py", body.format(helper="wording"))
    _write(tmp_path / "d.jsonl", '{"actual_output": "hello"}\n')
    bad = _write(tmp_path / "bad.yaml", "name: s\ndataset: {path: d.jsonl}\nmetrics:\n  - metric: uses_six:Mine\n")
    with pytest.raises(ConfigError) as info:
        load_suite(bad)
    message = str(info.value)
    assert "the suite's folder has six.py, but module 'six' is the installed module at" in message
    assert "uses_six.py imports 'six': rename six.py and that import" in message
    good = _write(
        tmp_path / "good.yaml", "name: s\ndataset: {path: d.jsonl}\nmetrics:\n  - metric: uses_wording:Mine\n"
    )
    result = evaluate_sync([EvalTestCase(actual_output="hello")], load_suite(good).metrics)
    assert result.test_results[0].metrics[0].score == 1.0
