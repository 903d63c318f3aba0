"""The metric registry (:mod:`evaltasks.metrics.registry`): each built-in metric registers itself beside its class,
the registry checks itself, and the suite file's schema is generated from it.

- the registry is exactly the metric classes found by walking ``evaltasks.metrics`` with :mod:`pkgutil` (not
  with the registry's own walk), each under its class name, each re-exported where the public API promises;
- a name registered twice, a class registered twice, a user's class and a non-metric are refused with a message
  that names the classes; the registry is unchanged afterwards;
- the generated schema has one branch per registered metric, with exactly its constructor's parameters;
- adding a metric is one module: a copy of the package with one new module in a family (nothing else edited)
  registers it, lists it in the schema, loads it from a suite file and scores with it; the same module without
  its decorator, or with a taken name, is refused when the registry is read.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import evaltasks
import evaltasks.metrics
from evaltasks.inputs.suite import suite_json_schema
from evaltasks.metrics import METRICS, LengthCheckMetric, MetricRegistryError, register_metric
from evaltasks.metrics.base import BaseMetric
from tests.process_env import REPO_ROOT, subprocess_env

FAMILIES = ("agent", "conversation", "deterministic", "judge", "reliability", "security", "vector")


def walked_metric_classes() -> set[type[BaseMetric]]:
    """Concrete BaseMetric subclasses defined in the public modules of evaltasks.metrics' sub-packages, minus
    those another of them subclasses (shared bases): found with pkgutil.walk_packages, independently of the
    registry's own walk."""
    defined: set[type[BaseMetric]] = set()
    for info in pkgutil.walk_packages(evaltasks.metrics.__path__, "evaltasks.metrics."):
        parts = info.name.split(".")
        if info.ispkg or len(parts) != 4 or any(p.startswith("_") for p in parts):
            continue
        module = importlib.import_module(info.name)
        defined |= {
            v
            for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, BaseMetric) and v.__module__ == info.name
        }
    return {
        c for c in defined if not inspect.isabstract(c) and not any(o is not c and issubclass(o, c) for o in defined)
    }


def test_the_registry_is_every_metric_class_of_the_metric_modules() -> None:
    walked = walked_metric_classes()
    assert len(walked) == 48
    assert set(METRICS.values()) == walked
    assert {name: cls.__name__ for name, cls in METRICS.items()} == {cls.__name__: cls.__name__ for cls in walked}
    assert list(METRICS) == sorted(METRICS)  # name order, whatever was imported first
    assert {c.__module__.split(".")[2] for c in walked} == set(FAMILIES)
    evaltasks.metrics.registry.check_registry()  # the check the first read ran passes again


def test_every_registered_metric_is_public_where_it_was() -> None:
    """``evaltasks``, ``evaltasks.metrics`` and its family package re-export each one (same object)."""
    for name, cls in METRICS.items():
        family = importlib.import_module(cls.__module__.rpartition(".")[0])
        assert getattr(evaltasks, name) is getattr(evaltasks.metrics, name) is getattr(family, name) is cls, name
        assert name in evaltasks.__all__ and name in evaltasks.metrics.__all__ and name in family.__all__, name


def test_the_registry_is_read_only() -> None:
    with pytest.raises(TypeError):
        METRICS["LengthCheckMetric"] = LengthCheckMetric  # type: ignore[index]


def _metric_class(name: str, module: str) -> type[BaseMetric]:
    """A concrete metric class named ``name`` that says it is defined in ``module``."""
    return type(name, (LengthCheckMetric,), {"__module__": module})


