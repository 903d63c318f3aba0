"""The suite's `target:` / `targets:` blocks: parsing, located problems, python callables resolved like users'
own metrics (suite folder last on sys.path, shadowed modules refused, pickled by value for worker processes)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from evaltasks.errors import ConfigError
from evaltasks.inputs.suite import load_suite
from evaltasks.targets import PythonTarget
from evaltasks.test_case import EvalTestCase
from tests.process_env import subprocess_env


def write_suite(directory: Path, target_block: str) -> Path:
    (directory / "d.jsonl").write_text('{"id": "a", "question": "2+2?"}\n', encoding="utf-8")
    suite = directory / "suite.yaml"
    suite.write_text(
        "name: t\ndataset:\n  path: d.jsonl\n  fields: {input: question}\n"
        "metrics:\n  - {metric: LengthCheckMetric, max_length: 5, unit: words}\n" + target_block,
        encoding="utf-8",
    )
    return suite


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def test_a_python_target_is_resolved_from_the_suite_folder(tmp_path: Path) -> None:
    module = unique("tbot")
    helper = unique("thelp")
    (tmp_path / f"{helper}.py").write_text("PREFIX = 'ans: '\n")
    (tmp_path / f"{module}.py").write_text(
        f"from {helper} import PREFIX\n\ndef respond(case):\n    return PREFIX + case.input + case.vars['question']\n"
    )
    suite = write_suite(tmp_path, f"target:\n  python: {module}:respond\n  version: '2'\n  repeat: 3\n  timeout: 5\n")
    loaded = load_suite(suite)
    [target] = loaded.targets
    assert isinstance(target, PythonTarget)
    assert (target.name, target.kind, target.version, target.repeat, target.timeout, target.max_attempts) == (
        "python",
        "python",
        "2",
        3,
        5.0,
        4,
    )
    assert target.cache is True and target.max_concurrency == 1
    case = EvalTestCase(actual_output="", input="q:", vars={"question": "2+2?"})
    assert target.generate(case).output == "ans: q:2+2?"
    assert str(tmp_path.resolve()) == sys.path[-1] or str(tmp_path.resolve()) in sys.path

    # the helper module the callable imports is part of the fingerprint: editing it changes every key
    before = target.fingerprint()
    (tmp_path / f"{helper}.py").write_text("PREFIX = 'answer: '\n")
    assert PythonTarget(target.function, source_files=[tmp_path / f"{helper}.py"], version="2").fingerprint() != before
    assert load_suite(suite).targets[0].fingerprint() != before


def test_targets_side_by_side_keep_their_order_and_names(tmp_path: Path) -> None:
    module = unique("tpair")
    (tmp_path / f"{module}.py").write_text("def a(case):\n    return 'a'\n\ndef b(case):\n    return 'b'\n")
    suite = write_suite(
        tmp_path,
        f"targets:\n  - {{name: current, python: '{module}:a'}}\n  - {{name: candidate, python: '{module}:b', cache: false}}\n",
    )
    current, candidate = load_suite(suite).targets
    assert (current.name, candidate.name, candidate.cache) == ("current", "candidate", False)


@pytest.mark.parametrize(
    ("block", "location", "field", "needle"),
    [
        ("target:\n  python: nomodule_xyz_42:respond\n", "target", "python", "module 'nomodule_xyz_42' not found"),
        ("target:\n  python: not-a-spec\n", "target", "python", "must name your callable as module.path:function"),
        ("target: {python: 'a:b', chat: {model: m, prompt: p.md}}\n", "", "target", "exactly one kind"),
        ("target: {}\n", "", "target", "got none"),
        ("target:\n  pythn: a:b\n", "target", "pythn", "did you mean 'python'"),
        ("target: {python: 'a:b', repeat: 0}\n", "target", "repeat", "greater than or equal to 1"),
        ("target: {python: 'a:b', timeout: true}\n", "target", "timeout", "boolean"),
        ("target: {python: 'a:b'}\ntargets: [{python: 'a:b'}]\n", "", "", "not both"),
        ("targets: []\n", "", "targets", "must list at least one target"),
    ],
)
def test_bad_target_blocks_are_located(tmp_path: Path, block: str, location: str, field: str, needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_suite(write_suite(tmp_path, block))
    found = [p for p in caught.value.problems if needle in p.message]
    assert found, [str(p) for p in caught.value.problems]
    assert (found[0].location, found[0].field) == (location, field)
    assert found[0].source == str(tmp_path / "suite.yaml")


def test_a_missing_attribute_and_a_non_callable_are_problems(tmp_path: Path) -> None:
    module = unique("tattr")
    (tmp_path / f"{module}.py").write_text("def respond(case):\n    return ''\n\nVALUE = 3\n")
    with pytest.raises(ConfigError) as caught:
        load_suite(write_suite(tmp_path, f"target: {{python: '{module}:respnd'}}\n"))
    assert "did you mean 'respond'" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        load_suite(write_suite(tmp_path, f"target: {{python: '{module}:VALUE'}}\n"))
    [problem] = caught.value.problems
    assert (problem.location, problem.field) == ("target", "python") and "type int" in problem.message


def test_duplicate_names_are_a_problem(tmp_path: Path) -> None:
    module = unique("tdup")
    (tmp_path / f"{module}.py").write_text("def a(case):\n    return 'a'\n")
    with pytest.raises(ConfigError) as caught:
        load_suite(write_suite(tmp_path, f"targets:\n  - {{python: '{module}:a'}}\n  - {{python: '{module}:a'}}\n"))
    [problem] = caught.value.problems
    assert (problem.location, problem.field) == ("targets[1]", "name") and "targets[0]" in problem.message


def test_a_module_shadowed_by_an_installed_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / "json.py").write_text("def respond(case):\n    return 'mine'\n")
    with pytest.raises(ConfigError) as caught:
        load_suite(write_suite(tmp_path, "target: {python: 'json:respond'}\n"))
    [problem] = caught.value.problems
    assert "target 'json:respond'" in problem.message and "hides it" in problem.message


def test_the_target_is_pickled_by_value_for_worker_processes(tmp_path: Path) -> None:
    import cloudpickle

    module = unique("tpick")
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / f"{module}.py").write_text("def respond(case):\n    return 'from ' + case.input\n")
    [target] = load_suite(write_suite(folder, f"target: {{python: '{module}:respond'}}\n")).targets
    blob = tmp_path / "target.pkl"
    blob.write_bytes(cloudpickle.dumps(target))
    code = (
        "import pickle, sys\n"
        "from evaltasks.test_case import EvalTestCase\n"
        f"assert not any('suite' in p for p in sys.path if p.startswith({str(tmp_path)!r}))\n"
        f"t = pickle.loads(open({str(blob)!r}, 'rb').read())\n"
        "print(t.generate(EvalTestCase(actual_output='', input='worker')).output, t.fingerprint())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=subprocess_env(tmp_path / "prefect"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["from", "worker", target.fingerprint()]


def test_a_dataset_for_a_target_needs_no_output_and_fills_vars(tmp_path: Path) -> None:
    from evaltasks.inputs.datasets import load_dataset
    from evaltasks.inputs.suite import DatasetSpec

    (tmp_path / "d.csv").write_text("id,question,lang\nq1,2+2?,en\nq2,3+3?,fr\n", encoding="utf-8")
    spec = DatasetSpec.model_validate({"path": "d.csv", "fields": {"input": "question"}})
    loaded = load_dataset(spec, tmp_path, generated=True)
    assert [c.actual_output for c in loaded.cases] == ["", ""]
    assert loaded.cases[1].input == "3+3?"
    assert loaded.cases[1].vars == {"id": "q2", "question": "3+3?", "lang": "fr"}
    assert loaded.ids == ["q1", "q2"] and loaded.notices == []

    (tmp_path / "o.jsonl").write_text(
        '{"question": "a", "answer": "old", "n": 3}\n{"question": "b", "answer": "old"}\n', encoding="utf-8"
    )
    spec = DatasetSpec.model_validate({"path": "o.jsonl", "fields": {"input": "question", "actual_output": "answer"}})
    loaded = load_dataset(spec, tmp_path, generated=True)
    assert [c.actual_output for c in loaded.cases] == ["", ""]
    assert loaded.cases[0].vars == {"question": "a", "answer": "old", "n": 3}
    assert len(loaded.notices) == 1 and "the column 'answer' is ignored" in loaded.notices[0]

    # without a target the output column is still required, and vars stay unset
    from evaltasks.errors import DatasetError

    spec = DatasetSpec.model_validate({"path": "d.csv", "fields": {"input": "question"}})
    with pytest.raises(DatasetError, match="actual_output"):
        load_dataset(spec, tmp_path)
    spec = DatasetSpec.model_validate({"path": "o.jsonl", "fields": {"input": "question", "actual_output": "answer"}})
    assert load_dataset(spec, tmp_path).cases[0].vars is None


def test_template_variables_missing_from_the_dataset_are_located(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evaltasks.inputs._suite_targets import variable_problems

    (tmp_path / "p.md").write_text("### system\nTone: {{ tone }}\n### user\n{{ input }} {{ lang }}\n", encoding="utf-8")
    suite = write_suite(
        tmp_path,
        "targets:\n"
        "  - {name: bot, chat: {model: m, prompt: p.md, base_url: 'http://127.0.0.1:9/v1'}}\n"
        "  - {name: app, http: {url: 'http://127.0.0.1:9/x', body: {q: '{{ question }}', l: '{{ vars.lang }}', "
        "t: 'tone {{ tone }}', k: '{{ nope }}'}}}\n",
    )
    loaded = load_suite(suite)
    rows = [EvalTestCase(actual_output="", input="q", vars={"question": "q", "lang": "en"})]
    problems = variable_problems(loaded.targets, rows, str(suite), single=False)
    assert [(p.location, p.field) for p in problems] == [
        ("targets[0]", "chat.prompt"),
        ("targets[1]", "http.body"),
        ("targets[1]", "http.body"),
    ]
    assert problems[0].message.startswith(f"{tmp_path / 'p.md'}, line 2: 'tone' is undefined")
    assert (
        problems[1].message.startswith("body.t: 'tone' is undefined")
        and "columns: lang, question" in problems[1].message
    )
    assert problems[2].message.startswith("body.k: 'nope' is undefined")
    rows = [EvalTestCase(actual_output="", vars={"question": "q", "lang": "en", "tone": "dry", "nope": 1})]
    assert variable_problems(loaded.targets, rows, str(suite), single=False) == []

    # credentials are looked at only when asked, and never needed to load the suite
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT", raising=False)
    bot, app = loaded.targets
    assert "OPENAI_API_KEY" in (bot.missing_credentials() or "")  # type: ignore[attr-defined]
    assert app.missing_credentials() is None  # type: ignore[attr-defined]


def test_a_target_without_its_key_is_left_out_while_another_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--skip-missing-credentials with the first (reference) target lacking its key: the run plans the others
    only, so the next one is the reference; with every target lacking it, they all stay and their cases are
    reported skipped."""
    from evaltasks.engine.run import plan_run

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT", raising=False)
    module = unique("tkeyless")
    (tmp_path / f"{module}.py").write_text("def respond(case):\n    return 'four'\n")
    (tmp_path / "p.md").write_text("### system\nBe brief.\n### user\n{{ input }}\n", encoding="utf-8")
    chat = "{name: bot, chat: {model: m, prompt: p.md, base_url: 'http://127.0.0.1:9/v1'}}"
    suite = write_suite(tmp_path, f"targets:\n  - {chat}\n  - {{name: app, python: {module}:respond}}\n")
    plan = plan_run(suite, skip_missing_credentials=True)
    assert [t.name for t in plan.targets] == ["app"] and list(plan.skipped_targets) == ["bot"]
    assert any(w.startswith("target bot skipped: ") and "left out of the run" in w for w in plan.suite.warnings)

    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "p.md").write_text("### system\nBe brief.\n### user\n{{ input }}\n", encoding="utf-8")
    plan = plan_run(write_suite(alone, f"target: {chat}\n"), skip_missing_credentials=True)
    assert [t.name for t in plan.targets] == ["bot"] and list(plan.skipped_targets) == ["bot"]
    assert any("its cases are skipped" in w for w in plan.suite.warnings)


