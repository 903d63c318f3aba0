"""Runs ``action.yml``'s composite steps on this machine the way a GitHub runner does (``action/run-local.sh``).

A developer's tool, not part of the shipped action: it lives beside the CI scripts and reads the action from the
repository root (``action.yml``, ``action/``).

What it reproduces: the ``inputs``/``github``/``runner``/``steps``/``env`` contexts; ``${{ }}`` templates in
``with:``/``env:``/``working-directory:``; ``if:`` conditions (``always()``, ``success()``, ``failure()``,
``cancelled()``, ``==``/``!=`` (strings compared case-insensitively, as GitHub does), ``<``/``<=``/``>``/``>=``,
``&&``, ``||``, ``!``, parentheses, string/number/boolean literals); ``run:`` steps in ``bash --noprofile --norc
-eo pipefail`` (GitHub's ``shell: bash``) with a fresh ``$GITHUB_OUTPUT`` and ``$GITHUB_STEP_SUMMARY`` per step;
workflow commands on stdout (``::error``/``::warning``/``::notice`` collected as annotations,
``::stop-commands::TOKEN`` … ``::TOKEN::`` honoured, ``::add-mask::`` values hidden from the echoed log);
a failed step skipping the later steps whose condition is not ``always()``/``failure()``.

The ``uses:`` steps are replaced by local equivalents: ``actions/setup-python`` → this interpreter;
``actions/cache/restore`` and ``actions/cache/save`` → a directory store (exact key, else the newest entry
matching a restore-key prefix; saved keys are immutable), by default ``.evaltasks/action-cache`` in the workspace
(:func:`default_cache_store`: one per checkout, as the Actions cache is one per repository, so a second clone never
compares with the first clone's baseline); ``actions/upload-artifact`` → a copy under
``$RUNNER_TEMP/artifacts/NAME``. Anything else is an error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ACTION_ROOT = Path(__file__).resolve().parent.parent
_TEMPLATE = re.compile(r"\$\{\{(.*?)\}\}", re.S)
_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)|(?P<op>==|!=|<=|>=|&&|\|\||[!<>().,])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*))"
)


class ExpressionError(ValueError):
    """An expression this runner cannot evaluate (names the expression)."""


class _Parser:
    """Recursive-descent evaluator of GitHub expressions (the subset in the module docstring)."""

    def __init__(self, text: str, lookup: Any, status: dict[str, bool]) -> None:
        self.text, self.lookup, self.status = text, lookup, status
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise ExpressionError(f"cannot parse expression {text!r} at {text[pos:]!r}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None or (value is not None and token[1] != value):
            raise ExpressionError(f"expected {value or 'a value'} in {self.text!r}")
        self.i += 1
        return token

    def parse(self) -> Any:
        value = self.or_()
        if self.peek() is not None:
            raise ExpressionError(f"unexpected {self.peek()[1]!r} in {self.text!r}")  # type: ignore[index]
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == ("op", "||"):
            self.take()
            right = self.and_()
            value = value if truthy(value) else right
        return value

    def and_(self) -> Any:
        value = self.compare()
        while self.peek() == ("op", "&&"):
            self.take()
            right = self.compare()
            value = right if truthy(value) else value
        return value

    def compare(self) -> Any:
        value = self.unary()
        token = self.peek()
        if token and token[1] in ("==", "!=", "<", "<=", ">", ">="):
            self.take()
            return compare(value, token[1], self.unary())
        return value

    def unary(self) -> Any:
        if self.peek() == ("op", "!"):
            self.take()
            return not truthy(self.unary())
        return self.primary()

    def primary(self) -> Any:
        kind, value = self.take()
        if kind == "str":
            return value[1:-1].replace("''", "'")
        if kind == "num":
            return float(value)
        if value == "(":
            inner = self.or_()
            self.take(")")
            return inner
        if kind == "name":
            if self.peek() == ("op", "("):
                self.take("(")
                self.take(")")
                if value not in self.status:
                    raise ExpressionError(f"unsupported function {value}() in {self.text!r}")
                return self.status[value]
            if value in ("true", "false"):
                return value == "true"
            if value == "null":
                return None
            return self.lookup(value)
        raise ExpressionError(f"unexpected {value!r} in {self.text!r}")


def truthy(value: Any) -> bool:
    """GitHub's truthiness: false, 0, '', null are false."""
    return value not in (None, False, 0, 0.0, "")


