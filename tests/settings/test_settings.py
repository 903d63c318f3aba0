"""The settings object (docs/settings.md): every ``EVALTASKS_*`` variable the code names is a field of
``evaltasks.settings.Settings``, the docs table lists exactly those fields with their real defaults, a bad value
stops ``evaltasks run`` with one line naming the variable (exit 2), and each value reaches the code that uses it.

Values are read through the real modules that use them (the index, the history, the run's progress records, the
supervisor, the server's client, the temporary server); the CLI is a real subprocess.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evaltasks.settings import Settings, SettingsError, default_text, get_settings, markdown_table, variable_name
from tests.process_env import REPO_ROOT, subprocess_env
from tests.suite_helpers import length_suite

SOURCE_DIRS = (REPO_ROOT / "evaltasks", REPO_ROOT / "flows")
DOCS = REPO_ROOT / "docs" / "settings.md"
NAME = re.compile(r"\bEVALTASKS_[A-Z0-9_]*[A-Z0-9]")
DEADLINE_S = 300  # a generous bound for a command that stops before any heavy import


def _names_in_source() -> dict[str, list[str]]:
    """Every ``EVALTASKS_*`` name written in the package's and the flows' files -> the files naming it."""
    found: dict[str, list[str]] = {}
    for folder in SOURCE_DIRS:
        for path in sorted(folder.rglob("*")):
            if path.suffix in (".py", ".json", ".md", ".yaml") and "__pycache__" not in path.parts:
                for name in set(NAME.findall(path.read_text(encoding="utf-8"))):
                    found.setdefault(name, []).append(str(path.relative_to(REPO_ROOT)))
    return found


def test_every_evaltasks_name_in_the_source_is_a_setting() -> None:
    found = _names_in_source()
    fields = {variable_name(field) for field in Settings.model_fields}
    assert {"EVALTASKS_STOP_GRACE_S", "EVALTASKS_INDEX_DIR", "EVALTASKS_RUN_STATE"} <= found.keys()  # the scan works
    undeclared = {name: files for name, files in found.items() if name not in fields}
    assert not undeclared, undeclared


def test_the_names_the_standard_library_readers_use_are_the_settings_names() -> None:
    """The supervisor, the server's client, the redaction and the code that sets variables for child processes
    name the variables through constants: each is the name of its Settings field."""
    from evaltasks import _env, _redact
    from evaltasks.engine import history, progress
    from evaltasks.flows.evaluate_suite import SERVED_VERDICT_ENV

    assert variable_name("stop_grace_s") == _env.STOP_GRACE_S_VARIABLE
    assert variable_name("no_server") == _env.NO_SERVER_VARIABLE
    assert _env.RUN_STATE_VARIABLE == progress.RUN_STATE_ENV == variable_name("run_state")
    assert _env.SERVE_VERDICT_VARIABLE == SERVED_VERDICT_ENV == variable_name("serve_verdict")
    assert variable_name("secret_variables") == _redact.EXTRA_VARIABLES
    assert variable_name("history_dir") == history.HISTORY_DIR_ENV


def _docs_rows() -> list[list[str]]:
    """The cells of the table's rows in docs/settings.md (header and rule left out)."""
    lines = [line for line in DOCS.read_text(encoding="utf-8").splitlines() if line.startswith("| `EVALTASKS_")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_the_docs_table_lists_exactly_the_settings_with_their_real_defaults() -> None:
    from evaltasks import supervisor
    from evaltasks.engine import progress
    from evaltasks.index import _segments

    rows = _docs_rows()
    assert [row[0].strip("`") for row in rows] == [variable_name(field) for field in Settings.model_fields]
    defaults = {row[0].strip("`"): row[2].strip("`") for row in rows}
    assert defaults == {variable_name(field): default_text(field) for field in Settings.model_fields}
    # the defaults the table shows are those the code uses
    assert defaults["EVALTASKS_STOP_GRACE_S"] == "10"
    assert Settings().stop_grace_s == progress.STOP_GRACE_S == supervisor.GRACE_S == 10.0
    assert defaults["EVALTASKS_INDEX_MAX_SEGMENTS"] == "32" == str(_segments.MAX_SEGMENTS_DEFAULT)
    assert all(defaults[variable_name(field)] == "unset" for field in ("index_dir", "history_dir", "cache_dir"))
    assert all(row[3] and row[4] for row in rows), rows  # every variable says what it does and who reads it
    assert markdown_table() in DOCS.read_text(encoding="utf-8")  # the table is the generated one, verbatim


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("EVALTASKS_STOP_GRACE_S", "abc", "valid number"),
        ("EVALTASKS_STOP_GRACE_S", "-1", "greater than 0"),
        ("EVALTASKS_INDEX_MAX_SEGMENTS", "0", "greater than or equal to 1"),
    ],
)
def test_a_bad_value_stops_a_run_with_one_line_naming_the_variable(
    tmp_path: Path, name: str, value: str, rule: str
) -> None:
    suite = length_suite(tmp_path / "suite", [1, 2], name="bad-setting")
    env = {**subprocess_env(tmp_path / "prefect-home"), name: value}
    done = subprocess.run(
        [sys.executable, "-m", "evaltasks", "run", str(suite), "--output-dir", "out"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [done.stderr.rstrip("\n")], done.stderr  # one line
    assert done.stderr.startswith(f"evaltasks: error: {name}={value!r}: ") and rule in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_values_reach_the_code_that_uses_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from evaltasks.engine.history import resolve_history_dir
    from evaltasks.engine.progress import metric_running, recorded_metrics, stop_grace_s
    from evaltasks.index import _segments, default_index_dir
    from evaltasks.server.temporary import database_template_dir

    for name in [variable_name(field) for field in Settings.model_fields]:
        monkeypatch.delenv(name, raising=False)
    assert stop_grace_s() == 10.0 and _segments.max_segments() == 32
    assert default_index_dir() == Path(".evaltasks/index")
    monkeypatch.setenv("EVALTASKS_STOP_GRACE_S", " 2.5 ")
    monkeypatch.setenv("EVALTASKS_INDEX_MAX_SEGMENTS", "4")
    monkeypatch.setenv("EVALTASKS_INDEX_DIR", str(tmp_path / "idx"))
    monkeypatch.setenv("EVALTASKS_CACHE_DIR", str(tmp_path / "cache"))
    assert stop_grace_s() == 2.5  # read again at each call: a variable set later is seen
    assert _segments.max_segments() == 4
    assert default_index_dir() == tmp_path / "idx"
    assert database_template_dir() == tmp_path / "cache" / "prefect-db"
    assert resolve_history_dir(tmp_path / "s.yaml", None, env={"EVALTASKS_HISTORY_DIR": "runs"}) == Path("runs")
    assert resolve_history_dir(tmp_path / "s.yaml", None, env={"EVALTASKS_HISTORY_DIR": "  "}) is None  # blank: unset
    (tmp_path / "state" / "metrics").mkdir(parents=True)
    monkeypatch.setenv("EVALTASKS_RUN_STATE", str(tmp_path / "state"))
    with metric_running("Recorded"):
        assert recorded_metrics(tmp_path / "state") == ["Recorded"]
    assert recorded_metrics(tmp_path / "state") == []
    monkeypatch.setenv("EVALTASKS_STOP_GRACE_S", "soon")
    with pytest.raises(SettingsError, match=r"^EVALTASKS_STOP_GRACE_S='soon': input should be a valid number"):
        stop_grace_s()
    with metric_running("StillRecorded"):  # a bad unrelated variable does not stop the run's records
        assert recorded_metrics(tmp_path / "state") == ["StillRecorded"]


@pytest.mark.parametrize("value", ["2.5", " 7 ", "", "   ", "abc", "-1", "0", "inf", "nan", "1e-3"])
def test_the_supervisor_reads_the_grace_period_by_the_settings_rule(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """The parent of ``evaltasks run`` reads EVALTASKS_STOP_GRACE_S without pydantic: the value Settings accepts,
    else (a value the run itself refuses with exit 2) the default."""
    from evaltasks import supervisor

    monkeypatch.setenv("EVALTASKS_STOP_GRACE_S", value)
    try:
        expected = get_settings().stop_grace_s
    except SettingsError:
        expected = 10.0
    assert supervisor._grace_s() == expected
    assert math.isfinite(expected) and expected > 0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", True),
        ("yes", True),
        ("please", True),
        ("0", False),
        ("OFF", False),
        (" false ", False),
        ("No", False),
        ("", False),
    ],
)
def test_no_server_reads_the_same_in_the_client_and_the_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str, expected: bool
) -> None:
    """The server's client decides with the standard library; its answer is the Settings field's."""
    from evaltasks._env import NO_SERVER_VARIABLE, env_value, flag_value

    monkeypatch.setenv(NO_SERVER_VARIABLE, value)
    assert get_settings().no_server is expected
    assert flag_value(env_value(NO_SERVER_VARIABLE) or "0") is expected


