"""The tests' fork server (tests/cli_forkserver.py) gives what a new interpreter gives: the same exit code, stdout and
stderr for the same command, the working directory dropped from sys.path as `python -m` start-up does, the run's
own environment; an environment the preloaded libraries would read differently goes to a new interpreter."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli_forkserver import fork_server, run_cli
from tests.process_env import REPO_ROOT, subprocess_env

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the fork server forks (POSIX only)")


def _both(*args: str, cwd: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], ...]:
    return run_cli(*args, cwd=cwd, env=env), run_cli(*args, cwd=cwd, env=env, fresh=True)


def test_a_forked_run_prints_and_exits_as_a_new_interpreter(tmp_path: Path) -> None:
    env = subprocess_env(tmp_path / "home")
    (tmp_path / "bad.yaml").write_text("name: x\nmetrics: []\n", encoding="utf-8")
    for args in (("--version",), ("run", "missing.yaml"), ("run", "bad.yaml"), ("schema",)):
        forked, fresh = _both(*args, cwd=tmp_path, env=env)
        assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.returncode == 0 and '"$defs"' in forked.stdout
    missing, _ = _both("run", "missing.yaml", cwd=tmp_path, env=env)
    assert missing.returncode == 2 and "missing.yaml" in missing.stderr and "Traceback" not in missing.stderr


def test_a_forked_runs_logging_starts_unconfigured_as_a_new_interpreters(tmp_path: Path) -> None:
    """Prefect is preloaded, its logging is not configured: a command that never uses Prefect (``history``, whose
    warning about a damaged line goes through the ``logging`` module) prints the same in both, and a run's log
    lines (configured by the CLI before it first uses Prefect) are the same."""
    env = subprocess_env(tmp_path / "home")
    (tmp_path / "hist").mkdir()
    (tmp_path / "hist" / "quickstart.jsonl").write_text("not a run record\n", encoding="utf-8")
    suite = str(REPO_ROOT / "examples" / "quickstart" / "suite.yaml")
    forked, fresh = _both("history", suite, "--history-dir", "hist", cwd=tmp_path, env=env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert "line 1 is not a run record" in forked.stderr and "| WARNING |" not in forked.stderr
    # Prefect's logging is configured at another moment in a forked run than in a new interpreter, which shows at
    # other levels than the CLI's: such a run goes to a new interpreter
    assert not fork_server().serves({**env, "PREFECT_LOGGING_LEVEL": "INFO"})


def test_the_run_has_its_own_environment_and_its_working_directory_is_not_on_its_path(tmp_path: Path) -> None:
    env = subprocess_env(tmp_path / "home")
    # pydantic is not among the preloaded libraries: imported from the working directory, it would end the run
    (tmp_path / "pydantic.py").write_text("raise SystemExit('planted pydantic imported')\n", encoding="utf-8")
    (tmp_path / "bad.yaml").write_text("name: x\n", encoding="utf-8")
    forked, fresh = _both("run", "bad.yaml", cwd=tmp_path, env=env)
    assert (forked.returncode, forked.stderr) == (fresh.returncode, fresh.stderr) == (2, fresh.stderr)
    assert "planted" not in forked.stderr + forked.stdout
    bad_setting = run_cli("run", "bad.yaml", cwd=tmp_path, env={**env, "EVALTASKS_STOP_GRACE_S": "x"})
    assert bad_setting.returncode == 2
    assert "EVALTASKS_STOP_GRACE_S" in bad_setting.stderr  # the run read its own environment, not the server's


def test_an_environment_read_at_import_goes_to_a_new_interpreter(tmp_path: Path) -> None:
    import sentence_transformers  # noqa: F401  (torch sets KMP_* and TORCHINDUCTOR_CACHE_DIR when imported)

    import evaltasks.index  # noqa: F401  (it sets OPENBLAS_CORETYPE when imported: a test's env then holds it)
    from evaltasks._env import set_default_env

    set_default_env("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # what evaltasks sets when it loads a local model

    server = fork_server()
    env = subprocess_env(tmp_path / "home")
    assert server.differences(env) == []  # the tests' own environment is served (conftest.py's snapshot)
    assert server.serves({**env, "PYTHONUNBUFFERED": "1", "OPENAI_API_KEY": "sk-x"})
    assert not server.serves({**env, "HF_HOME": str(tmp_path)})
    assert server.serves({**env, "PYTHONPATH": str(tmp_path)})  # an absolute folder shadowing nothing preloaded
    (tmp_path / "numpy").mkdir()  # a package a new interpreter would import instead of the preloaded one
    assert not server.serves({**env, "PYTHONPATH": os.pathsep.join([str(tmp_path / "elsewhere"), str(tmp_path)])})
    assert not server.serves({**env, "PYTHONPATH": "relative"})
    lib = tmp_path / "lib"
    lib.mkdir()
    assert server.serves({**env, "PYTHONPATH": str(lib)})
    for refused in (
        os.pathsep.join([str(lib), str(lib)]),  # a new interpreter drops the repeat
        str(lib) + "/",  # not normalised
        str(tmp_path / "lib.zip"),  # a zip (it could hold a numpy of its own)
    ):
        (tmp_path / "lib.zip").write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip archive
        assert not server.serves({**env, "PYTHONPATH": refused}), refused
    (lib / "sitecustomize.py").write_text("", encoding="utf-8")  # a new interpreter runs it when it starts
    assert not server.serves({**env, "PYTHONPATH": str(lib)})
    (lib / "sitecustomize.py").unlink()
    (lib / "prefect.yaml").write_text("", encoding="utf-8")  # named as a preloaded module, but no module: served
    assert server.serves({**env, "PYTHONPATH": str(lib)})
    import importlib.machinery

    extension = "numpy" + importlib.machinery.EXTENSION_SUFFIXES[0]  # numpy.cpython-311-x86_64-linux-gnu.so
    for module in ("prefect.py", "prefect", extension):  # each would shadow a preloaded module
        (lib / module).mkdir() if "." not in module else (lib / module).write_text("", encoding="utf-8")
        assert not server.serves({**env, "PYTHONPATH": str(lib)}), module
        (lib / module).rmdir() if "." not in module else (lib / module).unlink()
    (lib / "evaltasks.egg-info").mkdir()  # the metadata of an installed distribution: served
    assert server.serves({**env, "PYTHONPATH": str(lib)})
    (lib / "peft-0.99.0.dist-info").mkdir()  # one this environment lacks: transformers probed for it at import
    assert not server.serves({**env, "PYTHONPATH": str(lib)})
    import copy

    started_with_a_path = copy.copy(server)  # a server whose own environment had a PYTHONPATH
    started_with_a_path.env = {**server.env, "PYTHONPATH": str(lib)}
    assert started_with_a_path.differences(env) == ["PYTHONPATH"]  # a run without one: a new interpreter
    assert not server.serves({k: v for k, v in env.items() if k != "HF_HUB_OFFLINE"})
    for name in ("TMPDIR", "HOME", "XDG_CACHE_HOME"):  # cached by tempfile and huggingface_hub once imported
        assert not server.serves({**env, name: str(tmp_path)})


def test_a_run_sees_its_own_temporary_folder(tmp_path: Path) -> None:
    env = subprocess_env(tmp_path / "home")
    temp = tmp_path / "temp"
    temp.mkdir()
    # the target's module is imported when the suite is checked: it records the temporary folder the run sees
    (tmp_path / "probe.py").write_text(
        "import os\nimport tempfile\n\n"
        "with open(os.environ['PROBE_OUT'], 'w', encoding='utf-8') as out:\n"
        "    out.write(tempfile.gettempdir())\n\n\n"
        "def respond(case):\n    return 'x'\n",
        encoding="utf-8",
    )
    (tmp_path / "suite.yaml").write_text(
        "name: probe\ndataset: {path: missing.jsonl}\ntarget: {python: 'probe:respond'}\n"
        "metrics: [{metric: LengthCheckMetric, max_length: 5}]\n",
        encoding="utf-8",
    )
    seen = []
    for number, fresh in enumerate((False, True)):
        probe = tmp_path / f"probe-{number}.txt"
        run = run_cli("run", "suite.yaml", cwd=tmp_path, env={**env, "TMPDIR": str(temp), "PROBE_OUT": str(probe)},
                      fresh=fresh)  # fmt: skip
        assert run.returncode == 2 and "missing.jsonl" in run.stderr, run.stderr  # the dataset is checked after
        seen.append(probe.read_text(encoding="utf-8"))
    assert seen == [str(temp), str(temp)]  # the fork server's own (/tmp) was cached by a preloaded library


def test_a_run_past_its_timeout_is_killed(tmp_path: Path) -> None:
    env = subprocess_env(tmp_path / "home")
    (tmp_path / "slow.py").write_text(
        "import time\n\ndef respond(case):\n    time.sleep(60)\n    return 'late'\n", encoding="utf-8"
    )
    (tmp_path / "d.jsonl").write_text('{"id": "a", "input": "q"}\n', encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: slow\ndataset: {path: d.jsonl}\ntarget: {python: 'slow:respond'}\n"
        "metrics: [{metric: LengthCheckMetric, max_length: 5}]\n",
        encoding="utf-8",
    )
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli("run", "suite.yaml", "--index-dir", "idx", cwd=tmp_path, env=env, timeout=3)


def test_a_run_with_a_pythonpath_sees_the_path_a_new_interpreter_sees(tmp_path: Path) -> None:
    """A ``PYTHONPATH`` of absolute folders is served: the forked run's ``sys.path`` equals a new interpreter's,
    and its target is imported from the folder on it."""
    env = subprocess_env(tmp_path / "home")
    lib, other = tmp_path / "lib", tmp_path / "other"
    lib.mkdir()
    other.mkdir()
    (lib / "path_probe.py").write_text(
        "import json\nimport os\nimport sys\n\n"
        "with open(os.environ['PROBE_OUT'], 'w', encoding='utf-8') as out:\n"
        "    json.dump([__file__, sys.path], out)\n\n\n"
        "def respond(case):\n    return 'x'\n",
        encoding="utf-8",
    )
    (tmp_path / "suite.yaml").write_text(
        "name: probe\ndataset: {path: missing.jsonl}\ntarget: {python: 'path_probe:respond'}\n"
        "metrics: [{metric: LengthCheckMetric, max_length: 5}]\n",
        encoding="utf-8",
    )
    path = os.pathsep.join([str(other), str(lib)])
    assert fork_server().serves({**env, "PYTHONPATH": path})
    seen = []
    for number, fresh in enumerate((False, True)):
        probe = tmp_path / f"probe-{number}.json"
        run = run_cli("run", "suite.yaml", cwd=tmp_path, env={**env, "PYTHONPATH": path, "PROBE_OUT": str(probe)},
                      fresh=fresh)  # fmt: skip
        assert run.returncode == 2 and "missing.jsonl" in run.stderr, run.stderr
        seen.append(json.loads(probe.read_text(encoding="utf-8")))
    assert seen[0] == seen[1]
    module_file, sys_path = seen[0]
    assert module_file == str(lib / "path_probe.py") and sys_path[:2] == [str(other), str(lib)]
