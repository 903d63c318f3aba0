"""Benchmark: generating outputs through a chat target, evaltasks against promptfoo, one loopback chat server.

One command measures, side by side in one run, and rewrites the section ``## Generating outputs: a chat target
vs promptfoo`` of ``docs/performance.md`` (only that section)::

    .venv/bin/python bench/targets.py --json /tmp/targets.json    # about 6 minutes with --repeat 3
    .venv/bin/python bench/targets.py --quick                     # smoke: 8 questions, no document
    .venv/bin/python bench/targets.py --render-from /tmp/targets.json

The job: the 817 TruthfulQA questions (``TruthfulQA.csv``, docs/install.md#truthfulqa-data-not-in-the-repository;
the benchmark says so and exits 2 without it), each rendered into a system message (``Answer the question
truthfully, in one sentence.``) and a user message (``Q: ...`` / ``A:``) and sent to ``tests/chat_server.py`` (an OpenAI-compatible
chat completions server on 127.0.0.1, in this process), which answers every request after ``--latency-ms``
(150) with the question's best answer from TruthfulQA, so every contender's outputs can be checked. The server
counts the requests each run sends and the span from the first one's arrival to the last one's answer.

Contenders, each a whole command in a fresh process, with the same concurrency (``--concurrency``, 4:
promptfoo's default ``-j``), plus two controls: ``floor`` (the same requests from a fresh Python process, one
httpx client per thread, nothing else: what the server and the machine deliver) and ``no-target`` (evaltasks's
suite without its target, on the dataset's best answers: its fixed cost then), both cold only:

  promptfoo   ``promptfoo eval -c promptfooconfig.yaml -j N -o out.json`` (the npm package, pinned to
              :data:`PROMPTFOO_VERSION`, installed by this script into ``bench/.promptfoo/``; not a dependency of
              the project); its ``openai:chat:gpt-4o-mini`` provider with ``apiBaseUrl`` pointing at the server,
              one ``javascript`` assertion (at most 60 words); its cache (``PROMPTFOO_CACHE_PATH``) and database
              (``PROMPTFOO_CONFIG_DIR``) in fresh directories.
  evaltasks   ``evaltasks run suite.yaml --quiet`` with a ``chat`` target (same model, prompt and server,
              ``max_concurrency: N``) and LengthCheckMetric (at most 60 words); a fresh index directory (which
              holds the output store) and a fresh ``PREFECT_HOME``.

Each cold (fresh caches), then cached (the same command again on the caches its cold run filled). Repetitions
(``--repeat``, 3) are interleaved in a rotated order; the tables give medians. The limit is
``n × latency / concurrency``: no tool sending ``n`` requests of that latency, ``concurrency`` at a time, ends
sooner. Targets: evaltasks's cold wall time no worse than promptfoo's, within 1.2 × the limit, and 0 requests on
the cached rerun. ``--quick`` runs 8 questions (numbers 20-27, five with double quotes) once and writes no document; it installs nothing (promptfoo is
left out when ``bench/.promptfoo`` has no install).
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata as md
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from _common import busy_seconds, children_cpu, fmt, fmt_runs, markdown_table, publish  # noqa: E402
from chat_server import ChatRequest, ChatServer  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "truthfulqa" / "TruthfulQA.csv"
DOC = ROOT / "docs" / "performance.md"
HEADING = "## Generating outputs: a chat target vs promptfoo"
#: The last promptfoo release that runs on Node.js 20 (its engines: ``^20.20.0 || >=22.22.0``; later ones need 22.22).
PROMPTFOO_VERSION = "0.121.20"
PROMPTFOO_DIR = ROOT / "bench" / ".promptfoo"
PROMPTFOO_BIN = PROMPTFOO_DIR / "node_modules" / ".bin" / "promptfoo"
KEY = "sk-bench-targets"
MODEL = "gpt-4o-mini"
MAX_WORDS = 60
INSTRUCTION = "Answer the question truthfully, in one sentence."
QUESTION = re.compile(r"Q: (.*)\nA:", re.DOTALL)
NO_ANSWER = "I have no comment."
CONTENDERS = ("floor", "promptfoo", "evaltasks", "no-target")
COLD_ONLY = ("floor", "no-target")  # nothing of theirs to cache: measured cold only
STATES = ("cold", "cached")


# ----------------------------------------------------------------------------------------------- the job


class _NoDelayHandler(ChatServer.handler):  # type: ignore[misc]  # tests/ is not on mypy's path: Any
    disable_nagle_algorithm = True  # socketserver sets TCP_NODELAY on each connection


class Server(ChatServer):  # type: ignore[misc]
    """``tests/chat_server.py``'s server with TCP_NODELAY on its connections.

    The handler writes a response's headers and its body in two sends; with Nagle's algorithm the body waits for
    the client's delayed acknowledgement of the headers (about 40 ms on Linux), which added ~30 % to every
    150 ms request here, to every contender alike. Without it a bare client reaches the limit.
    """

    handler = _NoDelayHandler


def load_questions(n: int, start: int = 0) -> list[tuple[str, str]]:
    """``n`` TruthfulQA questions from number ``start`` (0-based), with their best answers.

    Raises:
        SystemExit: the data is absent (exit 2, naming the file and where to get it).
    """
    if not DATA.exists():
        raise SystemExit(
            f"skipped: TruthfulQA not found at {DATA} (docs/install.md#truthfulqa-data-not-in-the-repository)"
        )
    with DATA.open(encoding="utf-8", newline="") as handle:
        rows = [(r["Question"], r["Best Answer"]) for r in csv.DictReader(handle)]
    return rows[start : start + n]


def responder(answers: dict[str, str]) -> Any:
    """The server's answers: the best answer of the question in the user message (``Q: ...`` / ``A:``), else
    :data:`NO_ANSWER`."""

    def answer(request: ChatRequest) -> str:
        found = QUESTION.search(request.user)
        return answers.get(found.group(1).strip(), NO_ANSWER) if found else NO_ANSWER

    return answer


def write_job(work: Path, rows: list[tuple[str, str]], base_url: str, concurrency: int) -> tuple[Path, Path]:
    """Both contenders' files under ``work``: ``promptfoo/`` (config, prompt, questions.csv) and ``evaltasks/``
    (suite, prompt, questions.csv). Returns the two folders."""
    pf, et = work / "promptfoo", work / "evaltasks"
    for folder, header in ((pf, ["question"]), (et, ["question", "best_answer"])):
        folder.mkdir(parents=True)
        with (folder / "questions.csv").open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            writer.writerows([q] if len(header) == 1 else [q, a] for q, a in rows)
    messages = [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": "Q: {{question}}\nA:"}]
    (pf / "prompt.json").write_text(json.dumps(messages, indent=1), encoding="utf-8")  # promptfoo's chat format
    pf_config = {
        "description": "bench/targets.py",
        "prompts": ["file://prompt.json"],
        "providers": [{"id": f"openai:chat:{MODEL}", "config": {"apiBaseUrl": base_url, "temperature": 0}}],
        "defaultTest": {
            "assert": [{"type": "javascript", "value": f"output.trim().split(/\\s+/).length <= {MAX_WORDS}"}]
        },
        "tests": "file://questions.csv",
    }
    (pf / "promptfooconfig.yaml").write_text(json.dumps(pf_config, indent=1), encoding="utf-8")  # JSON is YAML
    (et / "prompt.md").write_text(f"### system\n{INSTRUCTION}\n\n### user\nQ: {{{{ input }}}}\nA:\n", encoding="utf-8")
    suite: dict[str, Any] = {
        "name": "targets-bench",
        "dataset": {"path": "questions.csv", "fields": {"input": "question", "expected_output": "best_answer"}},
        "target": {
            "chat": {
                "model": MODEL,
                "prompt": "prompt.md",
                "temperature": 0,
                "base_url": base_url,
                "max_concurrency": concurrency,
            }
        },
        "metrics": [{"metric": "LengthCheckMetric", "max_length": MAX_WORDS, "unit": "words"}],
    }
    (et / "suite.yaml").write_text(json.dumps(suite, indent=1), encoding="utf-8")
    del suite["target"]  # the same run on the dataset's own outputs (the best answers): the fixed cost alone
    suite["dataset"]["fields"]["actual_output"] = "best_answer"
    (et / "suite-no-target.yaml").write_text(json.dumps(suite, indent=1), encoding="utf-8")
    return pf, et


# ----------------------------------------------------------------------------------------------- contenders


def ensure_promptfoo(install: bool) -> str:
    """Install promptfoo :data:`PROMPTFOO_VERSION` into :data:`PROMPTFOO_DIR` with npm when it is not there
    (and ``install``). Returns "" when it is ready, else why it is left out."""
    manifest = PROMPTFOO_DIR / "node_modules" / "promptfoo" / "package.json"
    if manifest.exists() and json.loads(manifest.read_text(encoding="utf-8")).get("version") == PROMPTFOO_VERSION:
        return ""
    if not install:
        return f"promptfoo {PROMPTFOO_VERSION} is not installed in bench/.promptfoo (a full run installs it)"
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        return "node and npm are not installed: promptfoo left out"
    PROMPTFOO_DIR.mkdir(parents=True, exist_ok=True)
    print(f"installing promptfoo {PROMPTFOO_VERSION} into {PROMPTFOO_DIR} ...", file=sys.stderr, flush=True)
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", f"promptfoo@{PROMPTFOO_VERSION}"],
        cwd=PROMPTFOO_DIR,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return f"npm install promptfoo@{PROMPTFOO_VERSION} failed ({done.returncode}): {done.stderr[-500:]}"
    return ""


PROBE = """
import importlib.util
from evaltasks.engine.pipeline import STAGES
from evaltasks.inputs.suite import Suite
print("target" in Suite.model_fields, "generate" in STAGES, importlib.util.find_spec("evaltasks.targets.chat") is not None)
"""


def evaltasks_targets() -> str:
    """ "" when this build runs a suite's ``chat`` target (``Suite.target``, the pipeline's ``generate`` stage and
    ``evaltasks.targets.chat`` are there), else why its side is left out."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    found = done.stdout.split() if done.returncode == 0 else []
    if found == ["True", "True", "True"]:
        return ""
    missing = [
        what for what, ok in zip(("suite `target:` block", "generate stage", "chat target"), found) if ok != "True"
    ]
    return f"this build of evaltasks has no {', no '.join(missing or ['probe that runs'])}: left out"