def test_secret_variables_are_the_names_redaction_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    from evaltasks import _redact

    monkeypatch.setenv("EVALTASKS_SECRET_VARIABLES", "MY_TOKEN, OTHER_TOKEN MY_TOKEN")
    monkeypatch.setenv("MY_TOKEN", "a-secret-value-123")
    assert get_settings().secret_variables == ("MY_TOKEN", "OTHER_TOKEN")
    assert _redact.secret_variable_names()[-2:] == list(get_settings().secret_variables)
    assert _redact.redact("key a-secret-value-123 here") == "key *** here"


def test_only_reads_the_named_fields_and_other_evaltasks_variables_are_ignored() -> None:
    env = {"EVALTASKS_STOP_GRACE_S": "x", "EVALTASKS_RUN_STATE": "/tmp/s", "EVALTASKS_ACTION_PYTHON": "/usr/bin/py"}
    assert get_settings(env, only=["run_state"]).run_state == Path("/tmp/s")
    with pytest.raises(SettingsError, match="EVALTASKS_STOP_GRACE_S"):
        get_settings(env)
    assert get_settings({"EVALTASKS_ACTION_PYTHON": "/usr/bin/py"}) == Settings()


def test_an_unknown_evaltasks_variable_does_not_stop_a_command(tmp_path: Path) -> None:
    env = {**subprocess_env(tmp_path / "prefect-home"), "EVALTASKS_ACTION_PYTHON": "/nowhere/python"}
    done = subprocess.run(
        [sys.executable, "-m", "evaltasks", "schema"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 0 and done.stdout.startswith("{"), done.stderr
