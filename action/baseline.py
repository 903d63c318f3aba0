"""Part of step 3 (``run.sh``): may the cached baseline (``baseline: auto``) be used?

Standard library only. ``python baseline.py FILE LABEL``: exit 0 when ``FILE`` is a readable UTF-8 JSON object
with ``summary`` (an object) and ``cases`` (a list), the shape ``evaltasks run --baseline`` requires of a
``results.json`` (README, "Outputs"). Otherwise print a ``::warning`` naming the file, ``LABEL`` and why, and
exit 1: the run then goes on without a baseline, because a broken cache entry (a truncated upload, a results.json
of an older format) would otherwise stop every pull request with "invalid input" until the base branch is pushed
again. An explicit ``baseline:`` path is not checked here: evaltasks reports a bad one as invalid input (exit 2).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _github import annotate  # noqa: E402


def problem(path: Path) -> str | None:
    """Why ``path`` is not a usable evaltasks results.json, or None when it is."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "the file does not exist"
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read it: {exc}"
    except json.JSONDecodeError as exc:
        return f"not JSON (line {exc.lineno}: {exc.msg})"
    if not isinstance(data, dict) or not isinstance(data.get("summary"), dict) or not isinstance(data.get("cases"), list):
        return "not an evaltasks results.json (needs 'summary' and 'cases')"
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
    annotate("warning", f"The cached baseline {path}{label} cannot be used: {why}. Running without a baseline; "
                        "the next run on a push to the base branch saves a new one.", title="evaltasks: no baseline")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