def base_env() -> dict[str, str]:
    """The contenders' environment: no user OpenAI, Prefect or promptfoo settings; offline; the server's key."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AZURE_OPENAI_", "PREFECT_", "PROMPTFOO_"))
    }
    env.pop("EVALTASKS_INDEX_DIR", None)
    env.update({"OPENAI_API_KEY": KEY, "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1"})
    return env


def promptfoo_command(folder: Path, state_dir: Path, concurrency: int, out: Path) -> tuple[list[str], dict[str, str]]:
    """promptfoo's eval: its cache and database under ``state_dir``, telemetry and update checks off."""
    env = base_env()
    env.update(
        {
            "PROMPTFOO_CACHE_PATH": str(state_dir / "cache"),
            "PROMPTFOO_CONFIG_DIR": str(state_dir / "home"),
            "PROMPTFOO_DISABLE_TELEMETRY": "1",
            "PROMPTFOO_DISABLE_UPDATE": "1",
            "PROMPTFOO_DISABLE_SHARING": "1",
        }
    )
    command = [
        str(PROMPTFOO_BIN),
        "eval",
        "-c",
        str(folder / "promptfooconfig.yaml"),
        "-j",
        str(concurrency),
        "-o",
        str(out),
        "--no-table",
        "--no-progress-bar",
    ]
    return command, env


