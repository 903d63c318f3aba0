"""Report files are replaced atomically (docs/reports.md#outputs).

- results.json and junit.xml are replaced atomically: a reader polling them while they are rewritten always
  parses a complete file that is one of the written versions.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a reader process polling many rewrites

REPORT_READER = textwrap.dedent(
    """
    import hashlib, json, os, sys
    import xml.etree.ElementTree as ET

    folder, allowed_file, stop_file = sys.argv[1], sys.argv[2], sys.argv[3]
    allowed = json.load(open(allowed_file))
    counts = {"reads": 0, "torn": 0, "unknown": 0, "versions": []}
    seen = set()
    while not os.path.exists(stop_file):
        if counts["reads"] in (2, 42) or len(seen) != counts.get("reported", 0):  # progress, for the writer
            counts["reported"] = len(seen)
            print(counts["reads"], len(seen), flush=True)
        for name, parse in (("results.json", json.loads), ("junit.xml", ET.fromstring)):
            with open(os.path.join(folder, name), "rb") as handle:
                data = handle.read()
            counts["reads"] += 1
            try:
                parse(data)
            except Exception:
                counts["torn"] += 1
                continue
            digest = hashlib.sha256(data).hexdigest()
            if digest not in allowed[name]:
                counts["unknown"] += 1
            seen.add((name, allowed[name].index(digest) if digest in allowed[name] else -1))
    counts["versions"] = sorted(seen)
    del counts["reported"]
    print(json.dumps(counts), flush=True)
    """
)


def test_reports_are_replaced_atomically(tmp_path: Path) -> None:
    """A reader process polls results.json and junit.xml while they are rewritten (40 times, and on until the
    reader has read more than 40 times and seen at least 4 versions) with 4 different contents (each a few MB):
    every read parses completely and is byte for byte one of the written versions.

    (Checked by hand: with the writers opening the target directly instead of ``atomic_writer``, the reader
    sees torn files within the first few rewrites.)
    """
    from evaltasks import EvalTestCase, LengthCheckMetric, evaluate_sync
    from evaltasks.reports import write_reports

    versions = []
    for v in range(4):
        cases = [
            EvalTestCase(input=f"question {i}", actual_output=f"version {v} answer {i} " + "word " * (i % 40))
            for i in range(3000 + 500 * v)
        ]
        result = evaluate_sync(cases, [LengthCheckMetric(max_length=20 + v, unit="words")])
        header = {"suite": "atomic", "version": v, "gate": {"min_pass_rate": 0.5, "pass_rate": None}}
        versions.append((result, header))
    allowed: dict[str, list[str]] = {"results.json": [], "junit.xml": []}
    for v, (result, header) in enumerate(versions):  # each version's bytes, written once on their own
        paths = write_reports(tmp_path / f"v{v}", result, header, passed=True, min_pass_rate=0.5)
        for name in allowed:
            allowed[name].append(hashlib.sha256(paths[name].read_bytes()).hexdigest())
    (tmp_path / "allowed.json").write_text(json.dumps(allowed))
    (tmp_path / "reader.py").write_text(REPORT_READER, encoding="utf-8")

    out, stop = tmp_path / "out", tmp_path / "stop"
    write_reports(out, *versions[0], passed=True, min_pass_rate=0.5)
    reader = subprocess.Popen(
        [sys.executable, str(tmp_path / "reader.py"), str(out), str(tmp_path / "allowed.json"), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    collector = threading.Thread(target=lambda: lines.extend(reader.stdout), daemon=True)
    collector.start()

    def progress() -> tuple[int, int]:  # (reads, versions seen) as the reader last reported them
        reported = [line.split() for line in list(lines) if line[:1].isdigit() and len(line.split()) == 2]
        return max((int(r) for r, _ in reported), default=0), max((int(v) for _, v in reported), default=0)

    deadline = time.monotonic() + 300  # a hang guard only
    try:
        while progress()[0] < 2:  # the reader is reading before the rewrites start
            assert reader.poll() is None, reader.stderr.read()
            assert time.monotonic() < deadline, "the reader did not start reading"
            time.sleep(0.05)
        rewrite = 0
        while rewrite < 40 or progress()[0] <= 40 or progress()[1] < 4:
            assert reader.poll() is None, reader.stderr.read()
            assert time.monotonic() < deadline, progress()
            write_reports(out, *versions[rewrite % len(versions)], passed=True, min_pass_rate=0.5)
            rewrite += 1
    finally:
        stop.touch()
    reader.wait(timeout=60)
    collector.join(timeout=60)
    stdout, stderr = lines[-1] if lines else "", reader.stderr.read()
    assert reader.returncode == 0, stderr
    counts = json.loads(stdout)
    assert counts["torn"] == 0 and counts["unknown"] == 0, counts
    assert counts["reads"] > 40, counts
    assert len(counts["versions"]) >= 4, counts  # the reader saw the files change, several versions of each
    assert not list(out.glob(".*.tmp"))
    print(f"\n{counts['reads']} reads, versions seen {counts['versions']}")
