"""PythonTarget: real callables (sync, async, callable objects), their return types and failures, and the
fingerprint that follows the callable's source file."""

from __future__ import annotations

import asyncio
import importlib
import sys
from pathlib import Path

import pytest

from evaltasks.errors import CredentialsError
from evaltasks.targets import PythonTarget, TargetError, TargetOutput, TransientTargetError
from evaltasks.test_case import EvalTestCase


def case(text: str = "What is 2+2?", **vars: object) -> EvalTestCase:
    return EvalTestCase(actual_output="", input=text, vars=dict(vars) or None)


def test_sync_callable_receives_the_case_with_its_vars() -> None:
    seen: list[EvalTestCase] = []

    def respond(c: EvalTestCase) -> str:
        seen.append(c)
        return f"{c.input} -> {c.vars['lang'] if c.vars else '?'}"

    out = PythonTarget(respond).generate(case("hi", lang="fr"))
    assert out == TargetOutput(output="hi -> fr")
    assert seen[0].vars == {"lang": "fr"}


def test_async_callable_and_awaitable_returning_object() -> None:
    async def respond(c: EvalTestCase) -> dict[str, object]:
        await asyncio.sleep(0)
        return {"output": c.input.upper() if c.input else "", "retrieval_context": ["doc"], "cost": 0.25}

    class Bot:
        async def __call__(self, c: EvalTestCase) -> str:
            return "object:" + (c.input or "")

    out = PythonTarget(respond).generate(case("abc"))
    assert (out.output, out.retrieval_context, out.cost) == ("ABC", ["doc"], 0.25)
    assert PythonTarget(Bot()).generate(case("x")).output == "object:x"


def test_mapping_with_tokens_and_metadata() -> None:
    def respond(c: EvalTestCase) -> dict[str, object]:
        return {"output": "a", "tokens": {"input": 7, "output": 3}, "tools_called": ["search"], "metadata": {"k": 1}}

    out = PythonTarget(respond).generate(case())
    assert (out.input_tokens, out.output_tokens, out.tools_called, out.metadata) == (7, 3, ["search"], {"k": 1})


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (None, "type NoneType"),
        (b"a", "type bytes"),
        (["a"], "type list"),
        ({"answer": "a"}, "output"),
        ({"output": "a", "cost": -1}, "cost"),
        ({"output": "a", "tokens": 5}, "tokens 5"),
    ],
)
def test_wrong_return_types_are_target_errors_naming_the_type(value: object, needle: str) -> None:
    target = PythonTarget(lambda c: value, name="bot")
    with pytest.raises(TargetError) as caught:
        target.generate(case())
    assert not isinstance(caught.value, TransientTargetError)
    assert "python target bot" in str(caught.value)
    assert needle in str(caught.value)


@pytest.mark.parametrize(("value", "text"), [(42, "42"), (2.5, "2.5"), (True, "true"), (False, "false")])
def test_a_number_or_boolean_is_its_json_text_as_an_http_targets_answer(value: object, text: str) -> None:
    """The same rule as an http target whose output path holds a JSON number or boolean (tests/targets/
    test_http_target.py: ``{"output": 42}`` answers "42")."""
    assert PythonTarget(lambda c: value, name="bot").generate(case()).output == text


def test_exceptions_are_classified() -> None:
    def boom(c: EvalTestCase) -> str:
        raise KeyError("missing")

    def slow(c: EvalTestCase) -> str:
        raise TimeoutError("upstream slow")

    def creds(c: EvalTestCase) -> str:
        raise CredentialsError("bad key")

    with pytest.raises(TargetError, match="raised KeyError: 'missing'") as caught:
        PythonTarget(boom).generate(case())
    assert not isinstance(caught.value, TransientTargetError)
    with pytest.raises(TransientTargetError, match="TimeoutError: upstream slow"):
        PythonTarget(slow).generate(case())
    with pytest.raises(CredentialsError):
        PythonTarget(creds).generate(case())


def test_bad_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="callable"):
        PythonTarget("not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        PythonTarget(str, timeout=0)
    with pytest.raises(ValueError, match="max_attempts"):
        PythonTarget(str, max_attempts=0)
    with pytest.raises(ValueError, match="repeat"):
        PythonTarget(str, repeat=True)  # type: ignore[arg-type]


def _load(directory: Path, name: str) -> object:
    sys.path.insert(0, str(directory))
    try:
        sys.modules.pop(name, None)
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(directory))
        sys.modules.pop(name, None)