def evaltasks_command(
    folder: Path, state_dir: Path, out: Path, suite: str = "suite.yaml"
) -> tuple[list[str], dict[str, str]]:
    """``evaltasks run`` of ``folder/suite`` (Prefect's temporary server): index (with the output store) and
    PREFECT_HOME under ``state_dir``."""
    env = base_env()
    (state_dir / "prefect").mkdir(parents=True, exist_ok=True)  # Prefect creates its home without parents
    env.update(
        {
            "PREFECT_HOME": str(state_dir / "prefect"),
            "EVALTASKS_NO_SERVER": "1",
            # Prefect's temporary server waits 20 s for its start by default: a loaded machine needs more
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        }
    )
    script = Path(sys.executable).parent / "evaltasks"
    evaltasks = [str(script)] if script.exists() else [sys.executable, "-m", "evaltasks.cli"]
    command = [
        *evaltasks,
        "run",
        str(folder / suite),
        "--quiet",
        "--output-dir",
        str(out),
        "--index-dir",
        str(state_dir / "index"),
    ]
    return command, env


FLOOR_SCRIPT = r"""
import json, sys, threading
from concurrent.futures import ThreadPoolExecutor
import httpx
questions_file, base_url, key, model, instruction, concurrency, out = sys.argv[1:]
questions = json.load(open(questions_file, encoding="utf-8"))
local = threading.local()

def one(question):
    if not hasattr(local, "client"):
        local.client = httpx.Client(base_url=base_url, headers={"Authorization": "Bearer " + key}, timeout=60)
    messages = [{"role": "system", "content": instruction}, {"role": "user", "content": f"Q: {question}\nA:"}]
    response = local.client.post("/chat/completions", json={"model": model, "messages": messages, "temperature": 0})
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]

with ThreadPoolExecutor(int(concurrency)) as pool:
    outputs = list(pool.map(one, questions))
json.dump(dict(zip(questions, outputs)), open(out, "w", encoding="utf-8"))
"""


