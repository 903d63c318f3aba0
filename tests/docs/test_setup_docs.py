"""docs/performance.md, "Set-up and the quickstart": the numbers it states about the install hold for this checkout.

The package count is computed here from the installed distributions' own metadata (``importlib.metadata``):
evaltasks' requirements, followed through every dependency with the extras asked for and the markers of this
interpreter, plus what a new virtualenv brings (pip; setuptools before Python 3.12).
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PAGE = Path(__file__).resolve().parents[2] / "docs" / "performance.md"


def _installed_closure(root: str) -> set[str]:
    """The canonical names of ``root`` and everything it needs (no extras of its own), from metadata."""
    dists = {canonicalize_name(d.metadata["Name"]): d for d in md.distributions()}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(canonicalize_name(root), frozenset())]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for line in dists[name].requires or []:
            requirement = Requirement(line)
            environments = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if requirement.marker is None or any(requirement.marker.evaluate(e) for e in environments):
                todo.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return {name for name, _ in seen}


def test_the_install_package_count_is_what_pip_list_shows_in_a_new_venv() -> None:
    fresh = {"pip"} | ({"setuptools"} if sys.version_info < (3, 12) else set())
    count = len(_installed_closure("evaltasks") | fresh)
    stated = re.findall(r"\((\d+) packages in `pip list`", PAGE.read_text(encoding="utf-8"))
    assert stated == [str(count)], (stated, count)


def test_the_quickstart_time_on_an_idle_machine_is_the_same_in_both_places() -> None:
    """The set-up section and the throughput section quote the same measured quickstart run (its
    printed flow-run and total times); a busy machine's figures are stated as such elsewhere."""
    text = " ".join(PAGE.read_text(encoding="utf-8").split())
    setup = re.search(
        r'on an idle 2-core machine: the first run on a fresh one printed "flow run (\d+\.\d) s, total '
        r'(\d+\.\d) s"',
        text,
    )
    startup = re.search(
        r"start-up \(Prefect's temporary server, imports, the model\) is about (\d+) s on an idle "
        r"machine \(the quickstart above: (\d+\.\d) s in all, (\d+\.\d) s of it the flow run\)",
        text,
    )
    assert setup and startup, (setup, startup)
    assert (startup.group(2), startup.group(3)) == (setup.group(2), setup.group(1))
    assert abs(float(startup.group(1)) - float(setup.group(2))) <= 1
