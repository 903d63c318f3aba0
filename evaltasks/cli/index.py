"""``evaltasks index build|info|verify|compact|prune``: manage the reference index (docs/embeddings.md#reference-index)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from evaltasks.cli._checks import check_output_dir
from evaltasks.cli._command import Invocation, add_command
from evaltasks.cli._exits import EXIT_GATE_FAILED, EXIT_INVALID, EXIT_PASSED, aborted, error
from evaltasks.errors import InputError

INDEX_COMMANDS = ("build", "info", "verify", "compact", "prune")


def add_parser(sub: Any) -> None:
    """Add ``index`` and its subcommands to the command parser ``sub``."""
    index = add_command(sub, "index", "manage the reference index", None, "Reference index")
    index_sub = index.add_subparsers(dest="index_command", required=True, metavar="{" + ",".join(INDEX_COMMANDS) + "}")
    for name, help_text in (
        ("build", "embed a suite's references into the index"),
        ("info", "show the index's namespaces"),
        (
            "verify",
            "read every byte of the index's segment files and check their sha256: exit 1 naming each damaged file",
        ),
        ("compact", "merge each namespace's segments into one (old files deleted after)"),
        (
            "prune",
            "drop vectors that none of the given suites references (outputs "
            "stored by runs included: the next run embeds them again)",
        ),
    ):
        command = index_sub.add_parser(name, help=help_text, description=help_text)
        if name == "build":
            command.add_argument("suite", help="the suite YAML file")
        if name == "prune":
            command.add_argument("suites", nargs="+", metavar="SUITE", help="suites whose references are kept")
            command.add_argument("--dry-run", action="store_true", help="report what would be dropped")
        command.add_argument(
            "--index-dir",
            default=None,
            help="reference index directory (default $EVALTASKS_INDEX_DIR or .evaltasks/index)",
        )


def command(args: argparse.Namespace, invocation: Invocation) -> int:
    """Run the index subcommand; exit 2 (one line) for an invalid suite, 3 when anything else fails."""
    from evaltasks.index import ReferenceIndex  # startup: the index loads numpy and FAISS

    index = ReferenceIndex(args.index_dir)
    problem = check_output_dir(index.root, "--index-dir")  # a mistyped path: a user mistake, not an abort
    if problem:
        error(problem)
        return EXIT_INVALID
    actions = {"info": _info, "verify": _verify, "compact": _compact, "build": _build, "prune": _prune}
    try:
        return actions[args.index_command](index, args)
    except InputError as exc:
        error(str(exc))
        return EXIT_INVALID
    except Exception:  # anything else aborts the command (exit 3, the traceback in a file)  # noqa: BLE001
        return aborted(".")


def _info(index: Any, args: argparse.Namespace) -> int:
    """``index info``: each namespace with its size, BROKEN ones named (exit 1; nothing removed)."""
    from evaltasks.index.search import check_searches  # startup: the index loads numpy and FAISS

    entries = index.check()  # verifies each namespace's files: exit 1 when any is broken
    if not entries:
        print(f"no reference index at {index.root}")
    for entry in entries:
        size = sum(p.stat().st_size for p in Path(entry["path"]).glob("*") if p.is_file())
        print(
            f"{entry.get('namespace', entry['path'])}: {entry.get('count', '?')} vectors × "
            f"{entry.get('dimensions', '?')} dims, {size / 1e6:.1f} MB, updated {entry.get('updated', '?')}"
        )
        if entry["problems"]:
            print(
                f"  BROKEN ({entry['path']}): {'; '.join(entry['problems'])}; a run never reads damaged "
                "vectors (it embeds them again); `evaltasks index compact` drops them now"
            )
    searches = check_searches(index.root / "sets")  # every byte, as the namespaces: nothing removed
    _print_searches(searches, index.root / "sets")
    return _check_status(entries, searches)


def _verify(index: Any, args: argparse.Namespace) -> int:
    """``index verify``: every byte of every namespace and search checked; broken searches removed (exit 1)."""
    from evaltasks.index.search import check_searches  # startup: the index loads numpy and FAISS

    entries = index.check()
    if not entries:
        print(f"no reference index at {index.root}")
    for entry in entries:
        if entry["problems"]:
            print(f"BROKEN ({entry['path']}): {'; '.join(entry['problems'])}")
        else:
            parts = len(entry.get("segments", []))
            where = f"{parts} segment{'s' if parts != 1 else ''}" if entry.get("format") == 2 else "vectors.faiss"
            print(f"{entry.get('namespace', entry['path'])}: ok, {entry.get('count', '?')} vectors in {where}")
    searches = check_searches(index.root / "sets", remove_broken=True)
    _print_searches(searches, index.root / "sets")
    return _check_status(entries, searches)


def _check_status(entries: list[dict[str, Any]], searches: list[dict[str, Any]] | None = None) -> int:
    """The exit code of ``index info`` and ``index verify`` over :meth:`ReferenceIndex.check`'s ``entries`` and
    :func:`~evaltasks.index.search.check_searches`' ``searches``: 1 with an error line ("N of M reference index
    namespaces are broken", "N of M reference-set searches are broken") when any has problems, else 0."""
    code = EXIT_PASSED
    broken = sum(bool(entry["problems"]) for entry in entries)
    if broken:
        error(f"{broken} of {len(entries)} reference index namespaces are broken")
        code = EXIT_GATE_FAILED
    broken_searches = sum(bool(entry["problems"]) for entry in searches or [])
    if broken_searches:
        error(f"{broken_searches} of {len(searches or [])} reference-set searches are broken")
        code = EXIT_GATE_FAILED
    return code


