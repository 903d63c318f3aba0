"""IVF search against exact search at 10^6 real text embeddings, resumable across sessions.

Embedding 10^6 sentences with the local model takes about 2 hours on 2 cores, so the work is split into
steps that each survive an interruption; run the same command again to continue::

    nice -n 19 .venv/bin/python bench/real_corpus.py OUT            # corpus, then embed, then measure
    .venv/bin/python bench/real_corpus.py OUT --measure 100000      # measure on the first 100,000 now

1. Corpus (``OUT/corpus.txt``, once; later runs read it back, so a resumed run embeds the same texts even
   if the installed packages changed). Files: every ``.py``/``.pyi`` (code), ``.h``/``.hpp``/``.c``/``.cc``/
   ``.cpp``/``.cu``/``.cuh`` (C code), ``.rst``/``.md``/``.txt`` and ``METADATA`` (text) file under the running
   interpreter's ``sysconfig`` paths ``purelib``, ``platlib`` and ``stdlib``, in sorted path order, read as
   UTF-8 (undecodable bytes replaced). Blocks of prose: Python's triple-quoted strings (docstrings) and runs of
   consecutive full-line ``#`` comments; C's ``/* */`` comments (leading ``*`` stripped) and runs of ``//``
   comments; a text file whole. A block is split into paragraphs at blank lines, a paragraph's whitespace
   collapsed to single spaces and split after ``.``, ``!`` or ``?`` followed by a space and an upper-case
   letter. A *sentence* is such a piece that starts with an upper-case letter, ends with ``.``, ``!`` or
   ``?``, has 6 to 60 words and 30 to 400 characters, is at least 70 % letters and spaces and contains none of
   ``>>>``, ``://``, ``` `` ```. A *fragment* is a piece of a paragraph also split at list items (a new line
   starting ``-``, ``*``, ``+``, ``1.`` or ``name:`` / ``name (type):``; leading list markers dropped) with
   4 to 60 words, 20 to 400 characters and the same letter and banned-string rules, that is not a sentence.
   Each set is deduplicated and ordered by the SHA-256 of each text's UTF-8 bytes (a fixed pseudo-random
   order: a prefix is a uniform sample). The queries are the first ``QUERIES`` sentences (default 1,000:
   real texts not in the set); the reference set is the other sentences, then the fragments, the first ``N``
   (default 1,000,000), then, only when these are fewer than ``N``, *literals*: single-line ``"..."`` /
   ``'...'`` string literals of 20 to 400 characters (no backslash) and inline comments (``code  # text``)
   of the Python files, by the fragment rules, without any of ``{}%[]=``, not already in the corpus, in
   SHA-256 order; then, only when still fewer, *short pieces*: fragments and literals (12 to 400 characters
   for literals, matched again with that lower bound) with 3 words or more and 12 characters or more that
   are in none of the tiers before, in SHA-256 order. A prefix of up to all the sentences is sentences only. (A corpus built before a tier
   existed is extended by appending it: its rows, and the chunks embedded from them, stay valid.)
   ``OUT/corpus.json`` records the counts, the SHA-256 of ``corpus.txt`` and the Python version.
2. Embeddings: the project's own provider (``evaltasks.embeddings.get_provider("local")``, the bundled
   all-MiniLM-L6-v2, unit float32 rows of 384) in chunks of 10,000 rows, ``OUT/chunk-00000.npy`` … (rows
   10,000·i to 10,000·(i+1)-1), each written to a temporary name and renamed (atomic), so an interrupted run
   leaves whole chunks only; chunks already present are skipped. The queries go to ``OUT/queries.npy``.
3. Measurement, when every chunk exists (or on the first ``--measure N`` rows, rounded down to whole chunks):
   exact top 10 of the queries (``exact_top_k``), then HNSW (M 16, efConstruction 100, efSearch 16-256: ``run_hnsw``)
   and IVF-Flat, IVF-SQ8 and IVF-PQ (``--pq`` bytes; 0: none) built with the
   default ``SearchConfig`` and queried at nprobe 4-128 (``bench/ivf_search.py``'s ``run_ivf``: build seconds,
   RSS added, index bytes per vector, queries/s, speed-up over exact, recall@1/@10). IVF-SQ8 is what ``auto``
   builds, so it also gets ``auto``'s ``target_recall`` (0.95): nprobe widened from 32 on half the queries as a
   run widens it on its outputs, then measured on the other half (held out). Prints JSON and writes it to
   ``OUT/measure-N.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import sysconfig
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

CHUNK = 10_000
_SPLIT = re.compile(r"(?<=[.!?]) +(?=[A-Z])")
_BANNED = (">>>", "://", "``")
_LITERAL = re.compile(r"\"([^\"\\\n]{20,400})\"|'([^'\\\n]{20,400})'|\S  # ?([^\n]+)")
_SHORT_LITERAL = re.compile(r"\"([^\"\\\n]{12,400})\"|'([^'\\\n]{12,400})'|\S  # ?([^\n]+)")
_ITEM = re.compile(r"\n\s*(?:[-*+]|\d+\.|[A-Za-z_][\w.]*\s*(?:\([^)]*\))?\s*:)\s")  # list items, "name (type):"


_TRIPLE = re.compile(r'("""|\'\'\')(.*?)\1', re.S)
_C_BLOCK = re.compile(r"/\*(.*?)\*/", re.S)
PY_SUFFIXES = (".py", ".pyi")
C_SUFFIXES = (".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh")
TEXT_SUFFIXES = (".rst", ".md", ".txt")


