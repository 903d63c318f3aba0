"""Environment variables as evaltasks reads them: an empty (or blank) variable counts as unset.

CI systems export variables that are defined but empty (an unset GitHub Actions ``${{ vars.X }}`` expands to
``""``). Taken literally, ``OPENAI_BASE_URL=""`` would send every request to a blank endpoint, so every read
of a variable by the library goes through :func:`env_value`, and values meant for a client library are passed
to it explicitly, so it never falls back to reading the empty variable itself.
"""

from __future__ import annotations

import os


def env_value(*names: str) -> str | None:
    """The value of the first of ``names`` that is set and not blank, stripped of surrounding whitespace;
    None when none is (unset, ``""`` or only whitespace)."""
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip():
            return value.strip()
    return None
