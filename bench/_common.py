"""What the benchmarks share, beyond what pyperf does for them.

- :func:`runner`: a ``pyperf.Runner`` whose worker processes get this script's own options, the whole
  environment (``--copy-env``: the model is found offline through ``HF_HUB_OFFLINE``) and, with ``--quick``,
  pyperf's ``--debug-single-value`` (one process, one value: a smoke run); :func:`seconds` and :func:`describe`
  read a benchmark's figures for a table.
- :func:`synthetic_vectors` / :func:`near_copies`: the seeded synthetic unit vectors of the index benchmarks.
- :class:`Step`: wall time and peak memory of one step (pyperf measures time, not peaks).
- :func:`markdown_table`, :func:`fmt`, :func:`fmt_runs` and :func:`write_section`: the Markdown of
  docs/performance.md.
- CPU accounting (:func:`busy_seconds`, :func:`children_cpu`, :func:`wait_quiet`): how busy the machine and the
  benchmark's own children were (Linux ``/proc/stat``), for the harnesses that time whole runs from outside.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

MIB = 1024**2
DIMS = 384
BLOCK = 100_000  # rows generated at a time: no float64 temporaries of a whole 10^6-row set


# ----------------------------------------------------------------------------------------------- pyperf


def runner(options: Callable[[Any], None], passed: Sequence[str], **defaults: Any) -> Any:
    """A ``pyperf.Runner`` for one script; ``runner.args`` holds pyperf's options and the script's.

    ``options(argparser)`` adds the script's options (``--quick`` is added here); ``passed`` names the
    ``dest`` of those a worker process needs (given to it as ``--name value``, or ``--name`` for a flag that is
    set). ``defaults``: ``pyperf.Runner`` arguments (e.g. ``processes=3, values=1, loops=1`` for steps of
    seconds). With ``--quick`` the run is pyperf's ``--debug-single-value``.

    Raises:
        SystemExit: an option is wrong (argparse's message and exit status 2).
    """
    import pyperf

    def forward(cmd: list[str], args: Any) -> None:
        for dest in ("quick", *passed):
            value = getattr(args, dest)
            flag = "--" + dest.replace("_", "-")
            if value is True:
                cmd.append(flag)
            elif value not in (None, False):
                cmd.extend([flag, str(value)])

    if "--quick" in sys.argv[1:] and "--worker" not in sys.argv[1:] and "--debug-single-value" not in sys.argv:
        sys.argv.append("--debug-single-value")
    run = pyperf.Runner(add_cmdline_args=forward, **defaults)
    run.argparser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: tiny sizes, one process, one value (pyperf --debug-single-value)",
    )
    options(run.argparser)
    run.argparser.set_defaults(copy_env=True)
    run.parse_args()
    return run


def seconds(bench: Any) -> float:
    """The median of a pyperf benchmark's values, seconds."""
    return float(bench.median())


def describe(bench: Any) -> str:
    """``"0.123 s ± 0.004 s (6 values, 3 processes)"``: mean, standard deviation (when there are 2 values or
    more), how many values and worker processes (pyperf's runs less its calibration run)."""
    values = bench.get_values()
    runs = sum(1 for run in bench.get_runs() if run.values)
    text = f"{bench.mean():.3f} s"
    if len(values) > 1:
        text += f" ± {bench.stdev():.3f} s"
    return text + f" ({len(values)} value{'s' if len(values) != 1 else ''}, {runs} process{'es' if runs != 1 else ''})"


# ----------------------------------------------------------------------------------------------- vectors


def synthetic_vectors(
    n: int,
    seed: int = 0,
    *,
    dims: int = DIMS,
    clusters: int = 0,
    spread: float = 0.04,
    rng: Any = None,
    out: Any = None,
) -> Any:
    """(n, dims) float32 unit vectors, seeded, generated in blocks of 100,000 rows.

    ``clusters`` 0: Gaussian directions (no structure). ``clusters`` > 0: that many unit centres, each vector a
    centre plus per-dimension Gaussian noise of ``spread`` (0.04 at 384 dimensions: cosine about 0.6 to its
    centre, like embeddings of related texts). ``rng``: a ``numpy.random.Generator`` to draw from instead of
    ``default_rng(seed)`` (the caller goes on drawing queries from it). ``out``: an (n, dims) float32 array
    (e.g. a ``np.lib.format.open_memmap``) to fill instead of a new one. The same arguments give the same
    vectors.
    """
    import numpy as np

    rng = np.random.default_rng(seed) if rng is None else rng
    centres = None
    if clusters:
        centres = rng.standard_normal((clusters, dims)).astype(np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    out = np.empty((n, dims), dtype=np.float32) if out is None else out
    for start in range(0, n, BLOCK):
        stop = min(n, start + BLOCK)
        if centres is None:
            block = rng.standard_normal((stop - start, dims), dtype=np.float32)
        else:
            block = centres[rng.integers(0, clusters, stop - start)]
            block += spread * rng.standard_normal((stop - start, dims), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start:stop] = block
    return out


def near_copies(vectors: Any, m: int, rng: Any, noise: float = 0.02) -> Any:
    """(m, dims) unit queries: ``m`` distinct stored rows of ``vectors`` plus Gaussian noise of ``noise`` per
    dimension (near-duplicate texts' embeddings), drawn from ``rng``."""
    import numpy as np

    q = vectors[rng.choice(len(vectors), m, replace=False)]
    q = q + noise * rng.standard_normal((m, vectors.shape[1]), dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return q


# ----------------------------------------------------------------------------------------------- memory


def status_kib(field: str) -> int:
    """One field of ``/proc/self/status`` in KiB (``VmRSS``, ``VmHWM``, ``RssAnon``).

    Raises:
        KeyError: the kernel does not report that field.
    """
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


class Step:
    """Wall time, CPU time and peak memory of one step, used as ``with Step() as step: ...``.

    The peak resident set (``VmHWM``) is reset to the current RSS at entry through ``/proc/self/clear_refs``
    (Linux), so ``peak_delta`` is what the step added over what was resident before it. With ``sample_anon``,
    a thread samples ``RssAnon`` (process memory, not file pages the kernel can drop) every 5 ms for its peak.
    """

    def __init__(self, sample_anon: bool = False) -> None:
        self.sample_anon = sample_anon
        self.seconds = self.cpu = 0.0
        self.rss_before = self.peak = self.anon_before = self.anon_peak = 0

    def __enter__(self) -> Step:
        try:
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")  # reset VmHWM (peak RSS) to the current RSS
        except OSError:
            pass
        self.rss_before = status_kib("VmRSS") * 1024
        self.anon_before = self.anon_peak = status_kib("RssAnon") * 1024
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True) if self.sample_anon else None
        if self._thread:
            self._thread.start()
        self.cpu0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.anon_peak = max(self.anon_peak, status_kib("RssAnon") * 1024)

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.cpu0
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.anon_peak = max(self.anon_peak, status_kib("RssAnon") * 1024)
        self.peak = status_kib("VmHWM") * 1024

    def as_dict(self) -> dict[str, float]:
        """seconds, cpu_seconds, rss_before, peak_rss, peak_delta, anon_peak_delta, ru_maxrss (bytes)."""
        import resource

        return {
            "seconds": self.seconds,
            "cpu_seconds": self.cpu,
            "rss_before": self.rss_before,
            "peak_rss": self.peak,
            "peak_delta": self.peak - self.rss_before,
            "anon_peak_delta": self.anon_peak - self.anon_before,
            "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        }


# ----------------------------------------------------------------------------------------------- Markdown


def fmt(x: float | None, digits: int = 2) -> str:
    """A figure for a table: ``–`` for none or NaN, no decimals from 100, one from 10, else ``digits``."""
    if x is None or x != x:
        return "–"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}f}"


def fmt_runs(values: Iterable[float | None]) -> str:
    """Figures of repeated runs, comma-separated (:func:`fmt` each)."""
    return ", ".join(fmt(v) for v in values)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "") -> str:
    """A GitHub Markdown table; ``align`` one letter per column, ``l`` or ``r`` (default: the first column
    left, the others right). Cells are written with ``str``."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    lines = ["| " + " | ".join(header) + " |", rule]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


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


# ----------------------------------------------------------------------------------------------- CPU


def publish(args: Any, measure: Callable[[Any], Any], render: Callable[[Any], str], doc: Path, heading: str) -> int:
    """The end of a benchmark's ``main``: the measurements (read from ``args.render_from``, else ``measure(args)``),
    written to ``args.json`` when asked, rendered, printed, and written as the section ``heading`` of ``doc``
    unless ``args.no_doc``. Returns the exit status (0)."""
    data = json.loads(args.render_from.read_text(encoding="utf-8")) if args.render_from else measure(args)
    if args.json and not args.render_from:
        args.json.write_text(json.dumps(data, indent=1), encoding="utf-8")
    section = render(data)
    print(section)
    if not args.no_doc:
        write_section(doc, section, heading)
    return 0


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