def test_a_name_registered_twice_is_refused_naming_both_classes() -> None:
    before = dict(METRICS)
    other = _metric_class("OtherLength", "evaltasks.metrics.deterministic.other_length")
    with pytest.raises(MetricRegistryError) as caught:
        register_metric("LengthCheckMetric")(other)
    assert str(caught.value) == (
        "metric name 'LengthCheckMetric' is registered twice: by "
        "evaltasks.metrics.deterministic.length_check.LengthCheckMetric and by "
        "evaltasks.metrics.deterministic.other_length.OtherLength; each metric needs a name of its own"
    )
    with pytest.raises(
        MetricRegistryError, match="LengthCheckMetric is registered twice: as 'LengthCheckMetric' and as 'LengthAgain'"
    ):
        register_metric("LengthAgain")(LengthCheckMetric)
    assert dict(METRICS) == before
    assert register_metric("LengthCheckMetric")(LengthCheckMetric) is LengthCheckMetric  # the same class: no-op
    assert dict(METRICS) == before


@pytest.mark.parametrize(
    ("name", "cls", "message"),
    [
        (
            "Mine",
            _metric_class("Mine", "my_metrics"),
            "my_metrics.Mine is not one of evaltasks' metrics; a suite names your own metric as 'module.path:Class'",
        ),
        (
            "NotAMetric",
            type("NotAMetric", (), {"__module__": "evaltasks.metrics.deterministic.x"}),
            "only a concrete subclass of BaseMetric can be registered",
        ),
        ("Abstract", BaseMetric, "only a concrete subclass of BaseMetric can be registered"),
    ],
)
def test_what_is_not_a_built_in_metric_is_refused(name: str, cls: type, message: str) -> None:
    before = dict(METRICS)
    with pytest.raises(MetricRegistryError, match=message.replace(".", r"\.").replace("(", r"\(")):
        register_metric(name)(cls)
    assert dict(METRICS) == before


@pytest.mark.parametrize("name", ["", "module:Class", "has space", 3])
def test_a_name_that_a_suite_could_not_use_is_refused(name: object) -> None:
    with pytest.raises(MetricRegistryError, match="identifier-like string"):
        register_metric(name)  # type: ignore[arg-type]