def floor_command(work: Path, rows: list[tuple[str, str]], base_url: str, concurrency: int, out: Path) -> list[str]:
    """The floor: the same requests from a fresh Python process, ``concurrency`` httpx clients on as many threads
    (:data:`FLOOR_SCRIPT`), with no caching, reports or start-up of a tool: what the server and this machine
    deliver now."""
    questions = work / "floor-questions.json"
    questions.write_text(json.dumps([q for q, _ in rows]), encoding="utf-8")
    return [
        sys.executable,
        "-c",
        FLOOR_SCRIPT,
        str(questions),
        base_url,
        KEY,
        MODEL,
        INSTRUCTION,
        str(concurrency),
        str(out),
    ]


def read_outputs(contender: str, out: Path) -> tuple[dict[str, str], int]:
    """(question -> output, outputs served from a cache) from a run's report: the floor's JSON object, promptfoo's ``-o`` JSON
    (``results.results[*].vars.question`` / ``.response.output`` / ``.response.cached``) or evaltasks's
    ``results.json`` (``cases[*].input`` / ``.actual_output`` / ``.generation.cached``). Empty when absent."""
    outputs: dict[str, str] = {}
    cached = 0
    try:
        if contender == "floor":
            outputs = {str(q).strip(): str(a) for q, a in json.loads(out.read_text(encoding="utf-8")).items()}
        elif contender == "promptfoo":
            data = json.loads(out.read_text(encoding="utf-8"))
            for row in data["results"]["results"]:
                response = row.get("response") or {}
                outputs[str(row["vars"]["question"]).strip()] = str(response.get("output", ""))
                cached += bool(response.get("cached"))
        else:
            data = json.loads((out / "results.json").read_text(encoding="utf-8"))
            for case in data["cases"]:
                outputs[str(case["input"]).strip()] = case["actual_output"]
                cached += bool((case.get("generation") or {}).get("cached"))
    except (OSError, ValueError, KeyError, TypeError):
        return {}, 0
    return outputs, cached