def _line_comments(source: str, marker: str) -> list[str]:
    """Runs of consecutive full-line comments starting with ``marker`` (``#``, ``//``), each one block."""
    blocks: list[str] = []
    run: list[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith(marker) and not stripped.startswith("#!"):
            run.append(stripped.lstrip(marker[0]).lstrip("/!<").strip())
        else:
            if run:
                blocks.append("\n".join(run))
            run = []
            if not stripped and blocks and blocks[-1]:
                blocks.append("")
    if run:
        blocks.append("\n".join(run))
    return [b for b in blocks if b]


def text_blocks(path: Path, source: str) -> list[str]:
    """The prose of one file (see the module docstring): docstrings/strings and comments of code, or all of
    a text file."""
    suffix = path.suffix.lower()
    if suffix in PY_SUFFIXES:
        return [m.group(2) for m in _TRIPLE.finditer(source)] + _line_comments(source, "#")
    if suffix in C_SUFFIXES:
        blocks = [re.sub(r"(?m)^\s*\*+ ?", "", m.group(1)) for m in _C_BLOCK.finditer(source)]
        return blocks + _line_comments(source, "//")
    return [source]


def _passes(sentence: str, strict: bool, short: bool = False) -> bool:
    """The corpus filter (see the module docstring): ``strict`` for sentences, else for fragments (``short``:
    short pieces)."""
    words = sentence.count(" ") + 1
    least_words, least_chars = (6, 30) if strict else (3, 12) if short else (4, 20)
    if not (least_words <= words <= 60 and least_chars <= len(sentence) <= 400):
        return False
    if strict and not (sentence[0].isupper() and sentence[-1] in ".!?"):
        return False
    if any(b in sentence for b in _BANNED):
        return False
    return sum(c.isalpha() or c == " " for c in sentence) >= 0.7 * len(sentence)


def sentences(block: str) -> tuple[set[str], set[str], set[str]]:
    """(sentences, fragments, short pieces) of ``block`` that pass the corpus filter (module docstring)."""
    strict: set[str] = set()
    loose: set[str] = set()
    short: set[str] = set()
    for paragraph in re.split(r"\n\s*\n", block):
        for sentence in _SPLIT.split(" ".join(paragraph.split())):
            if _passes(sentence, True):
                strict.add(sentence)
        for line in _ITEM.split(paragraph):
            for fragment in _SPLIT.split(" ".join(line.split()).lstrip("-*+ ")):
                if fragment and _passes(fragment, False):
                    loose.add(fragment)
                elif fragment and _passes(fragment, False, short=True):
                    short.add(fragment)
    return strict, loose, short


def source_files() -> list[Path]:
    """Every file read (see the module docstring), sorted by path, each once."""
    roots = sorted({sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib")})
    suffixes = set(PY_SUFFIXES + C_SUFFIXES + TEXT_SUFFIXES)
    files: set[Path] = set()
    for root in roots:
        for path in Path(root).rglob("*"):
            if (path.suffix.lower() in suffixes or path.name == "METADATA") and path.is_file():
                files.add(path.resolve())
    return sorted(files)


def literals(path: Path, source: str) -> tuple[set[str], set[str]]:
    """Single-line string literals and inline comments (``code  # comment``) of a Python file that hold none
    of ``{}%[]=`` (format placeholders, code): (those passing the fragment rules, the short ones)."""
    if path.suffix.lower() not in PY_SUFFIXES:
        return set(), set()
    found, short = set(), set()
    for pattern, tier in ((_LITERAL, found), (_SHORT_LITERAL, short)):
        for match in pattern.finditer(source):
            text = " ".join((match.group(1) or match.group(2) or match.group(3)).split())
            if text and not any(c in text for c in "{}%[]=") and _passes(text, False, short=tier is short):
                tier.add(text)
    return found, short - found


def build_corpus(n: int, queries: int) -> tuple[list[str], list[str], dict[str, int]]:
    """(up to ``n`` reference texts, ``queries`` query texts, counts) in the order of the module docstring."""
    strict: set[str] = set()
    loose: set[str] = set()
    third: set[str] = set()
    fourth: set[str] = set()
    files = source_files()
    for path in files:
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for block in text_blocks(path, source):
            s, f, short = sentences(block)
            strict |= s
            loose |= f
            fourth |= short
        found, short = literals(path, source)
        third |= found
        fourth |= short
    loose -= strict
    third -= strict | loose
    fourth -= strict | loose | third
    key = lambda text: hashlib.sha256(text.encode("utf-8")).digest()  # noqa: E731
    first = sorted(strict, key=key)
    rest = sorted(loose, key=key)
    last = sorted(third, key=key) if len(first) - queries + len(rest) < n else []
    shortest = sorted(fourth, key=key) if len(first) - queries + len(rest) + len(last) < n else []
    counts = {
        "files": len(files),
        "sentences": len(first),
        "fragments": len(rest),
        "literals": len(third),
        "short": len(fourth),
    }
    return (first[queries:] + rest + last + shortest)[:n], first[:queries], counts


def _atomic_save(path: Path, array: np.ndarray) -> None:
    """``np.save`` to a temporary file beside ``path``, fsynced, then renamed over ``path``
    (:func:`evaltasks._atomic.atomic_path`, the index's own atomic write)."""
    from evaltasks._atomic import atomic_path, synced_writer

    with atomic_path(path) as tmp, synced_writer(tmp, "wb") as handle:
        np.save(handle, array, allow_pickle=False)


def _write_corpus(out: Path, text_path: Path, lines: list[str], meta: dict[str, object]) -> dict[str, object]:
    """Write ``lines`` (one text a line) to ``text_path`` and ``meta`` with the text's sha256 to
    ``out/corpus.json``: the text under a temporary name first, then corpus.json, then the text's rename (the
    commit point: corpus.json never describes a text that is not there). Returns the written meta."""
    body = "\n".join(lines) + "\n"
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=out, suffix=".tmp", delete=False) as handle:
        handle.write(body)
    meta = {**meta, "sha256": hashlib.sha256(body.encode("utf-8")).hexdigest()}
    (out / "corpus.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    os.replace(handle.name, text_path)
    return meta


def corpus(out: Path, n: int, queries: int) -> list[str]:
    """The corpus in ``out`` (built and written there first when absent). Raises SystemExit when too small."""
    text_path = out / "corpus.txt"
    if not text_path.exists():
        t0 = time.perf_counter()
        references, asked, counts = build_corpus(n, queries)
        if len(asked) < queries or len(references) < CHUNK:
            raise SystemExit(f"too few texts: {counts}")
        lines = references + asked
        meta = _write_corpus(
            out,
            text_path,
            lines,
            {
                "n": len(references),
                "queries": queries,
                **counts,
                "python": sys.version.split()[0],
                "build_s": round(time.perf_counter() - t0, 1),
            },
        )
        print(json.dumps({"corpus": meta}), file=sys.stderr, flush=True)
    lines = text_path.read_text(encoding="utf-8").splitlines()
    meta = json.loads((out / "corpus.json").read_text(encoding="utf-8"))
    if meta["n"] < n and not {"literals", "short"} <= set(meta):  # built before a later tier existed: append
        references, asked, counts = build_corpus(n, meta["queries"])
        if references[: meta["n"]] != lines[: meta["n"]] or asked != lines[meta["n"] :]:
            raise SystemExit(f"the installed packages changed since {text_path} was built: cannot extend it")
        lines = references + asked
        meta = _write_corpus(out, text_path, lines, {**meta, "n": len(references), **counts})
        print(json.dumps({"corpus extended": meta}), file=sys.stderr, flush=True)
    if len(lines) != meta["n"] + meta["queries"]:
        raise SystemExit(f"{text_path} has {len(lines)} lines, corpus.json says {meta['n'] + meta['queries']}")
    return lines


def embed(out: Path, lines: list[str], n: int) -> int:
    """Embed the missing chunks of rows 0..n-1 and the queries (rows n..); the number of chunks embedded now."""
    from evaltasks.embeddings import get_provider

    provider = get_provider("local")
    if not (out / "queries.npy").exists():
        _atomic_save(out / "queries.npy", provider.embed(lines[n:]))
    done = 0
    started_with = (out / "corpus.json").read_text(encoding="utf-8")
    for i in range(-(-n // CHUNK)):
        path = out / f"chunk-{i:05d}.npy"
        rows = min(n, (i + 1) * CHUNK) - i * CHUNK
        if path.exists() and np.load(path, mmap_mode="r").shape == (rows, 384):
            continue
        if (out / "corpus.json").read_text(encoding="utf-8") != started_with:
            raise SystemExit("the corpus was extended meanwhile: run again to continue with it")
        t0 = time.perf_counter()
        vectors = provider.embed(lines[i * CHUNK : min(n, (i + 1) * CHUNK)])
        _atomic_save(path, vectors)
        done += 1
        print(
            json.dumps(
                {"chunk": i, "rows": len(vectors), "texts_per_s": round(len(vectors) / (time.perf_counter() - t0), 1)}
            ),
            file=sys.stderr,
            flush=True,
        )
    return done


def complete_prefix(out: Path) -> int:
    """Rows 0..r-1 covered by consecutive chunks present in ``out`` from chunk 0: r."""
    i = 0
    while (out / f"chunk-{i:05d}.npy").exists():
        i += 1
    return i * CHUNK


def run_hnsw(
    vectors: np.ndarray,
    queries: np.ndarray,
    truth: np.ndarray,
    exact_s: float,
    hnsw_m: int = 16,
    ef_construction: int = 100,
) -> dict[str, object]:
    """HNSW (``search: hnsw`` with ``hnsw_m``/``ef_construction``, built as a run builds it) against exact search
    (``truth``: the exact top 10 of ``queries``, found in ``exact_s`` seconds): build seconds and CPU seconds, then
    queries/s, speed-up and recall@1/@10 at ``ef_search`` 16-256."""
    from ivf_search import recall

    from evaltasks.index.search import ReferenceSearch, SearchConfig

    t0, c0 = time.perf_counter(), time.process_time()
    search = ReferenceSearch(vectors, SearchConfig(kind="hnsw", hnsw_m=hnsw_m, ef_construction=ef_construction))
    row: dict[str, object] = {
        "label": search.config.label(),
        "build_s": round(time.perf_counter() - t0, 1),
        "build_cpu_s": round(time.process_time() - c0, 1),
        "ef_search": [],
    }
    for ef in (16, 32, 64, 128, 256):
        query_config = replace(search.config, ef_search=ef)
        t0 = time.perf_counter()
        _, found = search.top_k(queries, 10, query_config)
        seconds = time.perf_counter() - t0
        r1, r10 = recall(found, truth)
        row["ef_search"].append(
            {  # type: ignore[union-attr]
                "ef_search": ef,
                "qps": round(len(queries) / seconds, 1),
                "speedup_vs_exact": round(exact_s / seconds, 1),
                "recall_at_1": r1,
                "recall_at_10": round(r10, 4),
            }
        )
    return row


def measure(out: Path, rows: int, pq: int) -> dict[str, object]:
    """IVF-Flat, IVF-SQ8, IVF-PQ and HNSW against exact search over the first ``rows`` embeddings (see the module
    docstring)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ivf_search import run_ivf

    from evaltasks.index._blas import faiss
    from evaltasks.index.search import AUTO_TARGET_RECALL, SearchConfig, exact_top_k

    chunks = rows // CHUNK
    vectors = np.empty((chunks * CHUNK, 384), dtype=np.float32)
    for i in range(chunks):
        vectors[i * CHUNK : (i + 1) * CHUNK] = np.load(out / f"chunk-{i:05d}.npy")
    queries = np.load(out / "queries.npy")
    m = len(queries)
    result: dict[str, object] = {
        "n": len(vectors),
        "d": 384,
        "queries": m,
        "real": True,
        "cpus": os.cpu_count(),
        "load_avg_before": os.getloadavg(),
        "faiss": faiss.__version__,
        "corpus": json.loads((out / "corpus.json").read_text(encoding="utf-8")),
    }
    t0 = time.perf_counter()
    _, truth = exact_top_k(vectors, queries, 10)
    exact = time.perf_counter() - t0
    result["exact"] = {"seconds": round(exact, 1), "qps": round(m / exact, 1), "bytes_per_vector": 4 * 384}
    print(json.dumps(result), file=sys.stderr, flush=True)
    nprobes = (4, 8, 16, 32, 64, 128)
    with tempfile.TemporaryDirectory() as tmp:
        result["ivf_flat"] = run_ivf(vectors, queries, truth, m / exact, SearchConfig(kind="ivf"), nprobes, Path(tmp))
        # the configuration `auto` builds above its threshold, target_recall included
        result["ivf_sq8"] = run_ivf(
            vectors,
            queries,
            truth,
            m / exact,
            SearchConfig(kind="ivf", ivf_sq8=True, target_recall=AUTO_TARGET_RECALL),
            nprobes,
            Path(tmp),
        )
        if pq:
            result["ivf_pq"] = run_ivf(
                vectors, queries, truth, m / exact, SearchConfig(kind="ivf", ivf_pq=pq), nprobes, Path(tmp)
            )
    result["hnsw"] = run_hnsw(vectors, queries, truth, exact)
    result["load_avg_after"] = os.getloadavg()
    (out / f"measure-{len(vectors)}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="output folder (corpus, chunks, measurements); outside the repository")
    parser.add_argument("--n", type=int, default=1_000_000, help="reference sentences (default 1,000,000)")
    parser.add_argument("--queries", type=int, default=1_000, help="query sentences (default 1,000)")
    parser.add_argument("--pq", type=int, default=48, help="IVF-PQ code bytes (default 48; 0: no IVF-PQ)")
    parser.add_argument("--corpus-only", action="store_true", help="build the corpus and stop")
    parser.add_argument("--measure", type=int, metavar="ROWS", help="only measure on the first ROWS embedded rows")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.measure:
        rows = min(args.measure, complete_prefix(args.out))
        if rows < CHUNK:
            raise SystemExit(f"no complete chunk in {args.out}")
        print(json.dumps(measure(args.out, rows, args.pq), indent=1))
        return
    lines = corpus(args.out, args.n, args.queries)
    n = len(lines) - json.loads((args.out / "corpus.json").read_text(encoding="utf-8"))["queries"]
    if args.corpus_only:
        return
    embed(args.out, lines, n)
    print(json.dumps(measure(args.out, n, args.pq), indent=1))


if __name__ == "__main__":
    main()