def test_fingerprint_follows_the_source_file_and_version(tmp_path: Path) -> None:
    module = tmp_path / "fp_bot_module.py"
    module.write_text("def helper():\n    return 'a'\n\ndef respond(case):\n    return helper()\n")
    first = PythonTarget(_load(tmp_path, "fp_bot_module").respond)  # type: ignore[attr-defined]
    same = PythonTarget(_load(tmp_path, "fp_bot_module").respond)  # type: ignore[attr-defined]
    assert first.fingerprint() == same.fingerprint()
    assert first.case_key(case("q")) == same.case_key(case("q"))
    assert first.case_key(case("q")) != first.case_key(case("q2"))
    assert first.case_key(case("q", lang="fr")) != first.case_key(case("q", lang="en"))
    # an actual_output in the dataset is not an input of the target
    assert first.case_key(case("q")) == first.case_key(case("q").model_copy(update={"actual_output": "old"}))

    versioned = PythonTarget(_load(tmp_path, "fp_bot_module").respond, version="2")  # type: ignore[attr-defined]
    assert versioned.fingerprint() != first.fingerprint()

    module.write_text("def helper():\n    return 'b'\n\ndef respond(case):\n    return helper()\n")  # a helper edit
    edited = PythonTarget(_load(tmp_path, "fp_bot_module").respond)  # type: ignore[attr-defined]
    assert edited.fingerprint() != first.fingerprint()

    other = tmp_path / "fp_other.py"
    other.write_text("X = 1\n")
    with_extra = PythonTarget(edited.function, source_files=[other])
    digest = with_extra.fingerprint()
    other.write_text("X = 2\n")
    assert PythonTarget(edited.function, source_files=[other]).fingerprint() != digest


def test_a_function_with_a_comprehension_has_one_fingerprint_wherever_it_is_loaded(tmp_path: Path) -> None:
    (tmp_path / "fp_nested_module.py").write_text(
        "def respond(case):\n    return ' '.join(w.upper() for w in case.input.split())\n", encoding="utf-8"
    )
    first = PythonTarget(_load(tmp_path, "fp_nested_module").respond)  # type: ignore[attr-defined]
    again = PythonTarget(_load(tmp_path, "fp_nested_module").respond)  # type: ignore[attr-defined]
    assert first.function is not again.function  # two loads: their generator expressions' code at two addresses
    assert repr(first.function.__code__.co_consts) != repr(again.function.__code__.co_consts)
    assert first.fingerprint() == again.fingerprint()  # as a rerun in a new process must find: its stored outputs
    assert first.generate(case("a b")).output == "A B"


def test_async_calls_share_one_running_loop_across_calls_and_threads() -> None:
    import threading

    loops: list[asyncio.AbstractEventLoop] = []  # held, so two loops never share an id

    async def respond(c: EvalTestCase) -> str:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return "ok"

    target = PythonTarget(respond, max_concurrency=2)
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(target.generate(case()).output)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert target.generate(case()).output == "ok"
    assert results == ["ok"] * 3 and len(loops) == 4 and len(set(map(id, loops))) == 1
    assert loops[0].is_running()  # still running between calls: a client the module made on it stays usable


def _answer(model: str, case: EvalTestCase) -> str:
    return f"{model}: {case.input}"


class _Configured:
    def __init__(self, model: str) -> None:
        self.model = model

    def __call__(self, case: EvalTestCase) -> str:
        return f"{self.model}: {case.input}"


def _closure(model: str):
    def respond(case: EvalTestCase) -> str:
        return f"{model}: {case.input}"

    return respond


def test_targets_built_from_one_file_with_different_settings_get_different_keys(tmp_path: Path) -> None:
    """Two partials, closures, callable objects or lambdas of one file differ in what they return, so they must not
    share stored outputs; the same settings built again keep the key (a rerun still reads the store)."""
    import functools

    from evaltasks import ExactMatchMetric, evaluate_sync

    pairs = {
        "partial": (functools.partial(_answer, "good"), functools.partial(_answer, "bad")),
        "closure": (_closure("good"), _closure("bad")),
        "object": (_Configured("good"), _Configured("bad")),
        "lambda": (lambda case: f"good: {case.input}", lambda case: f"bad: {case.input}"),
    }
    for kind, (good, bad) in pairs.items():
        assert PythonTarget(good).fingerprint() != PythonTarget(bad).fingerprint(), kind
    assert (
        PythonTarget(functools.partial(_answer, "good")).fingerprint()
        == PythonTarget(pairs["partial"][0]).fingerprint()
    )
    assert PythonTarget(_closure("good")).fingerprint() == PythonTarget(pairs["closure"][0]).fingerprint()
    assert PythonTarget(_Configured("good")).fingerprint() == PythonTarget(pairs["object"][0]).fingerprint()

    cases = [EvalTestCase(actual_output="", input="2+2", expected_output="good: 2+2")]
    targets = [PythonTarget(functools.partial(_answer, m), name=m) for m in ("good", "bad")]
    result = evaluate_sync(cases, [ExactMatchMetric()], target=targets, index_dir=tmp_path / "index")
    assert [(r.generation.target, r.actual_output) for r in result.test_results if r.generation] == [
        ("good", "good: 2+2"),
        ("bad", "bad: 2+2"),
    ]
