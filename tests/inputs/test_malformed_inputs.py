"""A corpus of malformed inputs (docs/suite.md#suite-file and docs/python-api.md#python-api: invalid input): each exits 2 before scoring, naming file, row, field.

Every case writes a suite file and its dataset (CSV, JSONL, JSON or YAML) into a fresh directory, runs the
real CLI entry point (``evaltasks.cli.main(["run", ...])`` in-process: validation happens before Prefect
starts, so this is fast) and checks:

- exit code 2;
- stderr holds the exact located problem line ``<file>, <row>: field '<field>' <message>`` (the row is a
  physical ``line N`` for CSV/JSONL and YAML syntax, ``item N`` for JSON/YAML lists, or a config path such as
  ``metrics[0]`` in the suite; a problem with the whole file has no row, one with a whole row no field);
- no traceback;
- nothing already written is lost and nothing new is created: the directory tree, including a previous
  run's ``eval-results/results.json``, is byte-identical afterwards.

A few cases also run as a real ``python -m evaltasks.cli`` subprocess, to prove that no traceback reaches
stderr and that Prefect never starts; and a suite carrying ``!!python/object/apply:os.system`` must create
nothing (YAML is data).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from evaltasks import cli
from tests.cli_forkserver import run_cli

SUITE = "suite.yaml"
LC = "  - metric: LengthCheckMetric\n"
RM = "  - metric: ReferenceMatchMetric\n    embedding_provider: local\n"
JSONL_OK = '{"actual_output": "a"}\n'
DEEP = 100_000  # nesting depth far beyond Python's recursion limit
# "Billion laughs" in one 500-byte flow sequence (as a metric argument: only in a subprocess with a deadline,
# see test_an_alias_bomb_exits_2_with_one_bounded_message_in_bounded_memory): 9 levels of 9 aliases to the level below (9^9 leaves).
BOMB = (
    "[&a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol], "
    + ", ".join(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9))
    + "]"
)


def S(
    dataset: str = "d.jsonl", metrics: str = LC, dataset_extra: str = "", extra: str = "", head: str = "name: s\n"
) -> str:
    """A suite file's text: ``head``, a dataset block (path + ``dataset_extra``), metrics, ``extra``."""
    return f"{head}dataset:\n  path: {dataset}\n{dataset_extra}metrics:\n{metrics}{extra}"


def _symlink_loop(root: Path) -> None:
    (root / "loop.jsonl").symlink_to("loop.jsonl")


def _dangling_symlink(root: Path) -> None:
    (root / "gone.jsonl").symlink_to(root / "nowhere" / "gone.jsonl")


def _directory(root: Path) -> None:
    (root / "dir.jsonl").mkdir()


@dataclass(frozen=True)
class Bad:
    """One malformed input and the located problem it must produce.

    ``file`` is the file the message names (relative to the case directory), ``where`` the row (``line 3``,
    ``item 1``, ``metrics[0]``; "" for the whole file), ``field`` the field (None for a whole row or file), and
    ``message`` the start of the problem's text, which must directly follow the location.
    """

    id: str
    suite: str
    files: dict[str, str | bytes | Callable[[Path], None]]
    file: str
    where: str
    field: str | None
    message: str
    extra: tuple[str, ...] = field(default=())  # further substrings stderr must hold (e.g. a suggestion)


