"""Where `evaltasks run`'s time goes: a measured breakdown of the whole command, start to exit.

Each run is a fresh process (the `evaltasks` console script) on a suite (default the 8-case quickstart, task cache
off, a cold index each run), with a fresh PREFECT_HOME and with one reused from a previous run; medians of
--repeat runs, the two kinds interleaved. Nothing in the product is changed to measure it: a `sitecustomize`
module put first on PYTHONPATH (inherited by Prefect's temporary-server process) wraps functions from outside as
their modules are imported and records when each begins and ends, in which process and thread:

- the command: interpreter start, the imports of evaltasks.cli, prefect, prefect.server and torch /
  sentence-transformers, `plan_run` (dataset parse and plan), the model load, the temporary server start as the
  command waits for it, the flow run's creation and bookkeeping before its body, the task runs and report
  writing inside the body, the flow's finish (body end to the flow call's return), and the exit after
  `cli.main` returns (the temporary server's stop, Prefect's event and log flush);
- the temporary server's own process: its interpreter start, its imports (prefect.server), the database
  migrations (`PrefectDBInterface.create_db`), the block-type registration, and the app and services start
  (the last of those until the command first sees `/health` answer).

It rewrites only the section "## Where a run's time goes" of docs/performance.md; with --label it keeps the
tables of other labels there (run it with `--label before` on the old tree and `--label after` on the new one).

    .venv/bin/python bench/profile_run.py [--repeat 5] [--suite examples/quickstart/suite.yaml] [--label after]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## Where a run's time goes"

# The probe: imported by every Python process started with PYTHONPATH=<probe dir> (the command and the server).
PROBE = r"""
import atexit, importlib.abc, json, os, sys, threading, time

_LOG = os.environ.get("EVALTASKS_PROFILE_LOG")
_ROLE = "server" if any("uvicorn" in a or a.endswith("temporary.py") for a in sys.argv) else "cli"
_lock = threading.Lock()

def _mark(label, edge):
    if not _LOG:
        return
    line = json.dumps({"t": time.time(), "pid": os.getpid(), "role": _ROLE,
                       "thread": threading.current_thread().name, "label": label, "edge": edge})
    with _lock, open(_LOG, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")

def _wrap(owner, attr, label):
    original = getattr(owner, attr, None)
    if original is None or getattr(original, "_profiled", False):
        return
    if hasattr(original, "__code__") and original.__code__.co_flags & 0x80:  # a coroutine function
        async def wrapper(*args, **kwargs):
            _mark(label, "begin")
            try:
                return await original(*args, **kwargs)
            finally:
                _mark(label, "end")
    else:
        def wrapper(*args, **kwargs):
            _mark(label, "begin")
            try:
                return original(*args, **kwargs)
            finally:
                _mark(label, "end")
    wrapper._profiled = True
    wrapper.__wrapped__ = original
    setattr(owner, attr, wrapper)

def _attr(module, dotted):
    owner = module
    *path, last = dotted.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            return None, None
    return owner, last

# module -> [(attribute, label)]: wrapped right after the module is executed
_WRAP = {
    "evaltasks.cli": [("main", "cli.main")],
    "evaltasks.engine.run": [("plan_run", "plan_run")],
    "evaltasks.server.temporary": [("guard_temporary_server", "guard_temporary_server"),
                                ("spawn_temporary_server", "server spawn"),
                                ("StartingServer.wait", "server wait")],
    "evaltasks.embeddings.local": [("LocalEmbeddingProvider.load", "model load")],
    "evaltasks.reports": [("ReportWriter.write", "report writing")],
    "evaltasks.flows.evaluate_suite": [("_run_plan", "flow body")],
    "flows.evaluate_suite": [("_run_plan", "flow body")],
    "prefect.flows": [("Flow.__call__", "flow call")],
    "prefect.task_engine": [("run_task_sync", "task run")],
    "prefect.server.api.server": [("SubprocessASGIServer.start", "server start (waited)"),
                                  ("SubprocessASGIServer.stop", "server stop"),
                                  ("create_app", "server create_app")],
    "prefect.server.database.interface": [("PrefectDBInterface.create_db", "server migrations")],
    "prefect.server.models.block_registration": [("run_block_auto_registration", "server block registration")],
    "prefect._internal.concurrency.services": [("_QueueServiceBase.drain", "events/logs drain")],
}
# modules whose import (their own execution, nested imports included) is timed
_TIMED_IMPORTS = {"evaltasks", "evaltasks.cli", "prefect", "prefect.server.api.server", "torch",
                  "sentence_transformers", "flows.evaluate_suite", "evaltasks.flows.evaluate_suite"}

class _Loader(importlib.abc.Loader):
    def __init__(self, inner, name):
        self.inner, self.name = inner, name
    def create_module(self, spec):
        return self.inner.create_module(spec)
    def exec_module(self, module):
        timed = self.name in _TIMED_IMPORTS
        if timed:
            _mark("import " + self.name, "begin")
        try:
            self.inner.exec_module(module)
        finally:
            if timed:
                _mark("import " + self.name, "end")
        for dotted, label in _WRAP.get(self.name, ()):
            owner, last = _attr(module, dotted)
            if owner is not None:
                _wrap(owner, last, label)
    def __getattr__(self, name):
        return getattr(self.inner, name)

class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _WRAP and name not in _TIMED_IMPORTS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, name)
                return spec
        return None