def compare(left: Any, op: str, right: Any) -> bool:
    """GitHub's loose comparison: strings case-insensitively, mixed types as numbers."""

    def number(v: Any) -> float:
        if v is None or v == "":
            return 0.0
        if isinstance(v, bool):
            return float(v)
        try:
            return float(v)
        except (TypeError, ValueError):
            return float("nan")

    if isinstance(left, str) and isinstance(right, str):
        a, b = left.lower(), right.lower()
    elif left is None and right is None:
        a, b = 0.0, 0.0
    else:
        a, b = number(left), number(right)  # type: ignore[assignment]
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    try:
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]  # type: ignore[operator]
    except TypeError:
        return False


def to_string(value: Any) -> str:
    """How a template renders a value: null → '', booleans lower-case, whole numbers without '.0'."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class LocalRunner:
    """One run of the composite action (see the module docstring)."""

    def __init__(
        self, inputs: dict[str, str], github: dict[str, Any], temp: Path, cache_store: Path, workspace: Path
    ) -> None:
        self.action = yaml.safe_load((ACTION_ROOT / "action.yml").read_text(encoding="utf-8"))
        declared = self.action.get("inputs") or {}
        unknown = sorted(set(inputs) - set(declared))
        if unknown:
            raise SystemExit(f"run-local: unknown input(s): {', '.join(unknown)}")
        self.github = github
        self.temp, self.store, self.workspace = temp, cache_store, workspace
        self.runner = {
            "os": {"linux": "Linux", "darwin": "macOS", "win32": "Windows"}.get(sys.platform, "Linux"),
            "temp": str(temp),
            "arch": "X64",
        }
        self.steps: dict[str, dict[str, Any]] = {}
        self.failed = False
        self.annotations: list[dict[str, str]] = []
        self.masks: list[str] = []
        self.summary_parts: list[str] = []
        self.log: list[str] = []
        self.inputs: dict[str, str] = {}
        for name, spec in declared.items():
            if name in inputs:
                self.inputs[name] = inputs[name]
            else:
                default = str((spec or {}).get("default", ""))
                self.inputs[name] = self.render(default) if "${{" in default else default
            if (spec or {}).get("required") and not self.inputs[name]:
                raise SystemExit(f"run-local: input '{name}' is required")

    # -- expressions -------------------------------------------------------------------------------------
    def lookup(self, name: str) -> Any:
        root, _, rest = name.partition(".")
        contexts: dict[str, Any] = {
            "inputs": self.inputs,
            "github": self.github,
            "runner": self.runner,
            "steps": self.steps,
            "env": dict(os.environ),
        }
        if root not in contexts:
            raise ExpressionError(f"unknown context '{root}' in {name!r}")
        value: Any = contexts[root]
        for part in rest.split(".") if rest else []:
            value = value.get(part) if isinstance(value, dict) else None
        return value

    def evaluate(self, expression: str) -> Any:
        status = {"always": True, "success": not self.failed, "failure": self.failed, "cancelled": False}
        return _Parser(expression, self.lookup, status).parse()

    def render(self, text: Any) -> str:
        return _TEMPLATE.sub(lambda m: to_string(self.evaluate(m.group(1))), str(text))

    # -- steps ---------------------------------------------------------------------------------------------
    def run(self) -> int:
        """Run every step in order; prints each step's seconds and, at the end, the time to verdict (from the
        first step to the result of the last one, the gate). 1 when a step failed, else 0."""
        job_start = time.time()
        for index, step in enumerate(self.action["runs"]["steps"]):
            name = step.get("name") or step.get("uses") or f"step {index}"
            condition = str(step.get("if", "success()"))
            condition = condition[3:-2] if condition.startswith("${{") and condition.endswith("}}") else condition
            step_id = step.get("id", f"__step{index}")
            if not truthy(self.evaluate(condition)):
                self.emit(f"── skipped: {name}")
                self.steps[step_id] = {"outputs": {}, "outcome": "skipped", "conclusion": "skipped"}
                continue
            self.emit(f"── {name}")
            started = time.time()
            try:
                outputs, ok = self.run_script(step) if "run" in step else self.run_uses(step)
            except Exception as exc:  # noqa: BLE001 - a broken step fails the job, as on a runner
                self.emit(f"run-local: step '{name}' failed: {type(exc).__name__}: {exc}")
                outputs, ok = {}, False
            self.emit(f"   ({time.time() - started:.1f} s, {'success' if ok else 'failure'})")
            outcome = "success" if ok else "failure"
            self.steps[step_id] = {"outputs": outputs, "outcome": outcome, "conclusion": outcome}
            self.failed = self.failed or not ok
        self.emit(f"── time to verdict: {time.time() - job_start:.1f} s (job start to the gate step's result)")
        return 1 if self.failed else 0

    def outputs(self) -> dict[str, str]:
        """The composite action's declared outputs, evaluated after the run."""
        return {
            name: self.render((spec or {}).get("value", ""))
            for name, spec in (self.action.get("outputs") or {}).items()
        }

    def base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "GITHUB_ACTIONS": "true",
                "CI": "true",
                "GITHUB_ACTION_PATH": str(ACTION_ROOT),
                "GITHUB_WORKSPACE": str(self.workspace),
                "RUNNER_TEMP": str(self.temp),
                "RUNNER_OS": self.runner["os"],
                "GITHUB_EVENT_NAME": self.github["event_name"],
                "GITHUB_EVENT_PATH": self.github["event_path"],
                "GITHUB_REF": self.github["ref"],
                "GITHUB_REF_NAME": self.github["ref_name"],
                "GITHUB_BASE_REF": self.github["base_ref"],
                "GITHUB_SHA": self.github["sha"],
                "GITHUB_REPOSITORY": self.github["repository"],
                "GITHUB_RUN_ID": self.github["run_id"],
                "GITHUB_RUN_ATTEMPT": self.github["run_attempt"],
                "GITHUB_JOB": self.github["job"],
                "GITHUB_SERVER_URL": self.github["server_url"],
                "GITHUB_API_URL": self.github["api_url"],
            }
        )
        return env

    def run_script(self, step: dict[str, Any]) -> tuple[dict[str, str], bool]:
        if step.get("shell") != "bash":
            raise ValueError(f"step {step.get('name')!r}: only shell: bash is emulated (got {step.get('shell')!r})")
        env = self.base_env()
        env.update({k: self.render(v) for k, v in (step.get("env") or {}).items()})
        self.temp.mkdir(parents=True, exist_ok=True)
        output_file = self.temp / f"output-{uuid.uuid4().hex}"
        summary_file = self.temp / f"summary-{uuid.uuid4().hex}"
        output_file.touch()
        summary_file.touch()
        env["GITHUB_OUTPUT"], env["GITHUB_STEP_SUMMARY"] = str(output_file), str(summary_file)
        cwd = self.render(step.get("working-directory", "")) or str(self.workspace)
        proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", str(step["run"])],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        stop_token: str | None = None
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            if stop_token is not None:
                if line == f"::{stop_token}::":
                    stop_token = None
                    continue
                self.emit(line)
                continue
            command = re.match(r"^::([a-z-]+)( [^:]*)?::(.*)$", line)
            if command is None:
                self.emit(line)
                continue
            name, props, data = command.group(1), command.group(2) or "", command.group(3)
            if name == "stop-commands":
                stop_token = data
            elif name == "add-mask":
                if data:
                    self.masks.append(data)
            elif name in ("error", "warning", "notice"):
                title = re.search(r"title=([^,]*)", props)
                self.annotations.append(
                    {"level": name, "title": _unescape(title.group(1)) if title else "", "message": _unescape(data)}
                )
                self.emit(f"{name.upper()}: {_unescape(data)}")
            else:
                self.emit(line)
        code = proc.wait()
        summary = summary_file.read_text(encoding="utf-8")
        if summary:
            self.summary_parts.append(summary)
        return parse_output_file(output_file.read_text(encoding="utf-8")), code == 0

    def run_uses(self, step: dict[str, Any]) -> tuple[dict[str, str], bool]:
        uses = str(step["uses"]).split("@", 1)[0]
        given = {k: self.render(v) for k, v in (step.get("with") or {}).items()}
        if uses == "actions/setup-python":
            self.emit(
                f"   (emulated: this interpreter, {sys.version.split()[0]}; asked for {given.get('python-version')})"
            )
            return {"python-path": sys.executable, "python-version": sys.version.split()[0]}, True
        if uses == "actions/cache/restore":
            return self.cache_restore(given), True
        if uses == "actions/cache/save":
            return self.cache_save(given), True
        if uses == "actions/upload-artifact":
            source, target = Path(given["path"]), self.temp / "artifacts" / given["name"]
            if source.exists():
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(source, target) if source.is_dir() else shutil.copy2(source, target)
                self.emit(f"   (emulated: uploaded {source} as artifact {given['name']})")
            else:
                self.emit(f"   warning: no files found at {source}")
            return {}, True
        raise ValueError(f"uses: {step['uses']} is not emulated by run-local")

    def _entry(self, key: str) -> Path:
        return self.store / re.sub(r"[^A-Za-z0-9._-]", "_", key)

    def cache_restore(self, given: dict[str, str]) -> dict[str, str]:
        key, path = given["key"], Path(given["path"])
        entry = self._entry(key)
        matched = key if entry.exists() else ""
        if not matched:
            for prefix in [p.strip() for p in given.get("restore-keys", "").splitlines() if p.strip()]:
                candidates = sorted(
                    (
                        p
                        for p in self.store.glob("*")
                        if (p / "key").exists() and (p / "key").read_text(encoding="utf-8").startswith(prefix)
                    ),
                    key=lambda p: p.stat().st_mtime_ns,
                    reverse=True,
                )
                if candidates:
                    entry, matched = candidates[0], candidates[0].joinpath("key").read_text(encoding="utf-8")
                    break
        if not matched:
            self.emit(f"   (emulated cache: no entry for {key})")
            return {"cache-hit": "false", "cache-primary-key": key, "cache-matched-key": ""}
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(entry / "data", path)
        self.emit(f"   (emulated cache: restored {matched})")
        return {
            "cache-hit": "true" if matched == key else "false",
            "cache-primary-key": key,
            "cache-matched-key": matched,
        }

    def cache_save(self, given: dict[str, str]) -> dict[str, str]:
        key, path = given["key"], Path(given["path"])
        entry = self._entry(key)
        if entry.exists():
            self.emit(f"   (emulated cache: {key} exists; keys are immutable)")
        elif not path.exists():
            self.emit(f"   warning: cache path {path} does not exist, nothing saved")
        else:
            shutil.copytree(path, entry / "data")
            (entry / "key").write_text(key, encoding="utf-8")
            self.emit(f"   (emulated cache: saved {key})")
        return {}

    def emit(self, line: str) -> None:
        for secret in self.masks:
            line = line.replace(secret, "***")
        self.log.append(line)
        print(line, flush=True)


