"""What the benchmarks share: CPU accounting (how busy the machine and the benchmark's own children were; Linux
``/proc/stat``, to tell how many cores other processes used while a phase was measured) and rewriting one
section of docs/performance.md.
"""

from __future__ import annotations

import os
import time
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


def wait_quiet(max_cores: float, max_wait: float, span: float = 8.0) -> float:
    """Wait until other processes use at most ``max_cores`` for ``span`` seconds in a row; the seconds waited."""
    t0 = time.perf_counter()
    quiet_since = None
    while True:
        b0 = busy_seconds()
        time.sleep(2.0)
        now = time.perf_counter()
        if (busy_seconds() - b0) / 2.0 <= max_cores:
            quiet_since = quiet_since or now - 2.0
            if now - quiet_since >= span:
                return now - t0
        else:
            quiet_since = None
        if now - t0 > max_wait:
            return now - t0