CORPUS: list[Bad] = [
    # --- the suite file: YAML itself ----------------------------------------------------------------------
    Bad(
        "suite-yaml-unclosed-flow",
        "name: s\ndataset:\n  path: d.jsonl\nmetrics: [\n  - metric: LengthCheckMetric\n",
        {"d.jsonl": JSONL_OK},
        SUITE,
        "line 5",
        None,
        "invalid YAML",
    ),
    Bad(
        "suite-yaml-tab-indent",
        "name: s\ndataset:\n\tpath: d.jsonl\nmetrics:\n" + LC,
        {"d.jsonl": JSONL_OK},
        SUITE,
        "line 3",
        None,
        "invalid YAML",
    ),
    Bad(
        "suite-yaml-duplicate-key",
        S() + "metrics:\n  - metric: LengthCheckMetric\n    unit: words\n",
        {"d.jsonl": JSONL_OK},
        SUITE,
        "line 6",
        "metrics",
        "duplicate key (first at line 4)",
    ),
    Bad(
        "suite-yaml-python-object-tag",
        S(head='name: !!python/object/apply:os.system ["touch PWNED"]\n'),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "line 1",
        "name",
        "YAML tag '!!python/object/apply:os.system' is not allowed",
    ),
    Bad(
        "suite-yaml-python-name-tag-nested",
        S(metrics=LC + "    threshold: !!python/name:os.system\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "line 6",
        "threshold",
        "YAML tag '!!python/name:os.system' is not allowed",
    ),
    Bad(
        "suite-yaml-custom-tag",
        S(dataset="!include other.yaml"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "line 3",
        "path",
        "YAML tag '!include' is not allowed",
    ),
    Bad(
        "suite-yaml-deeply-nested",
        S(extra="description: " + "[" * DEEP + "]" * DEEP + "\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "line 6",
        None,
        "YAML nested too deeply",
    ),
    Bad(
        "suite-yaml-impossible-date",
        S(extra="description: 2024-13-45\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "line 6",
        "description",
        "invalid !!timestamp value '2024-13-45'",
    ),
    Bad(
        "suite-yaml-bad-explicit-int",
        S(metrics=LC + "    max_length: !!int ten\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "line 6",
        "max_length",
        "invalid !!int value 'ten'",
    ),
    Bad(
        "suite-yaml-alias-bomb",
        "a: &a [x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))
        + S(head="name: s\n").replace("metrics:", "description: *i\nmetrics:", 1),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "line 7",
        None,
        "YAML aliases expand this document by more than 1,000,000 nodes",
    ),
    Bad(
        "suite-yaml-recursive-alias",
        S(extra="description: &r [x, *r]\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "line 6",
        None,
        "a YAML alias refers to a node that contains it",
    ),
    Bad(
        "suite-long-argument-quoted-bounded",
        S(metrics=LC + "    unit: " + "w" * 100_000 + "\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "unit",
        "must be one of ['chars', 'words'], got '" + "w" * 57 + "..." + "w" * 58 + "'",
    ),
    Bad(
        "suite-not-a-mapping",
        "- name: s\n- dataset: d.jsonl\n",
        {"d.jsonl": JSONL_OK},
        SUITE,
        "",
        None,
        "must be a YAML mapping with name, dataset and metrics",
    ),
    Bad(
        "suite-empty-file",
        "",
        {"d.jsonl": JSONL_OK},
        SUITE,
        "",
        None,
        "must be a YAML mapping with name, dataset and metrics",
    ),
    Bad(
        "suite-not-utf8",
        "",  # bytes: see _BYTES_SUITES
        {"d.jsonl": JSONL_OK},
        SUITE,
        "line 2",
        None,
        "is not UTF-8 text",
    ),
    Bad(
        "suite-utf16-bom",
        "",  # bytes: see _BYTES_SUITES
        {"d.jsonl": JSONL_OK},
        SUITE,
        "line 1",
        None,
        "is UTF-16 text (byte-order mark)",
    ),
    # --- the suite file: keys and types --------------------------------------------------------------------
    Bad(
        "suite-unknown-top-level-key",
        S().replace("metrics:", "metric:"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "",
        "metric",
        "unknown key (did you mean 'metrics'?)",
    ),
    Bad(
        "suite-unknown-dataset-key",
        S(dataset_extra="  feilds: {input: q}\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "dataset",
        "feilds",
        "unknown key (did you mean 'fields'?)",
    ),
    Bad(
        "suite-unknown-fields-key",
        S(dataset_extra="  fields: {actual_ouput: answer}\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "dataset.fields",
        "actual_ouput",
        "unknown key (did you mean 'actual_output'?)",
    ),
    Bad(
        "suite-unknown-gate-key",
        S(extra="gate:\n  min_passrate: 0.5\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "gate",
        "min_passrate",
        "unknown key (did you mean 'min_pass_rate'?)",
    ),
    Bad("suite-missing-name", S(head=""), {"d.jsonl": JSONL_OK}, SUITE, "", "name", "is required"),
    Bad(
        "suite-empty-name",
        S(head='name: ""\n'),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "",
        "name",
        "String should have at least 1 character",
    ),
    Bad(
        "suite-name-not-a-string",
        S(head="name: [a, b]\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "",
        "name",
        "must be a valid string",
    ),
    Bad(
        "suite-missing-dataset", "name: s\nmetrics:\n" + LC, {"d.jsonl": JSONL_OK}, SUITE, "", "dataset", "is required"
    ),
    Bad(
        "suite-missing-dataset-path",
        "name: s\ndataset:\n  fields: {input: q}\nmetrics:\n" + LC,
        {"d.jsonl": JSONL_OK},
        SUITE,
        "dataset",
        "path",
        "is required",
    ),
    Bad(
        "suite-dataset-path-not-a-string",
        S(dataset="42"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "dataset",
        "path",
        "must be a valid string",
    ),
    Bad(
        "suite-missing-metrics",
        "name: s\ndataset:\n  path: d.jsonl\n",
        {"d.jsonl": JSONL_OK},
        SUITE,
        "",
        "metrics",
        "is required",
    ),
    Bad(
        "suite-empty-metrics",
        S(metrics="").replace("metrics:\n", "metrics: []\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "",
        "metrics",
        "List should have at least 1 item",
    ),
    Bad(
        "suite-metrics-not-a-list",
        S(metrics="  metric: LengthCheckMetric\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "",
        "metrics",
        "must be a valid list",
    ),
    Bad(
        "suite-metric-entry-not-a-mapping",
        S(metrics="  - LengthCheckMetric\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        None,
        "must be a valid dictionary",
    ),
    Bad(
        "suite-metric-without-metric-key",
        S(metrics="  - threshold: 0.5\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "metric",
        "is required",
    ),
    Bad(
        "suite-unknown-metric",
        S(metrics="  - metric: LenghtCheckMetric\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "metric",
        "unknown metric 'LenghtCheckMetric'",
        ("did you mean 'LengthCheckMetric'",),
    ),
    Bad(
        "suite-unknown-metric-argument",
        S(metrics=LC + "    max_lenght: 10\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "max_lenght",
        "unknown argument 'max_lenght' for LengthCheckMetric (did you mean 'max_length'?)",
    ),
    Bad(
        "suite-threshold-high",
        S(metrics=LC + "    threshold: high\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "threshold",
        "must be a number in [0, 1], got 'high'",
    ),
    Bad(
        "suite-threshold-above-one",
        S(metrics=RM + "    threshold: 1.5\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "threshold",
        "must be a number in [0, 1], got 1.5",
    ),
    Bad(
        "suite-threshold-nan",
        S(metrics=LC + "    threshold: .nan\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "threshold",
        "must be a number in [0, 1], got nan",
    ),
    Bad(
        "suite-threshold-boolean",
        S(metrics=LC + "    threshold: yes\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "threshold",
        "must be a number in [0, 1], got True",
    ),
    Bad(
        "suite-min-length-above-max-length",
        S(metrics=LC + "    min_length: 50\n    max_length: 10\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "min_length",
        "(50) must be <= max_length (10)",
    ),
    Bad(
        "suite-negative-max-length",
        S(metrics=LC + "    max_length: -1\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "max_length",
        "must be >= 0, got -1",
    ),
    Bad(
        "suite-max-length-not-an-integer",
        S(metrics=LC + "    max_length: ten\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "max_length",
        "must be an integer, got 'ten'",
    ),
    Bad(
        "suite-max-length-fractional",
        S(metrics=LC + "    max_length: 10.5\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "max_length",
        "must be an integer, got 10.5",
    ),
    Bad(
        "suite-unknown-unit",
        S(metrics=LC + "    unit: lines\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "unit",
        "must be one of ['chars', 'words'], got 'lines'",
    ),
    Bad(
        "suite-duplicate-metric-names",
        S(metrics=LC + LC),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[1]",
        "name",
        "'LengthCheckMetric' is already used",
    ),
    Bad(
        "suite-empty-references-list",
        S(metrics=RM + "    references: []\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "references",
        "must not be an empty list",
    ),
    Bad(
        "suite-references-not-a-list",
        S(metrics=RM + "    references: 42\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "references",
        "must be a list of strings",
    ),
    Bad(
        "suite-unknown-aggregation",
        S(metrics=RM + "    aggregation: median\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "aggregation",
        "must be one of ['max', 'mean']",
    ),
    Bad(
        "suite-unknown-embedding-provider",
        S(metrics="  - metric: ReferenceMatchMetric\n    embedding_provider: cohere\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "embedding_provider",
        "must be one of",
    ),
    Bad(
        "suite-unknown-reference-set",
        S(metrics=RM + "    reference_set: fqa\n", extra="reference_sets:\n  faq: [Paris]\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "metrics[0]",
        "reference_set",
        "unknown reference set 'fqa' (did you mean 'faq'?)",
    ),
    Bad(
        "suite-unknown-embeddings-provider-key",
        S(extra="embeddings:\n  openia: {dimensions: 8}\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "embeddings",
        "openia",
        "must be 'local' or 'openai'",
    ),
    Bad(
        "suite-gate-min-pass-rate-high",
        S(extra="gate:\n  min_pass_rate: high\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "gate",
        "min_pass_rate",
        "must be a valid number, unable to parse string as a number, got 'high'",
    ),
    Bad(
        "suite-gate-min-pass-rate-above-one",
        S(extra="gate:\n  min_pass_rate: 1.5\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "gate",
        "min_pass_rate",
        "must be less than or equal to 1, got 1.5",
    ),
    Bad(
        "suite-gate-allow-errors-not-boolean",
        S(extra="gate:\n  allow_errors: maybe\n"),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "gate",
        "allow_errors",
        "must be a valid boolean",
    ),
    Bad(
        "suite-empty-list-separator",
        S(dataset_extra='  list_separator: ""\n'),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "dataset",
        "list_separator",
        "must not be empty",
    ),
    Bad(
        "suite-wrong-dataset-extension",
        S(dataset="d.txt"),
        {"d.txt": "a\n"},
        SUITE,
        "dataset",
        "path",
        "must end in one of .csv, .jsonl, .json, .yaml, .yml: 'd.txt'",
    ),
    Bad(
        "suite-dataset-without-extension",
        S(dataset="data"),
        {"data": JSONL_OK},
        SUITE,
        "dataset",
        "path",
        "must end in one of",
    ),
    Bad(
        "suite-dataset-path-with-nul",
        S(dataset='"d\\0.jsonl"'),
        {"d.jsonl": JSONL_OK},
        SUITE,
        "dataset",
        "path",
        "must not contain a NUL character",
    ),
    # --- reference-set files ---------------------------------------------------------------------------------
    Bad(
        "refset-file-missing",
        S(metrics=RM + "    reference_set: faq\n", extra="reference_sets:\n  faq: faq.txt\n"),
        {"d.jsonl": JSONL_OK},
        "faq.txt",
        "",
        None,
        "reference set file not found (reference set 'faq')",
    ),
    Bad(
        "refset-symlink-loop",
        S(metrics=RM + "    reference_set: faq\n", extra="reference_sets:\n  faq: loop.txt\n"),
        {"d.jsonl": JSONL_OK, "loop.txt": lambda root: (root / "loop.txt").symlink_to("loop.txt")},
        SUITE,
        "reference_sets.faq",
        "path",
        "cannot load the reference set: Symlink loop",
    ),
    Bad(
        "refset-deeply-nested-json",
        S(metrics=RM + "    reference_set: faq\n", extra="reference_sets:\n  faq: faq.json\n"),
        {"d.jsonl": JSONL_OK, "faq.json": "[" * DEEP + "]" * DEEP},
        SUITE,
        "reference_sets.faq",
        "path",
        "cannot load the reference set: ",
    ),
    Bad(
        "refset-csv-without-column",
        S(metrics=RM + "    reference_set: faq\n", extra="reference_sets:\n  faq: {path: faq.csv, column: answr}\n"),
        {"d.jsonl": JSONL_OK, "faq.csv": "question,answer\nq,Paris\n"},
        "faq.csv",
        "line 1",
        "answr",
        "column not found (columns: question, answer)",
    ),
    # --- the dataset file as a whole -----------------------------------------------------------------------
    Bad("dataset-missing", S(dataset="nowhere.jsonl"), {}, "nowhere.jsonl", "", None, "dataset file not found"),
    Bad(
        "dataset-is-a-directory",
        S(dataset="dir.jsonl"),
        {"dir.jsonl": _directory},
        "dir.jsonl",
        "",
        None,
        "is a directory, not a dataset file",
    ),
    Bad(
        "dataset-dangling-symlink",
        S(dataset="gone.jsonl"),
        {"gone.jsonl": _dangling_symlink},
        "gone.jsonl",
        "",
        None,
        "dataset file not found",
    ),
    Bad(
        "dataset-symlink-loop",
        S(dataset="loop.jsonl"),
        {"loop.jsonl": _symlink_loop},
        "loop.jsonl",
        "",
        None,
        "cannot resolve the dataset path",
    ),
    Bad("dataset-jsonl-empty", S(), {"d.jsonl": "\n  \n"}, "d.jsonl", "", None, "the dataset has no rows"),
    Bad(
        "dataset-json-empty-list", S(dataset="d.json"), {"d.json": "[]"}, "d.json", "", None, "the dataset has no rows"
    ),
    Bad(
        "dataset-csv-header-only",
        S(dataset="d.csv"),
        {"d.csv": "input,actual_output\n"},
        "d.csv",
        "",
        None,
        "the dataset has no rows",
    ),
    # --- encodings -----------------------------------------------------------------------------------------
    Bad(
        "dataset-csv-not-utf8",
        S(dataset="d.csv"),
        {"d.csv": "input,actual_output\nq1,a\nq2,caf\xe9\n".encode("latin-1")},
        "d.csv",
        "line 3",
        None,
        "is not UTF-8 text",
    ),
    Bad(
        "dataset-csv-utf16-bom",
        S(dataset="d.csv"),
        {"d.csv": "input,actual_output\nq,a\n".encode("utf-16")},
        "d.csv",
        "line 1",
        None,
        "is UTF-16 text (byte-order mark)",
    ),
    Bad(
        "dataset-jsonl-bom-inside",
        S(),
        {"d.jsonl": JSONL_OK + JSONL_OK + "\ufeff" + JSONL_OK},
        "d.jsonl",
        "line 3",
        None,
        "invalid JSON",
    ),
    Bad(
        "dataset-jsonl-lone-surrogate",
        S(),
        {"d.jsonl": JSONL_OK + '{"actual_output": "bad \\ud800 text"}\n'},
        "d.jsonl",
        "line 2",
        "actual_output",
        "contains an unpaired surrogate",
    ),
    # --- CSV -----------------------------------------------------------------------------------------------
    Bad(
        "csv-missing-mapped-column",
        S(dataset="d.csv", dataset_extra="  fields: {actual_output: model_answer}\n"),
        {"d.csv": "question,answer\nq,a\n"},
        "d.csv",
        "line 1",
        "model_answer",
        "column not found in the header (columns: question, answer)",
    ),
    Bad(
        "csv-missing-output-column",
        S(dataset="d.csv"),
        {"d.csv": "question,answer\nq,a\n"},
        "d.csv",
        "line 1",
        "actual_output",
        "column not found in the header",
    ),
    Bad(
        "csv-ragged-row-too-many-cells",
        S(dataset="d.csv"),
        {"d.csv": "input,actual_output\nq1,a\nq2,b,extra\n"},
        "d.csv",
        "line 3",
        None,
        "has 3 cells but the header has 2",
    ),
    Bad(
        "csv-ragged-row-too-few-cells",
        S(dataset="d.csv"),
        {"d.csv": "input,actual_output\nq1,a\nq2\n"},
        "d.csv",
        "line 3",
        "actual_output",
        "is missing: the row has 1 cells but the header has 2",
    ),
    Bad(
        "csv-duplicate-header-column",
        S(dataset="d.csv"),
        {"d.csv": "input,actual_output,input\nq,a,q\n"},
        "d.csv",
        "line 1",
        "input",
        "appears more than once",
    ),
    Bad(
        "csv-unterminated-quote",
        S(dataset="d.csv"),
        {"d.csv": 'input,actual_output\nq1,a\nq2,"never closed\nmore\n'},
        "d.csv",
        "line 3",
        None,
        "invalid CSV: unexpected end of data",
    ),
    Bad(
        "csv-nul-byte",
        S(dataset="d.csv"),
        {"d.csv": "input,actual_output\nq1,a\nq2,b\x00c\n"},
        "d.csv",
        "line 3",
        None,
        "contains a NUL byte",
    ),
    Bad(
        "csv-text-after-closing-quote",
        S(dataset="d.csv"),
        {"d.csv": 'input,actual_output\nq1,a\nq2,"b"c\n'},
        "d.csv",
        "line 3",
        None,
        "invalid CSV: ',' expected after '\"'",
    ),
    Bad(
        "csv-references-cell-empty",
        S(dataset="d.csv", metrics=RM),
        {"d.csv": 'actual_output,references\na,"[""r""]"\nb,\n'},
        "d.csv",
        "line 3",
        "references",
        "is empty: a CSV list cell must hold a JSON array of strings (or set dataset.list_separator)",
    ),
    Bad(
        "jsonl-output-key-in-no-row",
        S(dataset_extra="  fields: {actual_output: output}\n"),
        {"d.jsonl": '{"question": "q", "answer": "a"}\n' * 3},
        "d.jsonl",
        "",
        "output",
        "key not found in any row (dataset.fields.actual_output; keys: answer, question)",
    ),
    Bad(
        "csv-references-cell-not-a-list",
        S(dataset="d.csv", metrics=RM),
        {"d.csv": 'actual_output,references\na,"[""r""]"\nb,Paris\n'},
        "d.csv",
        "line 3",
        "references",
        "must hold a JSON array of strings (or set dataset.list_separator)",
    ),
    # --- JSONL ---------------------------------------------------------------------------------------------
    Bad(
        "jsonl-broken-line",
        S(),
        {"d.jsonl": JSONL_OK + '{"actual_output": "b"\n' + JSONL_OK},
        "d.jsonl",
        "line 2",
        None,
        "invalid JSON: Expecting ',' delimiter",
    ),
    Bad(
        "jsonl-line-not-an-object",
        S(),
        {"d.jsonl": JSONL_OK + '["a", "b"]\n'},
        "d.jsonl",
        "line 2",
        None,
        "must be a JSON object, got array",
    ),
    Bad(
        "jsonl-null-output",
        S(),
        {"d.jsonl": JSONL_OK + '{"actual_output": null}\n'},
        "d.jsonl",
        "line 2",
        "actual_output",
        "is missing or null",
    ),
    Bad(
        "jsonl-missing-output",
        S(),
        {"d.jsonl": JSONL_OK + '{"input": "q"}\n'},
        "d.jsonl",
        "line 2",
        "actual_output",
        "is missing or null",
    ),
    Bad(
        "jsonl-output-is-a-number",
        S(),
        {"d.jsonl": '{"actual_output": 42}\n'},
        "d.jsonl",
        "line 1",
        "actual_output",
        "must be a string, got number",
    ),
    Bad(
        "jsonl-output-is-an-object",
        S(),
        {"d.jsonl": '{"actual_output": {"text": "a"}}\n'},
        "d.jsonl",
        "line 1",
        "actual_output",
        "must be a string, got object",
    ),
    Bad(
        "jsonl-input-is-a-list",
        S(),
        {"d.jsonl": '{"actual_output": "a", "input": ["q"]}\n'},
        "d.jsonl",
        "line 1",
        "input",
        "must be a string, got array",
    ),
    Bad(
        "jsonl-references-not-a-list",
        S(metrics=RM),
        {"d.jsonl": '{"actual_output": "a", "references": "Paris"}\n'},
        "d.jsonl",
        "line 1",
        "references",
        "must be a list of strings (or set dataset.list_separator",
    ),
    Bad(
        "jsonl-references-list-of-numbers",
        S(metrics=RM),
        {"d.jsonl": '{"actual_output": "a", "references": [1, 2]}\n'},
        "d.jsonl",
        "line 1",
        "references",
        "must be a list of strings",
    ),
    Bad(
        "jsonl-references-missing-for-metric",
        S(metrics=RM),
        {"d.jsonl": '{"actual_output": "a", "references": ["r"]}\n{"actual_output": "b"}\n'},
        "d.jsonl",
        "line 2",
        "references",
        "",
        ("needed by ReferenceMatchMetric",),
    ),
    Bad(
        "jsonl-id-is-a-boolean",
        S(dataset_extra="  fields: {id: id}\n"),
        {"d.jsonl": '{"id": true, "actual_output": "a"}\n'},
        "d.jsonl",
        "line 1",
        "id",
        "must be a string or integer, got boolean",
    ),
    Bad(
        "jsonl-duplicate-case-ids",
        S(dataset_extra="  fields: {id: id}\n"),
        {
            "d.jsonl": '{"id": "q1", "actual_output": "a"}\n{"id": "q2", "actual_output": "b"}\n'
            '{"id": "q1", "actual_output": "c"}\n'
        },
        "d.jsonl",
        "line 3",
        "id",
        "duplicate id 'q1' (first at line 1)",
    ),
    Bad(
        "jsonl-mapped-key-in-no-row",
        S(dataset_extra="  fields: {input: questoin}\n"),
        {"d.jsonl": '{"question": "q", "actual_output": "a"}\n'},
        "d.jsonl",
        "",
        "questoin",
        "key not found in any row (dataset.fields.input",
    ),
    Bad(
        "jsonl-deeply-nested",
        S(),
        {"d.jsonl": JSONL_OK + '{"actual_output": "a", "input": ' + "[" * DEEP + "]" * DEEP + "}\n"},
        "d.jsonl",
        "line 2",
        None,
        "JSON nested too deeply",
    ),
    # --- JSON ----------------------------------------------------------------------------------------------
    Bad(
        "json-broken",
        S(dataset="d.json"),
        {"d.json": '[\n  {"actual_output": "a"},\n  {"actual_output": }\n]'},
        "d.json",
        "line 3",
        None,
        "invalid JSON: Expecting value",
    ),
    Bad(
        "json-not-a-list",
        S(dataset="d.json"),
        {"d.json": '{"actual_output": "a"}'},
        "d.json",
        "",
        None,
        "must be a JSON list of objects (or a mapping with 'test_cases')",
    ),
    Bad(
        "json-test-cases-not-a-list",
        S(dataset="d.json"),
        {"d.json": '{"test_cases": {"actual_output": "a"}}'},
        "d.json",
        "",
        "test_cases",
        "must be a list of objects",
    ),
    Bad(
        "json-item-not-an-object",
        S(dataset="d.json"),
        {"d.json": '[{"actual_output": "a"}, "b"]'},
        "d.json",
        "item 1",
        None,
        "must be an object, got string",
    ),
    Bad(
        "json-null-output",
        S(dataset="d.json"),
        {"d.json": '[{"actual_output": "a"}, {"actual_output": null}]'},
        "d.json",
        "item 1",
        "actual_output",
        "is missing or null",
    ),
    Bad(
        "json-deeply-nested",
        S(dataset="d.json"),
        {"d.json": "[" * DEEP + "]" * DEEP},
        "d.json",
        "",
        None,
        "JSON nested too deeply",
    ),
    # --- YAML datasets ---------------------------------------------------------------------------------------
    Bad(
        "yaml-broken",
        S(dataset="d.yaml"),
        {"d.yaml": "- actual_output: a\n- actual_output: [b\n"},
        "d.yaml",
        "line 3",
        None,
        "invalid YAML",
    ),
    Bad(
        "yaml-a-scalar",
        S(dataset="d.yaml"),
        {"d.yaml": "just some text\n"},
        "d.yaml",
        "",
        None,
        "must be a YAML list of objects",
    ),
    Bad(
        "yaml-python-tag",
        S(dataset="d.yaml"),
        {"d.yaml": '- actual_output: a\n- actual_output: !!python/object/apply:os.system ["touch PWNED"]\n'},
        "d.yaml",
        "line 2",
        "actual_output",
        "YAML tag '!!python/object/apply:os.system' is not allowed",
    ),
    Bad(
        "yaml-duplicate-key",
        S(dataset="d.yaml"),
        {"d.yaml": "- actual_output: a\n  input: q\n  actual_output: b\n"},
        "d.yaml",
        "line 3",
        "actual_output",
        "duplicate key (first at line 1)",
    ),
    Bad(
        "yaml-impossible-date",
        S(dataset="d.yaml"),
        {"d.yaml": "- actual_output: a\n  input: 2023-02-30\n"},
        "d.yaml",
        "line 2",
        "input",
        "invalid !!timestamp value '2023-02-30'",
    ),
    Bad(
        "yaml-null-output",
        S(dataset="d.yaml"),
        {"d.yaml": "- actual_output: a\n- actual_output: ~\n"},
        "d.yaml",
        "item 1",
        "actual_output",
        "is missing or null",
    ),
    Bad(
        "yaml-list-field-not-a-list",
        S(dataset="d.yaml", metrics=RM),
        {"d.yaml": "- actual_output: a\n  references: {first: Paris}\n"},
        "d.yaml",
        "item 0",
        "references",
        "must be a list of strings, got object",
    ),
    Bad(
        "yaml-output-is-a-date",
        S(dataset="d.yaml"),
        {"d.yaml": "- actual_output: 2024-01-01\n"},
        "d.yaml",
        "item 0",
        "actual_output",
        "must be a string, got date",
    ),
]

# Byte-level contents that a str cannot carry.
_BYTES_SUITES = {
    "suite-not-utf8": b"name: s\n# caf\xe9\ndataset:\n  path: d.jsonl\nmetrics:\n" + LC.encode(),
    "suite-utf16-bom": S().encode("utf-16"),
}


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every path under ``root`` with its bytes (files), ``<dir>`` or ``-> target`` (symlinks)."""
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            out[rel] = "<dir>"
        else:
            out[rel] = path.read_bytes()
    return out


def _prepare(root: Path, case: Bad) -> Path:
    """Write ``case``'s suite and files under ``root`` and a previous run's reports; return the suite path."""
    suite = root / SUITE
    suite.write_bytes(_BYTES_SUITES[case.id] if case.id in _BYTES_SUITES else case.suite.encode("utf-8"))
    for name, content in case.files.items():
        if callable(content):
            content(root)
        elif isinstance(content, bytes):
            (root / name).write_bytes(content)
        else:
            (root / name).write_text(content, encoding="utf-8", newline="")
    previous = root / "eval-results"
    previous.mkdir()
    (previous / "results.json").write_text(
        '{"schema_version": 1, "passed": true, "cases": ["earlier run"]}\n', encoding="utf-8"
    )
    (previous / "junit.xml").write_text("<testsuites/>\n", encoding="utf-8")
    (previous / "summary.md").write_text("# earlier run\n", encoding="utf-8")
    return suite


def _expected_line(root: Path, case: Bad) -> str:
    """The located problem as the CLI must print it: ``<file>, <row>: field '<f>' <message…>``."""
    text = str(root / case.file)
    if case.where:
        text += f", {case.where}"
    text += ": "
    if case.field is not None:
        text += f"field '{case.field}' "
    return text + case.message


def test_the_corpus_is_large_and_distinct() -> None:
    ids = [case.id for case in CORPUS]
    assert len(ids) == len(set(ids))
    assert len(CORPUS) >= 40
    contents = [
        (_BYTES_SUITES.get(c.id, c.suite), tuple(sorted((k, str(v)) for k, v in c.files.items()))) for c in CORPUS
    ]
    assert len(contents) == len(set(contents)), "two corpus cases are the same input"


@pytest.mark.parametrize("case", CORPUS, ids=[case.id for case in CORPUS])
def test_malformed_input_exits_2_with_a_located_message(
    case: Bad, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path.resolve()
    suite = _prepare(root, case)
    monkeypatch.chdir(root)  # relative defaults (index directory…) would land here, inside the snapshot
    before = _tree(root)

    code = cli.main(["run", str(suite), "--output-dir", str(root / "eval-results")])

    out, err = capsys.readouterr()
    assert code == 2, err
    assert "Traceback" not in err + out
    assert err.startswith("evaltasks: error: "), err
    expected = _expected_line(root, case)
    assert f"  - {expected}" in err, f"expected\n  {expected}\nin\n{err}"
    for needle in case.extra:
        assert needle in err, (needle, err)
    doubled = re.search(r"field '([^']+)' (metric )?\1\b", err)  # "field 'unit' unit must be": say it once
    assert doubled is None, err
    assert _tree(root) == before  # nothing already written is lost, nothing new is created


def _run_cli(root: Path, suite: str, files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> str:
    """Write ``suite`` and ``files`` under ``root``, run ``evaltasks run`` in-process; assert exit 2; stderr."""
    (root / SUITE).write_text(suite, encoding="utf-8")
    for name, content in files.items():
        (root / name).write_text(content, encoding="utf-8")
    code = cli.main(["run", str(root / SUITE), "--output-dir", str(root / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    return err


def test_wrong_output_key_is_one_line_listing_the_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """5,000 rows and a wrong actual_output mapping: one problem with the keys that exist, not one per row."""
    rows = "".join(f'{{"question": "q{i}", "answer": "a{i}"}}\n' for i in range(5000))
    err = _run_cli(
        tmp_path, S(dataset_extra="  fields: {input: question, actual_output: output}\n"), {"d.jsonl": rows}, capsys
    )
    assert err.splitlines() == [
        "evaltasks: error: invalid dataset: 1 problem(s)",
        f"  - {tmp_path / 'd.jsonl'}: field 'output' key not found in any row "
        "(dataset.fields.actual_output; keys: answer, question)",
    ]


def test_each_wrong_csv_mapping_is_one_line_listing_the_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _run_cli(
        tmp_path,
        S(dataset="d.csv", dataset_extra="  fields: {input: quest, actual_output: outp}\n"),
        {"d.csv": "question,answer\nq,a\n"},
        capsys,
    )
    source = tmp_path / "d.csv"
    assert err.splitlines() == [
        "evaltasks: error: invalid dataset: 2 problem(s)",
        f"  - {source}, line 1: field 'outp' column not found in the header (columns: question, answer)",
        f"  - {source}, line 1: field 'quest' column not found in the header (columns: question, answer)",
    ]


def test_missing_dataset_is_named_by_a_normalised_path_and_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A suite two directories down reading ``../../data/d.csv``: the message shows the path without ``..``."""
    root = tmp_path.resolve()
    (root / "examples" / "x").mkdir(parents=True)
    suite = S(dataset="../../data/d.csv")
    err = _run_cli(root / "examples" / "x", suite, {}, capsys)
    assert err.splitlines()[1] == (
        f"  - {root / 'data' / 'd.csv'}: dataset file not found (dataset.path '../../data/d.csv' in the suite)"
    )


def test_a_capped_problem_count_says_at_least(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Collection stops at 1,000 problems; the count must not claim to be the total (1,500 bad rows here)."""
    err = _run_cli(tmp_path, S(), {"d.jsonl": '{"actual_output": 42}\n' * 1500}, capsys)
    lines = err.splitlines()
    assert lines[0] == "evaltasks: error: invalid dataset: at least 1000 problem(s)"
    assert lines[-1] == "  ... and at least 980 more"
    # below the cap the count is exact
    err = _run_cli(tmp_path, S(), {"d.jsonl": '{"actual_output": 42}\n' * 30}, capsys)
    assert err.splitlines()[0] == "evaltasks: error: invalid dataset: 30 problem(s)"
    assert err.splitlines()[-1] == "  ... and 10 more"
    # YAML checks stop at 100 problems (150 unsafe tags here)
    err = _run_cli(
        tmp_path, S(dataset="d.yaml"), {"d.yaml": "- actual_output: !!python/name:os.system\n" * 150}, capsys
    )
    assert err.splitlines()[0] == "evaltasks: error: invalid dataset: at least 100 problem(s)"


def test_type_problems_and_missing_fields_are_reported_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows of wrong types and rows lacking what a metric needs: one error lists both kinds, ordered by row (the
    loader used to raise before the metrics' checks ran, so the missing fields came in a second round), and a
    field two metrics need is one line naming both."""
    rows = (
        '{"actual_output": "a", "expected_output": "a", "expected_tools": ["x"], "tools_called": ["x"]}\n'
        '{"actual_output": "b", "tools_called": ["x"]}\n'
        '{"actual_output": "c", "expected_output": "c", "expected_tools": "x"}\n'
        '{"actual_output": "d", "expected_output": null, "expected_tools": []}\n'
        '{"actual_output": "e", "expected_output": 5, "expected_tools": []}\n'
    )
    metrics = (
        "  - metric: ExactMatchMetric\n  - metric: ToolCorrectnessMetric\n"
        "  - metric: SemanticSimilarityMetric\n    embedding_provider: local\n"
    )
    err = _run_cli(tmp_path, S(metrics=metrics), {"d.jsonl": rows}, capsys)
    source = tmp_path / "d.jsonl"
    assert "Traceback" not in err
    assert err.splitlines() == [
        "evaltasks: error: invalid dataset: 5 problem(s)",
        f"  - {source}, line 2: field 'expected_output' is missing "
        "(needed by ExactMatchMetric, SemanticSimilarityMetric)",
        f"  - {source}, line 2: field 'expected_tools' is missing (ToolCorrectnessMetric compares tools_called "
        "with expected_tools; [] means no tool expected) (needed by ToolCorrectnessMetric)",
        f"  - {source}, line 3: field 'expected_tools' must be a list of strings "
        "(or set dataset.list_separator to split a string)",
        f"  - {source}, line 4: field 'expected_output' is missing "
        "(needed by ExactMatchMetric, SemanticSimilarityMetric)",
        f"  - {source}, line 5: field 'expected_output' must be a string, got number",
    ]


def test_a_capped_count_still_says_at_least_with_the_metrics_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reading stops at 1,000 loader problems; the metrics' problems of the rows read before are added, in row
    order, and the count stays a lower bound (3,000 rows: every odd one of a wrong type, every even one lacking
    expected_output)."""
    rows = '{"actual_output": 42}\n{"actual_output": "a"}\n' * 1500
    err = _run_cli(tmp_path, S(metrics="  - metric: ExactMatchMetric\n"), {"d.jsonl": rows}, capsys)
    lines = err.splitlines()
    source = tmp_path / "d.jsonl"
    # rows 1..1999 read: 1,000 of a wrong type, 999 lacking expected_output
    assert lines[0] == "evaltasks: error: invalid dataset: at least 1999 problem(s)"
    assert lines[1:5] == [
        f"  - {source}, line 1: field 'actual_output' must be a string, got number",
        f"  - {source}, line 2: field 'expected_output' is missing (needed by ExactMatchMetric)",
        f"  - {source}, line 3: field 'actual_output' must be a string, got number",
        f"  - {source}, line 4: field 'expected_output' is missing (needed by ExactMatchMetric)",
    ]
    assert lines[-1] == "  ... and at least 1979 more"


# --- the same through a real subprocess: no traceback on stderr, Prefect never starts --------------------------

SUBPROCESS_CASES = [
    "suite-yaml-python-object-tag",
    "yaml-python-tag",
    "suite-dataset-path-with-nul",
    "dataset-symlink-loop",
    "jsonl-deeply-nested",
    "dataset-csv-utf16-bom",
]


@pytest.mark.slow
@pytest.mark.parametrize("case_id", SUBPROCESS_CASES)
def test_malformed_input_in_a_subprocess(case_id: str, tmp_path: Path) -> None:
    case = next(c for c in CORPUS if c.id == case_id)
    root = tmp_path.resolve() / "work"
    root.mkdir()
    _prepare(root, case)
    before = _tree(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "EVALTASKS_"))}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), HF_HUB_OFFLINE="1", DO_NOT_TRACK="1", PYTHONUNBUFFERED="1")
    proc = run_cli("run", SUITE, cwd=root, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stdout == ""
    assert proc.stderr.startswith("evaltasks: error: ")
    # The suite is named as given on the command line (relative), the dataset by its path beside the suite.
    expected = _expected_line(root, case)
    if case.file == SUITE:
        expected = expected.replace(str(root / SUITE), SUITE, 1)
    assert expected in proc.stderr, (expected, proc.stderr)
    assert _tree(root) == before
    assert not (tmp_path / "prefect-home").exists()  # validation ran before Prefect


@pytest.mark.slow
def test_an_alias_bomb_exits_2_with_one_bounded_message_in_bounded_memory(tmp_path: Path) -> None:
    """A 1 KB suite whose metric argument is a "billion laughs" bomb once never exited (every message quoted
    the whole expanded value: 1.5 GiB after 120 s). Now: exit 2, one short problem, little memory. The
    60 s deadline only marks a hang as a failure; the run takes about a second."""
    root = tmp_path.resolve()
    (root / SUITE).write_text(S(metrics=LC + "    unit: " + BOMB + "\n"), encoding="utf-8")
    (root / "d.jsonl").write_text(JSONL_OK, encoding="utf-8")
    assert (root / SUITE).stat().st_size < 1024
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "EVALTASKS_"))}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), HF_HUB_OFFLINE="1", DO_NOT_TRACK="1")
    # The CLI is started by a small launcher process that reports the CLI's own peak RSS (wait4): a child
    # started straight from this test process inherits its high-water mark (Linux keeps the pre-exec memory's
    # peak, and this process holds the model), so its ru_maxrss would measure the test, not the CLI.
    with open(tmp_path / "stderr", "wb") as err_file, open(tmp_path / "usage.json", "wb") as usage_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", MEASURING_LAUNCHER, sys.executable, "-m", "evaltasks.cli", "run", SUITE],
            cwd=root,
            env=env,
            stdout=usage_file,
            stderr=err_file,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail("the bomb suite was still running after 60 s")
    usage = json.loads((tmp_path / "usage.json").read_text(encoding="utf-8"))
    err = (tmp_path / "stderr").read_text(encoding="utf-8")
    assert proc.returncode == 0 and usage["exit_code"] == 2, err
    assert err.count("\n  - ") == 1 and "YAML aliases expand" in err, err
    assert len(err) < 1000, err
    assert usage["maxrss_kib"] < 512 * 1024, f"peak RSS {usage['maxrss_kib']} KiB"  # the CLI alone: ~70 MiB


MEASURING_LAUNCHER = """
import json, os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(json.dumps({"exit_code": os.waitstatus_to_exitcode(status), "maxrss_kib": usage.ru_maxrss}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["suite", "dataset"])
def test_python_tags_execute_nothing(where: str, tmp_path: Path) -> None:
    """``!!python/object/apply:os.system ["touch PWNED"]`` in the suite or a YAML dataset: exit 2, no PWNED."""
    payload = '!!python/object/apply:os.system ["touch PWNED"]'
    root = tmp_path.resolve()
    if where == "suite":
        (root / SUITE).write_text(f"name: {payload}\ndataset:\n  path: d.jsonl\nmetrics:\n{LC}", encoding="utf-8")
        (root / "d.jsonl").write_text(JSONL_OK, encoding="utf-8")
    else:
        (root / SUITE).write_text(S(dataset="d.yaml"), encoding="utf-8")
        (root / "d.yaml").write_text(f"- actual_output: {payload}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "EVALTASKS_"))}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), HF_HUB_OFFLINE="1", DO_NOT_TRACK="1")
    proc = run_cli("run", SUITE, cwd=root, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "is not allowed" in proc.stderr and "python/object/apply:os.system" in proc.stderr
    assert not list(tmp_path.rglob("PWNED")) and not (Path.cwd() / "PWNED").exists()
    assert sorted(p.name for p in root.iterdir()) == sorted([SUITE, "d.jsonl" if where == "suite" else "d.yaml"])