def _unescape(text: str) -> str:
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def parse_output_file(text: str) -> dict[str, str]:
    """Parse a ``$GITHUB_OUTPUT`` file: ``name=value`` lines and ``name<<DELIMITER`` … ``DELIMITER`` blocks."""
    outputs: dict[str, str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            outputs[name] = "\n".join(lines[i + 1 : end])
            i = end + 1
            continue
        if "=" in line:
            name, value = line.split("=", 1)
            outputs[name] = value
        i += 1
    return outputs


def _event(kind: str, repository: str, base_ref: str) -> dict[str, Any]:
    repo = {"full_name": repository, "name": repository.split("/")[-1], "fork": False}
    if kind == "push":
        return {"ref": f"refs/heads/{base_ref}", "repository": repo}
    head_repo = {"full_name": "contributor/" + repo["name"], "fork": True} if kind == "fork" else repo
    return {
        "action": "synchronize",
        "number": 1,
        "repository": repo,
        "pull_request": {
            "number": 1,
            "head": {"ref": "feature", "sha": "0" * 40, "repo": head_repo},
            "base": {"ref": base_ref, "sha": "1" * 40, "repo": repo},
        },
    }


def default_cache_store(workspace: Path) -> Path:
    """The emulated Actions cache of the checkout at ``workspace`` (its venv, index, model and Prefect caches,
    and the baselines pushes saved): ``WORKSPACE/.evaltasks/action-cache`` (``.evaltasks/`` is git-ignored)."""
    return workspace.resolve() / ".evaltasks" / "action-cache"


def main(argv: list[str] | None = None) -> int:
    """Command line of ``action/run-local.sh`` (``--help``)."""
    parser = argparse.ArgumentParser(prog="action/run-local.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--with",
        dest="inputs",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an action input (repeatable), e.g. --with suite=examples/quickstart/suite.yaml",
    )
    parser.add_argument(
        "--event",
        choices=("pull_request", "push", "fork"),
        default="pull_request",
        help="the event to simulate (fork: a pull request from a fork); default pull_request",
    )
    parser.add_argument("--event-path", help="a real event payload JSON instead of the simulated one")
    parser.add_argument("--base-ref", default="main", help="base branch (pull requests) / pushed branch (push)")
    parser.add_argument("--repository", default="example/evaltasks-demo")
    parser.add_argument("--api-url", default=os.environ.get("GITHUB_API_URL", "").strip() or "https://api.github.com")
    parser.add_argument(
        "--token", default=os.environ.get("GITHUB_TOKEN", "").strip(), help="github.token (default $GITHUB_TOKEN)"
    )
    parser.add_argument("--workspace", default=os.getcwd(), help="GITHUB_WORKSPACE (default: the current directory)")
    parser.add_argument("--runner-temp", default=None, help="RUNNER_TEMP (default: a new temporary directory)")
    parser.add_argument(
        "--cache-store",
        default=None,
        help="directory standing in for the Actions cache, baselines included (default: "
        ".evaltasks/action-cache in the workspace: one per checkout)",
    )
    parser.add_argument("--run-id", default=str(int(time.time())))
    parser.add_argument("--outputs-json", help="write the action's outputs and annotations to this JSON file")
    args = parser.parse_args(argv)

    inputs = {}
    for item in args.inputs:
        if "=" not in item:
            parser.error(f"--with expects NAME=VALUE, got {item!r}")
        name, value = item.split("=", 1)
        inputs[name] = value
    temp = Path(
        args.runner_temp
        or os.path.join(os.environ.get("TMPDIR", "").strip() or "/tmp", f"evaltasks-runner-{uuid.uuid4().hex[:8]}")
    )
    temp.mkdir(parents=True, exist_ok=True)
    if args.event_path:
        event_path = Path(args.event_path)
        event = json.loads(event_path.read_text(encoding="utf-8"))
        event_name = "pull_request" if "pull_request" in event else "push"
    else:
        event = _event(args.event, args.repository, args.base_ref)
        event_path = temp / "event.json"
        event_path.write_text(json.dumps(event), encoding="utf-8")
        event_name = "push" if args.event == "push" else "pull_request"
    pr = event.get("pull_request") or {}
    github = {
        "token": args.token,
        "event_name": event_name,
        "event_path": str(event_path),
        "event": event,
        "ref": f"refs/pull/{pr.get('number')}/merge" if pr else f"refs/heads/{args.base_ref}",
        "ref_name": f"{pr.get('number')}/merge" if pr else args.base_ref,
        "base_ref": (pr.get("base") or {}).get("ref", "") if pr else "",
        "sha": "f" * 40,
        "repository": (event.get("repository") or {}).get("full_name", args.repository),
        "run_id": args.run_id,
        "run_attempt": "1",
        "job": "evaluate",
        "server_url": "https://github.com",
        "api_url": args.api_url,
        "action_path": str(ACTION_ROOT),
        "workspace": args.workspace,
    }
    store = Path(args.cache_store) if args.cache_store else default_cache_store(Path(args.workspace))
    print(f"── emulated Actions cache (baselines included): {store}")
    runner = LocalRunner(inputs, github, temp, store, Path(args.workspace).resolve())
    code = runner.run()
    outputs = runner.outputs()
    print("── outputs: " + json.dumps(outputs))
    if os.environ.get("GITHUB_OUTPUT"):  # run-local inside a real job: pass the outputs on
        sys.path.insert(0, str(ACTION_ROOT / "action"))
        from _github import set_output

        for name, value in outputs.items():
            set_output(name, value)
    if args.outputs_json:
        Path(args.outputs_json).write_text(
            json.dumps(
                {
                    "exit_code": code,
                    "outputs": outputs,
                    "annotations": runner.annotations,
                    "summary": "".join(runner.summary_parts),
                    "runner_temp": str(temp),
                    "steps": {k: {"outcome": v["outcome"], "outputs": v["outputs"]} for k, v in runner.steps.items()},
                },
                indent=2,
            ),
            encoding="utf-8",
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
