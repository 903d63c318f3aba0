"""Part of step 3 (``run.sh``): may the cached baseline (``baseline: auto``) be used?

``python baseline.py FILE LABEL``, run by the installed evaltasks' interpreter: exit 0 when ``FILE`` is a baseline
that ``evaltasks run --baseline`` accepts, by evaltasks' own check (:func:`evaltasks.engine.baseline.load_baseline`:
JSON with ``summary`` and ``cases``, a ``schema_version`` this evaltasks reads, cases that are objects with unique
ids, finite scores; docs/reports.md#outputs). Otherwise print a ``::warning`` naming the file, ``LABEL`` and each
problem, and exit 1: the run then goes on without a baseline, because a broken cache entry (a truncated upload,
a results.json of a newer evaltasks, a NaN score) would otherwise stop every pull request with "invalid input"
until the base branch is pushed again. An explicit ``baseline:`` path is not checked here: evaltasks reports a bad
one as invalid input (exit 2).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _github import annotate  # noqa: E402

PROBLEMS_SHOWN = 5


def problem(path: Path) -> str | None:
    """Why ``path`` is not a baseline evaltasks accepts (its located problems, at most :data:`PROBLEMS_SHOWN`,
    joined by ``; ``), or None when it is one."""
    try:
        from evaltasks.engine.baseline import load_baseline
    except ImportError:  # an evaltasks before 1.1 (the Action's evaltasks-version input): the check lived there
        from evaltasks.engine.compare import load_baseline  # type: ignore[attr-defined,no-redef]
    from evaltasks.errors import InputError

    try:
        load_baseline(path)
    except InputError as exc:
        shown = "; ".join(str(p) for p in exc.problems[:PROBLEMS_SHOWN])
        more = len(exc.problems) - PROBLEMS_SHOWN
        return shown + (f"; and {more} more" if more > 0 else "")
    return None


def main(argv: list[str]) -> int:
    """Check ``argv[0]`` (label ``argv[1]``); 0 usable, 1 not (a warning was printed), 2 wrong usage."""
    if not argv or len(argv) > 2:
        print("usage: baseline.py FILE [LABEL]", file=sys.stderr)
        return 2
    path = Path(argv[0])
    why = problem(path)
    if why is None:
        return 0
    label = f" ({argv[1]})" if len(argv) > 1 and argv[1] else ""
    annotate(
        "warning",
        f"The cached baseline {path}{label} cannot be used: {why}. Running without a baseline; "
        "the next run on a push to the base branch saves a new one.",
        title="evaltasks: no baseline",
    )
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
