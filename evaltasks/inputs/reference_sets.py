"""Named reference sets: one list of references shared by every case, possibly very large (10^5–10^6).

A suite declares them under ``reference_sets`` and a metric uses one with ``reference_set: NAME``::

    reference_sets:
      faq: faq.txt                          # text file: one reference per line (blank lines skipped)
      answers: {path: answers.csv, column: answer, search: hnsw, ef_search: 256}
      corpus: {path: corpus.jsonl, column: text, search: ivf, nprobe: 64, ivf_pq: 48}
      docs: {path: docs.txt, search: hnsw, target_recall: 0.98}
      inline: ["Paris is the capital of France.", "..."]

Files: ``.txt`` (one per line), ``.csv`` / ``.jsonl`` / ``.json`` / ``.yaml`` with ``column`` naming the field
(a ``.json`` / ``.yaml`` list of strings needs none). Max aggregation searches the set with FAISS
(``auto`` by default: exact ``flat`` up to ``search_auto_above`` references, approximate ``ivf`` with SQ8 codes above;
``hnsw`` on request; an approximate search's recall is measured on the run's outputs and reported, and with a
``target_recall`` (``auto``'s default 0.95) its query breadth is widened until it reaches it).
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from functools import cached_property
from pathlib import Path
from typing import Any

from evaltasks.errors import ConfigError, DatasetError, Problem
from evaltasks.index.search import SearchConfig

SET_FORMATS = (".txt", ".csv", ".jsonl", ".json", ".yaml", ".yml")


@dataclass(frozen=True, eq=False)
class ReferenceSet:
    """A named list of reference texts shared by every test case.

    Attributes:
        name: the set's name in the suite.
        texts: the references (non-empty strings; duplicates kept once, order kept).
        search: how max aggregation searches the set, resolved against its size (``auto`` is stored as ``flat``
            or ``ivf``, an IVF's ``nlist`` fixed).
        source: where the texts came from (file path or ``"<suite>"``/``"<python>"``).

    Raises:
        ValueError: an empty set or an empty reference.
    """

    name: str
    texts: tuple[str, ...]
    search: SearchConfig = field(default_factory=SearchConfig)
    source: str = "<python>"

    def __post_init__(self) -> None:
        texts = tuple(dict.fromkeys(self.texts))
        if not texts:
            raise ValueError(f"reference set '{self.name}' is empty")
        if any(not isinstance(t, str) or not t.strip() for t in texts):
            raise ValueError(f"reference set '{self.name}' holds an empty or non-string reference")
        object.__setattr__(self, "texts", texts)
        object.__setattr__(self, "search", self.search.resolve(len(texts)))  # auto: flat or ivf by size

    @cached_property
    def sha256(self) -> str:
        """sha256 of the texts (NUL-separated): the set's content identity."""
        digest = hashlib.sha256()
        for text in self.texts:
            digest.update(text.encode("utf-8"))
            digest.update(b"\0")
        return digest.hexdigest()

    def __len__(self) -> int:
        return len(self.texts)

    def __repr__(self) -> str:
        return f"ReferenceSet(name={self.name!r}, count={len(self)}, sha256={self.sha256[:12]!r}, search={self.search.label()!r})"


def _search_config(options: dict[str, Any], suite_source: str, where: str) -> SearchConfig:
    """The set's :class:`SearchConfig` from its remaining suite options (``search`` is the kind).

    Raises:
        ConfigError: an unknown option or a bad value, located at ``where`` with the option as the field.
    """
    fields = {f.name for f in dataclass_fields(SearchConfig)} - {"kind"}
    unknown = sorted(set(options) - fields - {"search"})
    if unknown:
        raise ConfigError(
            [
                Problem(
                    suite_source,
                    where,
                    key,
                    f"is not a reference-set option (options: path, texts, "
                    f"column, search, {', '.join(sorted(fields))})",
                )
                for key in unknown
            ]
        )
    try:
        return SearchConfig(**{"kind": options.pop("search", "auto"), **options})
    except ValueError as exc:
        field, _, message = str(exc).partition(" ")
        raise ConfigError([Problem(suite_source, where, field, message)]) from None


def load_reference_set(name: str, spec: Any, base_dir: Path, suite_source: str) -> ReferenceSet:
    """Build the set ``name`` from its suite entry (a list, a path, or a mapping with ``path``/``texts``).

    Raises:
        DatasetError: the file is missing or unreadable, a row lacks the column, or a value is not a string.
        ConfigError: an unknown or invalid search option (the field named).
        ValueError: an empty set.
    """
    where = f"reference_sets.{name}"
    options: dict[str, Any] = {}
    if isinstance(spec, dict):
        options = dict(spec)
        spec = options.pop("texts", None) if "texts" in options else options.pop("path", None)
    column = options.pop("column", None)
    search = _search_config(options, suite_source, where)
    if isinstance(spec, list):
        if not all(isinstance(t, str) for t in spec):
            raise DatasetError([Problem(suite_source, where, "texts", "must be a list of strings")])
        return ReferenceSet(name, tuple(spec), search, "<suite>")
    if not isinstance(spec, str):
        raise DatasetError(
            [Problem(suite_source, where, "", "must be a path, a list of strings, or a mapping with path")]
        )
    path = (base_dir / spec).resolve()
    source = str(base_dir / spec)
    suffix = Path(spec).suffix.lower()  # the name the suite gives, not a symlink target's
    if suffix not in SET_FORMATS:
        raise DatasetError([Problem(suite_source, where, "path", f"must end in one of {', '.join(SET_FORMATS)}")])
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DatasetError(
            [Problem(source, "", "", f"reference set file not found (reference set '{name}')")]
        ) from None
    except OSError as exc:
        raise DatasetError([Problem(source, "", "", f"cannot read the reference set: {exc}")]) from None
    from evaltasks.inputs.files import decode_text, load_yaml

    text = decode_text(raw, source, DatasetError)  # UTF-8 only, located: a UTF-16 file or a NUL byte names its line
    problems: list[Problem] = []
    texts: list[str] = []
    if suffix == ".txt":
        texts = [line.strip() for line in text.split("\n") if line.strip()]
    elif suffix == ".csv":
        reader = csv.DictReader(text.split("\n"))
        if column is None or column not in (reader.fieldnames or []):
            raise DatasetError(
                [
                    Problem(
                        source,
                        "line 1",
                        column or "column",
                        f"column not found (columns: {', '.join(reader.fieldnames or [])})",
                    )
                ]
            )
        texts = [row[column].strip() for row in reader if row.get(column) and row[column].strip()]
    else:
        if suffix == ".jsonl":
            rows: list[tuple[str, Any]] = []
            for number, line in enumerate(text.split("\n"), start=1):
                if line.strip():
                    try:
                        rows.append((f"line {number}", json.loads(line)))
                    except json.JSONDecodeError as exc:
                        problems.append(Problem(source, f"line {number}", "", f"invalid JSON: {exc.msg}"))
        else:
            if suffix == ".json":
                try:
                    data = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise DatasetError(
                        [Problem(source, f"line {exc.lineno}", "", f"cannot parse the reference set: {exc.msg}")]
                    ) from None
            else:  # the same YAML rules as suites: no tags, no duplicate keys, problems located by line
                data = load_yaml(text, source, DatasetError)
            if not isinstance(data, list):
                raise DatasetError([Problem(source, "", "", "must be a list")])
            rows = [(f"item {i}", item) for i, item in enumerate(data)]
        for location, item in rows:
            value = item.get(column) if isinstance(item, dict) and column else item
            if isinstance(value, str) and value.strip():
                texts.append(value.strip())
            elif not (isinstance(value, str)):
                problems.append(Problem(source, location, column or "", "must be a string"))
    if problems:
        raise DatasetError(problems)
    return ReferenceSet(name, tuple(texts), search, source)