def _print_searches(searches: list[dict[str, Any]], directory: Path) -> None:
    """One line for the reference-set searches in ``directory``, then one per broken search."""
    if not searches:
        return
    unchecked = sum(not entry["checked"] for entry in searches)
    print(
        f"reference-set searches: {len(searches)} in {directory}"
        + (f" ({unchecked} written by an older version: no checksums to verify)" if unchecked else "")
    )
    for entry in searches:
        if entry["problems"]:
            fate = (
                "removed: the next run that uses the set rebuilds it"
                if entry.get("removed")
                else "`evaltasks index verify` removes it; the next run rebuilds it"
            )
            print(f"  BROKEN search {entry['key']}: {'; '.join(entry['problems'])}; {fate}")


def _compact(index: Any, args: argparse.Namespace) -> int:
    """``index compact``: merge each namespace's segments, dropping damaged rows and segments (each drop a
    warning line; the next run embeds those texts again); exit 1 naming each namespace that cannot be read at
    all (its ``meta.json``), as ``index verify`` does, else 0."""
    from evaltasks.index import recording_warnings  # startup: the index loads numpy and FAISS

    counts = {e.get("namespace"): e.get("count") for e in index.info()}
    failed: dict[str, str] = {}
    with recording_warnings() as notes:
        done = index.compact(failed=failed)
    for note in notes:
        print(f"evaltasks: warning: {note}", file=sys.stderr)
    for namespace, (before, after) in done.items():
        count = next((e.get("count") for e in index.info() if e.get("namespace") == namespace), "?")
        dropped = counts.get(namespace, count) - count if isinstance(count, int) else 0
        note = f"; {dropped} damaged vectors dropped: the next run embeds them again" if dropped else ""
        print(
            f"{namespace}: 1 segment, nothing to compact"
            if (before, after) == (1, 1) and not dropped
            else f"{namespace}: format 1 converted to 1 segment ({count} vectors)"
            if before == 0
            else f"{namespace}: {before} segment{'s' if before != 1 else ''} -> {after} ({count} vectors{note})"
        )
    for path, why in failed.items():
        print(f"BROKEN ({path}): {why}; not compacted (delete the folder: the next run rebuilds it)")
    if failed:
        error(f"{len(failed)} reference index namespaces could not be compacted")
        return EXIT_GATE_FAILED
    return EXIT_PASSED


def _build(index: Any, args: argparse.Namespace) -> int:
    """``index build SUITE``: embed the suite's references (counts per namespace)."""
    from evaltasks.engine.run import index_plan, plan_run  # startup: the engine loads pydantic and numpy

    counts = index_plan(plan_run(args.suite), args.index_dir)
    for namespace, c in counts.items():
        print(
            f"{namespace}: {c['references_computed']} references embedded, "
            f"{c['references_reused']} already in the index"
        )
    return EXIT_PASSED


def _prune(index: Any, args: argparse.Namespace) -> int:
    """``index prune SUITE...``: drop the vectors and reference-set searches none of the suites uses
    (``--dry-run``: say what would be dropped, drop nothing)."""
    from evaltasks.engine.run import plan_run  # startup: the engine loads pydantic and numpy
    from evaltasks.index.search import CHECKSUMS_SUFFIX, check_searches

    keep: dict[str, list[str]] = {}
    keep_sets: set[str] = set()
    for suite in args.suites:
        plan = plan_run(suite)
        for namespace, need in plan.needs.items():
            keep.setdefault(namespace, []).extend(need.references)
        keep_sets |= {key for m in plan.suite.metrics if (key := getattr(m, "search_key", None))}
    stale = [
        entry["key"] for entry in check_searches(index.root / "sets", verify=False) if entry["key"] not in keep_sets
    ]
    if args.dry_run:  # what the same command without --dry-run would drop, nothing changed
        stored = {entry.get("namespace"): entry.get("count", 0) for entry in index.info()}
        for namespace, count in index.prune(keep, dry_run=True).items():
            print(
                f"{namespace}: would drop {count} of {stored.get(namespace, count)} vectors (kept: "
                f"{stored.get(namespace, count) - count}, the texts the suites reference)"
            )
        for key in stale:
            print(f"would drop the unused reference-set search {key} ({index.root / 'sets'})")
        print("dry run: nothing was dropped")
        return EXIT_PASSED
    for namespace, count in index.prune(keep).items():
        print(f"{namespace}: dropped {count} vectors")
    for key in stale:  # the set's vectors, its FAISS index (when approximate) and their checksums
        for suffix in (".npy", ".faiss", CHECKSUMS_SUFFIX):
            (index.root / "sets" / f"{key}{suffix}").unlink(missing_ok=True)
    if stale:
        print(f"dropped {len(stale)} unused reference-set searches")
    return EXIT_PASSED