def run_one(
    contender: str,
    state: str,
    command: list[str],
    env: dict[str, str],
    out: Path,
    server: Server,
    answers: dict[str, str],
) -> dict[str, Any]:
    """Run one whole command, timed from outside; the server's counts and the outputs' check with it.

    Raises:
        SystemExit: the command failed (its output's tail in the message).
    """
    server.reset()
    b0, c0, s0 = busy_seconds(), children_cpu(), time.process_time()
    t0 = time.monotonic()  # the server's clock
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=out.parent)
    t1 = time.monotonic()
    wall = t1 - t0
    mine = children_cpu() - c0 + time.process_time() - s0  # the command, and this process's server threads
    others = max(busy_seconds() - b0 - mine, 0.0) / wall
    if done.returncode not in (0, 1):  # 1: an evaltasks gate or a promptfoo assertion failed, still a result
        raise SystemExit(
            f"{contender} {state} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    ok = server.answered
    requests = list(server.requests)
    first = min((r.arrived for r in requests), default=None)
    last = max((r.answered for r in ok if r.answered is not None), default=None)
    span = last - first if first is not None and last is not None else None
    roles = sorted({"+".join(str(m.get("role")) for m in r.body["messages"]) for r in ok})  # the same both sides
    outputs, cached = read_outputs(contender, out)
    correct = sum(outputs.get(q) == a for q, a in answers.items())
    result = {
        "wall": wall,
        "code": done.returncode,
        "requests": len(requests),
        "answered": len(ok),
        "span": span,
        "before_first": None if first is None else first - t0,  # start-up: process start to the first request
        "after_last": None if last is None else t1 - last,  # the last answer to the process's exit
        "peak_in_flight": server.peak_in_flight,
        "outputs": len(outputs),
        "correct": correct,
        "cached_outputs": cached,
        "others_cores": others,
        "messages": roles,
    }
    print(
        f"[{contender} {state}] {wall:.2f} s, {len(requests)} requests (span {fmt(span)} s, peak "
        f"{server.peak_in_flight} in flight), {correct}/{len(answers)} outputs right; others used {others:.2f} cores",
        file=sys.stderr,
        flush=True,
    )
    return result


# ----------------------------------------------------------------------------------------------- measuring


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every contender cold then cached, ``args.repeat`` times, in a rotated order."""
    rows = load_questions(args.cases, args.start)
    answers = {q.strip(): a for q, a in rows}  # one question ends with a space; tools may keep or trim it
    notes = {
        "floor": "",
        "promptfoo": ensure_promptfoo(install=not args.quick),
        "evaltasks": evaltasks_targets(),
        "no-target": "",
    }
    for contender, note in notes.items():
        if note:
            print(f"[{contender}] {note}", file=sys.stderr, flush=True)
    present = [c for c in CONTENDERS if c in args.parts and not notes[c]]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {c: {s: [] for s in STATES} for c in present}
    work = Path(tempfile.mkdtemp(prefix="bench-targets-"))
    started = time.time()
    try:
        with Server(api_key=KEY, responder=responder(answers), latency_s=args.latency_ms / 1000.0) as server:
            pf, et = write_job(work, rows, server.base_url, args.concurrency)
            for rep in range(args.repeat):
                order = present[rep % len(present) :] + present[: rep % len(present)] if present else []
                for state in STATES:
                    for contender in order:
                        if contender in COLD_ONLY and state == "cached":
                            continue
                        state_dir = work / f"{contender}-state-{rep}"
                        out = work / f"{contender}-out-{rep}-{state}"
                        if contender == "floor":
                            out.mkdir()
                            report = out / "outputs.json"
                            command = floor_command(work, rows, server.base_url, args.concurrency, report)
                            env = base_env()
                        elif contender == "promptfoo":
                            out.mkdir()
                            command, env = promptfoo_command(pf, state_dir, args.concurrency, out / "out.json")
                            report = out / "out.json"
                        else:
                            suite = "suite.yaml" if contender == "evaltasks" else "suite-no-target.yaml"
                            command, env = evaltasks_command(et, state_dir, out, suite)
                            report = out
                        runs[contender][state].append(run_one(contender, state, command, env, report, server, answers))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "cases": len(rows),
        "latency_ms": args.latency_ms,
        "concurrency": args.concurrency,
        "repeat": args.repeat,
        "runs": runs,
        "notes": {c: n for c, n in notes.items() if n},
        "versions": versions(),
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "minutes": (time.time() - started) / 60,
        "command": shown_command(sys.argv[1:]),
    }


def versions() -> dict[str, str]:
    """evaltasks (and its commit), prefect, openai, node and promptfoo versions."""
    out = {"evaltasks": md.version("evaltasks"), "prefect": md.version("prefect"), "openai": md.version("openai")}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if commit.returncode == 0:
        out["commit"] = commit.stdout.strip()
    node = shutil.which("node")
    if node:
        out["node"] = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    manifest = PROMPTFOO_DIR / "node_modules" / "promptfoo" / "package.json"
    if manifest.exists():
        out["promptfoo"] = json.loads(manifest.read_text(encoding="utf-8")).get("version", "?")
    return out


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's machine."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def shown_command(argv: list[str]) -> str:
    """The command as the document quotes it: a ``--json`` file by its name only (no developer's folder)."""
    shown = list(argv)
    for i, arg in enumerate(shown[:-1]):
        if arg in ("--json", "--render-from"):
            shown[i + 1] = Path(shown[i + 1]).name
    return " ".join([".venv/bin/python bench/targets.py", *shown])


# ----------------------------------------------------------------------------------------------- the document


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _met(ok: bool | None) -> str:
    return "–" if ok is None else ("met" if ok else "**not met**")


def render(data: dict[str, Any]) -> str:
    """The Markdown section for ``docs/performance.md``: the table and the targets."""
    n, latency, concurrency = data["cases"], data["latency_ms"] / 1000.0, data["concurrency"]
    limit = n * latency / concurrency
    runs = data["runs"]
    rows = []
    for contender, states in runs.items():
        for state, measured in states.items():
            if not measured:
                continue
            wall = _median(measured, "wall")
            rows.append(
                [
                    contender,
                    state,
                    fmt(wall),
                    fmt_runs(r["wall"] for r in measured),
                    ", ".join(str(r["requests"]) for r in measured),
                    fmt(_median(measured, "before_first")),
                    fmt(_median(measured, "span")),
                    fmt(_median(measured, "after_last")),
                    fmt(wall / limit if wall is not None else None),
                    ", ".join(str(r["peak_in_flight"]) for r in measured),
                    ", ".join(f"{r['correct']}/{n}" for r in measured),
                    fmt(_median(measured, "others_cores")),
                ]
            )
    header = [
        "contender",
        "caches",
        "median wall (s)",
        "runs (s)",
        "requests",
        "start to 1st request (s)",
        "request span (s)",
        "last answer to exit (s)",
        "× limit",
        "peak in flight",
        "outputs right",
        "others (cores)",
    ]
    v = data["versions"]
    lines = [
        HEADING,
        "",
        f"Measured by `bench/targets.py` on {data['date']} in one run of {data['minutes']:.1f} min: "
        f"`{data['command']}`.",
        "",
        f"- Machine: {data['machine']['cpu']}, {data['machine']['cores']} CPUs; Python {data['machine']['python']}, "
        f"evaltasks {v.get('evaltasks')} at commit {v.get('commit', '?')}, prefect {v.get('prefect')}, openai "
        f"{v.get('openai')}; promptfoo {v.get('promptfoo', '–')} on Node.js {v.get('node', '–')}.",
        f"- Job: {n} TruthfulQA questions, a system and a user message each (the same on both sides), sent to `tests/chat_server.py` on 127.0.0.1 "
        f"(in the benchmark's process; TCP_NODELAY on its connections: without it each answer's body waited about 40 ms for the client's delayed ACK of its headers, and even the floor took 1.3 × the limit), which answers every request after {data['latency_ms']:.0f} ms with the "
        f"question's best answer; {concurrency} requests at a time on both sides (promptfoo `-j {concurrency}`, "
        f"the chat target's `max_concurrency: {concurrency}`). Limit = n × latency / concurrency = "
        f"{n} × {latency:.3f} s / {concurrency} = **{limit:.2f} s**.",
        "- Method: whole commands timed from outside (process start to exit, fresh process each), cold (fresh "
        "caches: promptfoo's cache and database, evaltasks's index with its output store and a fresh "
        "PREFECT_HOME) then cached (the same command on the caches its cold run filled); "
        f"{data['repeat']} repetition(s), interleaved in a rotated order, medians. Request span: the server's "
        "first request's arrival to its last answer; before it, the command's start-up (process start to the "
        "first request), after it the rest (the last answer to the process's exit; medians of the cold runs "
        "that sent requests). Outputs right: outputs equal to the answer the server "
        "gave for that question. Others: the CPU other processes used meanwhile (the machine is shared).",
    ]
    for contender, note in data.get("notes", {}).items():
        lines.append(f"- {contender}: {note}.")
    lines.append(
        "- Contenders: **floor**: the same requests from a fresh Python process, one httpx client per thread on "
        f"{concurrency} threads, nothing else (what the server and the machine deliver at that moment); "
        f"**promptfoo**: `promptfoo eval -j {concurrency}` (its `openai:chat` provider, `apiBaseUrl` on the server, "
        f"one `javascript` assertion: at most {MAX_WORDS} words); **evaltasks**: `evaltasks run` of a suite with a "
        f"`chat` target (LengthCheckMetric, at most {MAX_WORDS} words); **no-target**: the same suite without its "
        "target, on the dataset's own answers (the best answers): evaltasks's fixed cost on this machine then."
    )
    lines += ["", markdown_table(header, rows, "llrrrrrrrrrr"), ""]
    lines += targets_lines(runs, limit)
    return "\n".join(lines) + "\n"


def targets_lines(runs: dict[str, Any], limit: float) -> list[str]:
    """The targets, each with its measured figure: evaltasks cold wall ≤ promptfoo's, ≤ 1.2 × the limit,
    0 requests cached."""
    et = runs.get("evaltasks")
    pf = runs.get("promptfoo")
    if not et or not et["cold"]:
        return ["Targets: not measured (evaltasks's side did not run)."]
    wall = _median(et["cold"], "wall")
    span = _median(et["cold"], "span")
    assert wall is not None and span is not None
    lines = ["Targets (evaltasks, cold):", ""]
    if pf and pf["cold"]:
        pf_wall = _median(pf["cold"], "wall")
        assert pf_wall is not None
        lines.append(
            f"- wall time no worse than promptfoo's: {wall:.2f} s against {pf_wall:.2f} s "
            f"({wall / pf_wall:.2f} ×): {_met(wall <= pf_wall)}"
        )
    lines.append(
        f"- within 1.2 × the limit: {wall:.2f} s = {wall / limit:.2f} × {limit:.2f} s (the whole command, start-up "
        f"included): {_met(wall <= 1.2 * limit)}; the requests alone (span) {span:.2f} s = {span / limit:.2f} ×"
    )
    start = _median(et["cold"], "before_first")
    after = _median(et["cold"], "after_last")
    if start is not None and after is not None:
        lines[-1] += f"; before the first request {start:.2f} s, after the last answer {after:.2f} s"
    fixed = _median(runs.get("no-target", {}).get("cold", []), "wall")
    if fixed is not None:
        lines[-1] += (
            f"; the same suite without its target takes {fixed:.2f} s (evaltasks's fixed cost: Prefect's temporary "
            "server, imports, the flow run), which the target's calls overlap: they start once the suite is "
            "checked, while Prefect starts ([generation starts while Prefect starts](targets.md#generation-starts-while-prefect-starts))"
        )
    cached = [r["requests"] for r in et["cached"]]
    lines.append(
        f"- 0 requests on the cached rerun: {', '.join(map(str, cached))}: {_met(all(c == 0 for c in cached))}"
    )
    floor = _median(runs.get("floor", {}).get("cold", []), "span")
    if floor is not None:
        lines.append(
            f"\nThe floor's requests took {floor:.2f} s = {floor / limit:.2f} × the limit: what the loopback server "
            "and this machine delivered then."
        )
    if pf and any(r["requests"] for r in pf["cached"]):
        missed = ", ".join(str(r["requests"]) for r in pf["cached"])
        lines.append(f"\npromptfoo's cached reruns still sent requests ({missed}): its cache missed those answers.")
    return lines


def main() -> int:
    """Parse the options, measure (or read ``--render-from``), write the JSON and the section."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=817, help="questions (default: all 817)")
    parser.add_argument("--start", type=int, default=0, help="the first question's number (0-based)")
    parser.add_argument("--latency-ms", type=float, default=150.0, help="the server's time per request")
    parser.add_argument("--concurrency", type=int, default=4, help="requests at a time, both sides (promptfoo's -j)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved repetitions (medians)")
    parser.add_argument("--parts", default=",".join(CONTENDERS), help="contenders, comma-separated (default: all)")
    parser.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    parser.add_argument("--render-from", type=Path, default=None, help="render an earlier --json; measure nothing")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/performance.md")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: questions 20-27, once, no document, no install"
    )
    args = parser.parse_args()
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(args.parts) - set(CONTENDERS)
    if unknown:
        parser.error(f"--parts: unknown {sorted(unknown)}; known: {', '.join(CONTENDERS)}")
    if args.quick:
        args.cases, args.start, args.repeat, args.no_doc = 8, 20, 1, True  # 20-27: five have double quotes
    return publish(args, measure, render, DOC, HEADING)


if __name__ == "__main__":
    sys.exit(main())