def _parameters(cls: type[BaseMetric]) -> tuple[set[str], set[str]]:
    """(every constructor parameter, those without a default), *args/**kwargs left out."""
    params = [
        p
        for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return {p.name for p in params}, {p.name for p in params if p.default is inspect.Parameter.empty}


def test_the_schema_lists_every_registered_metric_with_its_parameters() -> None:
    spec = suite_json_schema()["$defs"]["MetricSpec"]
    branches = {b["properties"]["metric"]["const"]: b for b in spec["oneOf"] if "const" in b["properties"]["metric"]}
    assert set(branches) == set(METRICS)
    assert spec["properties"]["metric"]["anyOf"][0]["enum"] == list(METRICS)
    for name, cls in METRICS.items():
        every, required = _parameters(cls)
        assert set(branches[name]["properties"]) == {"metric"} | every, name
        assert set(branches[name]["required"]) == {"metric"} | required, name
    assert branches["LengthCheckMetric"]["properties"]["unit"]["enum"] == ["chars", "words"]
    assert branches["LengthCheckMetric"]["properties"]["min_length"]["default"] == 0


WORD_COUNT = '''
"""WordCountMetric: at most ``max_words`` words (a metric added as one module, by a test)."""

from __future__ import annotations

from evaltasks.metrics.base import BaseMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.results import MetricResult


{decorator}
class WordCountMetric(BaseMetric):
    """Score 1.0 when the output has at most ``max_words`` words.

    Args:
        threshold: minimum passing score.
        max_words: the most words an output may have.
    """

    def __init__(self, threshold: float = 1.0, max_words: int = 3, *, name: str | None = None) -> None:
        super().__init__(threshold, name=name)
        self.max_words = max_words

    def score_batch(self, cases, vectors=None):
        return [MetricResult.scored(self.name, float(len(c.actual_output.split()) <= self.max_words),
                                    self.threshold, "counted", {"words": len(c.actual_output.split())})
                for c in cases]
'''

CHECK_ADDED = """
import json, evaltasks, pathlib, sys
from evaltasks import EvalTestCase, evaluate_sync
from evaltasks.inputs.suite import load_suite, suite_json_schema
from evaltasks.metrics import METRICS, get_metric_class
assert pathlib.Path(evaltasks.__file__).is_relative_to(pathlib.Path.cwd()), evaltasks.__file__
spec = suite_json_schema()["$defs"]["MetricSpec"]
branch = [b for b in spec["oneOf"] if b["properties"]["metric"].get("const") == "WordCountMetric"]
suite = load_suite(sys.argv[1])
result = evaluate_sync([EvalTestCase(actual_output="one two"), EvalTestCase(actual_output="one two three four")],
                       suite.metrics)
print(json.dumps({
    "module": METRICS["WordCountMetric"].__module__, "count": len(METRICS),
    "same": get_metric_class("WordCountMetric") is METRICS["WordCountMetric"],
    "properties": sorted(branch[0]["properties"]) if branch else None,
    "description": branch[0]["properties"]["max_words"].get("description") if branch else None,
    "loaded": [type(m).__name__ for m in suite.metrics], "max_words": suite.metrics[0].max_words,
    "scores": [c.metrics[0].score for c in result.test_results],
}))
"""


def _run_in_copy(tmp_path: Path, module: str, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter whose ``evaltasks`` is a copy of this tree with ``module`` added as
    ``evaltasks/metrics/deterministic/word_count.py`` (nothing else changed)."""
    root = tmp_path / "tree"
    shutil.copytree(REPO_ROOT / "evaltasks", root / "evaltasks", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "evaltasks" / "metrics" / "deterministic" / "word_count.py").write_text(module, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=root,
        capture_output=True,
        text=True,
        env=subprocess_env(tmp_path / "prefect-home"),
        timeout=600,
    )


def test_adding_a_metric_is_one_module(tmp_path: Path) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        textwrap.dedent("""\
        name: words
        dataset: {path: cases.jsonl}
        metrics:
          - {metric: WordCountMetric, max_words: 2}
        """),
        encoding="utf-8",
    )
    (tmp_path / "cases.jsonl").write_text('{"actual_output": "a"}\n', encoding="utf-8")
    done = _run_in_copy(
        tmp_path, WORD_COUNT.replace("{decorator}", '@register_metric("WordCountMetric")'), CHECK_ADDED, str(suite)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got == {
        "module": "evaltasks.metrics.deterministic.word_count",
        "count": len(METRICS) + 1,
        "same": True,
        "properties": ["max_words", "metric", "name", "threshold"],
        "description": "the most words an output may have.",
        "loaded": ["WordCountMetric"],
        "max_words": 2,
        "scores": [1.0, 0.0],
    }


@pytest.mark.parametrize(
    ("decorator", "message"),
    [
        (
            "",
            "the metric registry is inconsistent: evaltasks.metrics.deterministic.word_count.WordCountMetric is not "
            'registered: put @register_metric("WordCountMetric") on it',
        ),
        (
            '@register_metric("ContainsMetric")',
            "metric name 'ContainsMetric' is registered twice: by "
            "evaltasks.metrics.deterministic.contains.ContainsMetric and by "
            "evaltasks.metrics.deterministic.word_count.WordCountMetric; each metric needs a name of its own",
        ),
    ],
)
def test_a_metric_module_registered_wrongly_is_refused_when_the_registry_is_read(
    tmp_path: Path, decorator: str, message: str
) -> None:
    code = (
        "from evaltasks.metrics import METRICS, MetricRegistryError\n"
        "try:\n    len(METRICS)\nexcept MetricRegistryError as exc:\n    print(exc)\n"
        "else:\n    raise SystemExit('no MetricRegistryError')\n"
    )
    done = _run_in_copy(tmp_path, WORD_COUNT.replace("{decorator}", decorator), code)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout
    assert done.stdout.strip() == message
