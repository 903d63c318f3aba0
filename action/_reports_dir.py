"""The action's default reports folder: ``eval-results/<suite name>``, the folder ``evaltasks run`` picks without
``--output-dir`` (docs/cli.md#cli; ``evaltasks.engine.run.default_output_dir``), so the action and the command
agree on where a suite's reports are.

Standard library only (the prepare step runs before evaltasks is installed), so the suite's ``name`` is read from
the suite file as the plain or quoted scalar of its top-level ``name:`` line (or a JSON suite's ``name``); a name in
another YAML form (a block scalar, an alias), or a file that cannot be read, gives the suite file's stem instead.
``tests/action/test_action.py`` checks that :func:`path_slug` makes the same folder names as evaltasks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

DEFAULT_ROOT = "eval-results"
_NAME_LINE = re.compile(r"name:[ \t]*(.*?)[ \t]*$")


def path_slug(name: str, max_chars: int = 100, max_bytes: int = 255) -> str:
    """``name`` as one safe path component, as evaltasks makes it: every run of characters other than letters,
    digits (any script), ``_``, ``.`` and ``-`` becomes ``-``; leading and trailing dots and dashes are dropped;
    at most ``max_chars`` characters and ``max_bytes`` bytes of UTF-8 are kept, cut between characters;
    ``suite`` when nothing is left."""
    slug = re.sub(r"[^\w.-]+", "-", name).strip(".-")[:max_chars]
    slug = slug.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")
    return slug.strip(".-") or "suite"


def _scalar(value: str) -> str | None:
    """A YAML flow scalar's text: double-quoted (JSON's escapes), single-quoted (``''`` is ``'``) or plain (up to
    a `` #`` comment); None for anything else."""
    if value.startswith('"'):
        try:
            text = json.loads(value[: value.rindex('"') + 1])
        except ValueError:
            return None
        return text if isinstance(text, str) else None
    if value.startswith("'"):
        end = value.rfind("'")
        return value[1:end].replace("''", "'") if end > 0 else None
    value = re.split(r"[ \t]#", value, maxsplit=1)[0].strip()
    if not value or value[0] in "|>&*!{[%@`":
        return None
    return value


def suite_name(path: Path) -> str | None:
    """The suite file's ``name`` (see the module docstring), or None when it cannot be read that way."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if text.lstrip().startswith("{"):
        try:
            name = json.loads(text).get("name")
        except (ValueError, AttributeError):
            return None
        return name if isinstance(name, str) else None
    for line in text.splitlines():
        match = _NAME_LINE.fullmatch(line)
        if match:
            return _scalar(match.group(1))
    return None


def default_reports_dir(suite_path: Path) -> str:
    """``eval-results/<path_slug(suite name)>``, relative (the suite file's stem when its name cannot be read)."""
    name = suite_name(suite_path)
    return f"{DEFAULT_ROOT}/{path_slug(name if name is not None else suite_path.stem)}"
