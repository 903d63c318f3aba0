"""CPU accounting shared by the benchmarks: how busy the machine and the benchmark's own children were.

Linux only (``/proc/stat``); the benchmarks compare these to tell how many cores other processes used while a
phase was measured.
"""

from __future__ import annotations

import os


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