_SOURCE = os.environ.get("EVALTASKS_PROFILE_SOURCE")
if _SOURCE:  # profile another checkout (e.g. the tree before a change) with this environment's packages
    sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")
                        and "__editable__" not in getattr(f, "__name__", "")]
    sys.path.insert(0, _SOURCE)

if _LOG:
    _mark("process", "begin")
    atexit.register(lambda: _mark("process", "end"))  # registered first: runs after every other handler
    sys.meta_path.insert(0, _Finder())
"""


def _spans(marks: list[dict], role: str, label: str, first: bool = True) -> list[tuple[float, float]]:
    """(begin, end) pairs of ``label`` in the processes of ``role`` (nested calls counted once, outermost)."""
    spans, depth, begin = [], {}, {}
    for mark in marks:
        if mark["role"] != role or mark["label"] != label:
            continue
        key = (mark["pid"], mark["thread"])
        if mark["edge"] == "begin":
            depth[key] = depth.get(key, 0) + 1
            if depth[key] == 1:
                begin[key] = mark["t"]
        elif depth.get(key):
            depth[key] -= 1
            if depth[key] == 0:
                spans.append((begin.pop(key), mark["t"]))
    spans.sort()
    return spans[:1] if first and spans else spans


def _one(marks: list[dict], role: str, label: str) -> tuple[float, float] | None:
    found = _spans(marks, role, label)
    return found[0] if found else None


def breakdown(marks: list[dict], t0: float, exited: float) -> dict[str, tuple[float, float] | None]:
    """Named phases of one run: (start, end) in seconds from the moment the command was launched (``t0``,
    ``time.time()``) until it exited (``exited``)."""
    rel = lambda span: None if span is None else (span[0] - t0, span[1] - t0)  # noqa: E731
    cli = lambda label: rel(_one(marks, "cli", label))  # noqa: E731
    srv = lambda label: rel(_one(marks, "server", label))  # noqa: E731
    phases: dict[str, tuple[float, float] | None] = {}
    began = [m["t"] - t0 for m in marks if m["role"] == "cli" and m["label"] == "process" and m["edge"] == "begin"]
    phases["interpreter start"] = (0.0, min(began)) if began else None
    phases["import evaltasks (package)"] = cli("import evaltasks")
    phases["import evaltasks.cli"] = cli("import evaltasks.cli")
    phases["import prefect (client)"] = cli("import prefect")
    phases["import prefect.server"] = cli("import prefect.server.api.server")
    phases["import the flow module"] = cli("import evaltasks.flows.evaluate_suite") or cli(
        "import flows.evaluate_suite"
    )
    phases["import torch"] = cli("import torch")
    phases["import sentence_transformers"] = cli("import sentence_transformers")
    phases["plan_run (dataset parse, plan)"] = cli("plan_run")
    phases["model load (imports + weights)"] = cli("model load")
    start, spawn = cli("server start (waited)"), cli("server spawn")
    launched = spawn or start
    phases["temporary server: launch to /health"] = (launched[0], start[1]) if launched and start else None
    server_began = [m["t"] - t0 for m in marks if m["role"] == "server" and m["label"] == "process"]
    phases["  server: process start"] = (launched[0], min(server_began)) if launched and server_began else None
    phases["  server: imports (prefect.server)"] = srv("import prefect.server.api.server")
    phases["  server: create_app"] = srv("server create_app")
    phases["  server: database migrations"] = srv("server migrations")
    phases["  server: block-type registration"] = srv("server block registration")
    ready = cli("server start (waited)")
    after = [p for p in (srv("server block registration"), srv("server migrations"), srv("server create_app")) if p]
    phases["  server: app + services start until /health"] = (
        (max(p[1] for p in after), ready[1]) if after and ready else None
    )
    phases["the command waits for the server"] = cli("server wait") or start  # before: start() in the main thread
    call, body = cli("flow call"), cli("flow body")
    phases["flow run creation, bookkeeping"] = (call[0], body[0]) if call and body else None
    tasks = [rel(s) for s in _spans(marks, "cli", "task run", first=False)]
    phases["task runs (first start to last end)"] = (
        (min(s[0] for s in tasks), max(s[1] for s in tasks)) if tasks else None
    )
    phases["report writing"] = cli("report writing")
    phases["flow body"] = body
    phases["flow finish (body end to flow call return)"] = (body[1], call[1]) if call and body else None
    main = cli("cli.main")
    phases["cli.main return to process exit"] = (main[1], exited - t0) if main else None
    drains = [rel(s) for s in _spans(marks, "cli", "events/logs drain", first=False)]
    drains = [s for s in drains if main and s[0] >= main[1]]
    phases["  events/logs drain"] = (min(s[0] for s in drains), max(s[1] for s in drains)) if drains else None
    phases["  server stop"] = cli("server stop")
    last = max((m["t"] - t0 for m in marks if m["role"] == "cli"), default=None)
    phases["  after the last exit handler (interpreter teardown)"] = (last, exited - t0) if last is not None else None
    return phases


def _run_once(
    suite: Path, home: Path, work: Path, probe: Path, i: int, source: Path | None = None
) -> tuple[float, dict]:
    """One `evaltasks run` of ``suite`` (``source``: another checkout's evaltasks) with PREFECT_HOME ``home``;
    returns its wall time (launch to exit, s) and :func:`breakdown`."""
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"marks-{i}.jsonl"
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "EVALTASKS_PROFILE_LOG": str(log),
        "EVALTASKS_CACHE_DIR": str(work / "cache"),  # its own migrated-database template, left by the warm-up
        "PYTHONPATH": os.pathsep.join([str(probe), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    if source:
        env["EVALTASKS_PROFILE_SOURCE"] = str(source)
    for name in ("PREFECT_API_URL", "PREFECT_PROFILE"):
        env.pop(name, None)
    script = Path(sys.executable).with_name("evaltasks")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "evaltasks"]
    command += [
        "run",
        str(suite),
        "--quiet",
        "--no-cache",
        "--output-dir",
        str(work / f"out{i}"),
        "--index-dir",
        str(work / f"idx{i}"),
    ]
    t0 = time.time()
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    if done.returncode not in (0, 1):
        raise SystemExit(f"{command} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    marks = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    return wall, breakdown(marks, t0, t0 + wall)


def _median_span(spans: list[tuple[float, float] | None]) -> tuple[float, float, float] | None:
    known = [s for s in spans if s is not None]
    if not known:
        return None
    return (
        statistics.median(s[0] for s in known),
        statistics.median(s[1] for s in known),
        statistics.median(s[1] - s[0] for s in known),
    )


def _table(label: str, results: dict[str, list[tuple[float, dict]]], repeat: int) -> str:
    kinds = list(results)
    walls = {k: statistics.median(w for w, _ in results[k]) for k in kinds}
    header = "| phase | " + " | ".join(f"{k}: s (from → to)" for k in kinds) + " |\n|---|" + "---:|" * len(kinds)
    rows = []
    for phase in results[kinds[0]][0][1]:
        cells = []
        for kind in kinds:
            med = _median_span([b[phase] for _, b in results[kind]])
            cells.append("–" if med is None else f"{med[2]:.2f} ({med[0]:.2f} → {med[1]:.2f})")
        rows.append(f"| {phase} | " + " | ".join(cells) + " |")
    walls_row = (
        "| **wall (launch to exit)** | "
        + " | ".join(f"**{walls[k]:.2f}** ({', '.join(f'{w:.2f}' for w, _ in results[k])})" for k in kinds)
        + " |"
    )
    return (
        f"### {label}\n\nMeasured {date.today().isoformat()}: medians of {repeat} runs, {os.cpu_count()} CPUs.\n\n"
        + header
        + "\n"
        + walls_row
        + "\n"
        + "\n".join(rows)
        + "\n"
    )


def _write(out: Path, label: str, table: str) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from startup import _replace_section

    text = out.read_text(encoding="utf-8") if out.exists() else ""
    match = re.search(rf"^{re.escape(HEADING)}\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    kept: dict[str, str] = {}
    if match:
        for part in re.split(r"^(?=### )", match.group(1), flags=re.M):
            name = part.splitlines()[0][4:].strip() if part.startswith("### ") else None
            if name:
                kept[name] = part.rstrip("\n") + "\n"
    kept[label] = table  # a label measured again keeps its place; a new one comes last
    intro = (
        "Measured by `bench/profile_run.py`: `evaltasks run` on the 8-case quickstart (`--no-cache`, a cold index), "
        "each run a fresh process, with a fresh PREFECT_HOME (as in CI; where the tree keeps a migrated empty "
        "database per Prefect version, the template a warm-up run left is there) and with one a previous run left "
        "(reused). Each cell: the median duration in seconds, and (from → to) when the phase began and ended, "
        "in seconds since the command was launched; phases overlap where threads or the server process run "
        "side by side. Indented rows are parts of the row above them. Functions are wrapped from outside "
        "(a `sitecustomize` probe), so the numbers include a few milliseconds of probe overhead.\n"
    )
    _replace_section(out, HEADING, intro + "\n" + "\n".join(kept.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--suite", default=str(ROOT / "examples" / "quickstart" / "suite.yaml"))
    parser.add_argument("--label", default="after", help="the table's name in the section (e.g. before, after)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "performance.md"))
    parser.add_argument("--json", default=None, help="also write the raw breakdowns here")
    parser.add_argument(
        "--source",
        default=None,
        help="profile the evaltasks of this checkout (e.g. `git worktree add /tmp/old HEAD~1`) "
        "with this environment's packages",
    )
    parser.add_argument(
        "--compare-source",
        default=None,
        metavar="DIR",
        help="also profile this checkout (e.g. the tree before a change), runs interleaved with "
        "this tree's, into a table of its own (--compare-label)",
    )
    parser.add_argument("--compare-label", default="before")
    parser.add_argument("--quick", action="store_true", help="smoke run: one run of each kind; writes no document")
    args = parser.parse_args()
    if args.quick:
        args.repeat = 1
    work = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    probe = work / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(PROBE, encoding="utf-8")
    suite = Path(args.suite).resolve()
    trees = [(args.label, Path(args.source).resolve() if args.source else None)]
    if args.compare_source:
        trees.insert(0, (args.compare_label, Path(args.compare_source).resolve()))
    results: dict[str, dict[str, list[tuple[float, dict]]]] = {}
    for label, source in trees:  # a warm-up run leaves a migrated home to reuse (and the database template)
        _run_once(suite, work / f"home-reused-{label}", work / label, probe, -1, source)
        results[label] = {"fresh PREFECT_HOME": [], "reused PREFECT_HOME": []}
    for i in range(args.repeat):
        for label, source in trees:
            fresh = work / f"home-fresh-{label}-{i}"
            results[label]["fresh PREFECT_HOME"].append(_run_once(suite, fresh, work / label, probe, 2 * i, source))
            shutil.rmtree(fresh, ignore_errors=True)
            results[label]["reused PREFECT_HOME"].append(
                _run_once(suite, work / f"home-reused-{label}", work / label, probe, 2 * i + 1, source)
            )
            print(label, {k: round(v[-1][0], 2) for k, v in results[label].items()}, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1), encoding="utf-8")
    for label, _ in trees:
        table = _table(label, results[label], args.repeat)
        if not args.quick:
            _write(Path(args.out), label, table)
        print(table)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
