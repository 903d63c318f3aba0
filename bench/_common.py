"""What the benchmarks share: CPU accounting (how busy the machine and the benchmark's own children were; Linux
``/proc/stat``, to tell how many cores other processes used while a phase was measured) and rewriting one
section of docs/performance.md.
"""

from __future__ import annotations

import os
from pathlib import Path


def busy_seconds() -> float:
    """CPU seconds spent by the whole machine since boot (all cores, idle and iowait excluded)."""
    with open("/proc/stat") as handle:
        vals = [int(v) for v in handle.readline().split()[1:9]]
    return (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's waited-for children."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def write_section(path: Path, section: str, heading: str) -> None:
    """Replace the section under ``heading`` (up to the next ``## `` heading) or append it; keep the rest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = path.read_text(encoding="utf-8") if path.exists() else "# Performance\n"
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == heading), None)
    if start is None:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
        tail = "".join(lines[end:])
        text = "".join(lines[:start]) + section + ("\n" + tail if tail else "")
    path.write_text(text, encoding="utf-8")