def test_a_number_as_version_is_its_text_and_a_dataset_may_be_just_its_path(tmp_path: Path) -> None:
    """YAML reads ``version: 2`` as an integer: it is the version "2" (of the target and of an http app), not a
    type error; ``dataset: d.jsonl`` is the path alone, as ``dataset: {path: d.jsonl}``."""
    module = unique("tver")
    (tmp_path / f"{module}.py").write_text("def respond(case):\n    return 'a'\n")
    loaded = load_suite(write_suite(tmp_path, f"target:\n  python: {module}:respond\n  version: 2\n"))
    assert loaded.targets[0].version == "2"
    loaded = load_suite(
        write_suite(tmp_path, "target:\n  http: {url: 'http://127.0.0.1:9/ask', version: 1.5}\n  name: app\n")
    )
    assert loaded.suite.target is not None and loaded.suite.target.http is not None
    assert loaded.suite.target.http.version == "1.5"
    suite = tmp_path / "plain.yaml"
    suite.write_text("name: t\ndataset: d.jsonl\nmetrics:\n  - {metric: NonEmptyMetric}\n", encoding="utf-8")
    assert load_suite(suite).suite.dataset.path == "d.jsonl"
    suite.write_text("name: t\ndataset: 42\nmetrics:\n  - {metric: NonEmptyMetric}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_suite(suite)
    [problem] = caught.value.problems
    assert problem.field == "dataset" and "the dataset's path or a mapping" in problem.message


def test_no_target_on_a_dataset_without_outputs_says_why_the_column_is_needed(tmp_path: Path) -> None:
    from evaltasks.engine.run import plan_run
    from evaltasks.errors import DatasetError

    module = unique("tnot")
    (tmp_path / f"{module}.py").write_text("def respond(case):\n    return 'a'\n")
    suite = write_suite(tmp_path, f"target:\n  python: {module}:respond\n")
    assert len(plan_run(suite).dataset.cases) == 1  # the target makes the outputs
    with pytest.raises(DatasetError) as caught:
        plan_run(suite, use_targets=False)
    [problem] = caught.value.problems
    assert problem.field == "actual_output" and "--no-target grades the dataset's own actual_output" in problem.message
