"""Dataset loaders: CSV, JSONL, JSON and YAML rows → test cases, each with its row's location.

Locations: CSV and JSONL rows are named by their 1-based physical line (``line 5``; a CSV record spanning
several lines is named by its first), JSON and YAML items by their 0-based index in the top-level list
(``item 3``). Every bad row is collected (the first 20 are shown) before anything is scored.

List fields (``references``, ``context``, ``retrieval_context``, ``tools_called``, ``expected_tools``,
``planning_steps``, ``multi_outputs``): a JSON/YAML list of strings; or a string split on ``list_separator`` (items stripped,
empties dropped); or, in a CSV without ``list_separator``, a cell holding a JSON array.

Record fields (``execution_trace``: a list of trace steps; ``tool_calls``, ``expected_tool_calls``: lists of
``{name, arguments}``; docs/agents.md#execution-traces): a JSON/YAML list of objects, or a string holding one (a
CSV cell); a bad item is named with its index and key (``execution_trace[2].duration_ms``).

What is rejected (exit 2 in the CLI), beyond wrong types: text that is not UTF-8 (a UTF-16 byte-order mark,
a NUL byte), a string holding an unpaired surrogate (``"\\ud800"`` in JSON: not Unicode, it could not be
written to results.json), malformed CSV quoting (strict parsing: an unclosed quote would otherwise swallow
every following row into one cell), YAML tags, duplicate YAML keys, and an explicit ``id`` repeated by two
rows (results are matched by id against a baseline). Repeated *derived* ids (same input) get ``#2``….
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaltasks.errors import DatasetError, Problem
from evaltasks.errors import json_type_name as _type_name
from evaltasks.inputs._conversations import CSV_REFUSED, TURNS, conversation_fields, is_conversation_row
from evaltasks.inputs.files import decode_text, load_yaml
from evaltasks.inputs.suite import DatasetSpec
from evaltasks.test_case import ConversationalEvalTestCase, EvalTestCase, assign_ids
from evaltasks.traces import as_records

_MISSING = object()
STRING_FIELDS = ("input", "expected_output")
# Test-case fields holding a list of strings, each parsed as ``references`` always was (module docstring).
LIST_FIELDS = (
    "references",
    "context",
    "retrieval_context",
    "tools_called",
    "expected_tools",
    "planning_steps",
    "multi_outputs",
)
# Test-case fields holding a list of records (module docstring), each read by ``_as_records``.
RECORD_FIELDS = ("execution_trace", "tool_calls", "expected_tool_calls")
MAX_PROBLEMS = 1000  # collected; the error shows the first 20
_SURROGATE_ESCAPE = re.compile(r"\\[uU]0*[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class LoadedDataset:
    """Test cases read from a dataset file.

    Attributes:
        path: the resolved dataset path.
        sha256: sha256 of the file's bytes.
        cases: the test cases, in file order.
        ids: one id per case (``id`` column, else hash of the input; ``#2``… for repeats).
        locations: one location per case (``line N`` or ``item N``).
        columns: the extra columns asked of :func:`load_dataset` (``dataset.cluster``, ``--labels``), each as
            one value per case in case order: the cell as a string (integers and booleans as JSON writes
            them: ``3``, ``true``), None where the row has no such key or an empty/null cell.
    """

    path: Path
    sha256: str
    cases: list[EvalTestCase] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    locations: list[str] = field(default_factory=list)
    columns: dict[str, list[str | None]] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    """What the run should tell its user about the file (``generated``: an ``actual_output`` column ignored)."""


def _read_text(path: Path, source: str, written: str = "") -> tuple[bytes, str]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        as_written = f" (dataset.path '{written}' in the suite)" if written else ""
        raise DatasetError([Problem(source, "", "", f"dataset file not found{as_written}")]) from None
    except IsADirectoryError:
        raise DatasetError([Problem(source, "", "", "is a directory, not a dataset file")]) from None
    except OSError as exc:
        raise DatasetError([Problem(source, "", "", f"cannot read the dataset: {exc.strerror or exc}")]) from None
    return raw, decode_text(raw, source, DatasetError)


def _rows_csv(
    text: str, source: str, problems: list[Problem], header_out: list[str] | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    csv.field_size_limit(2**31 - 1)  # the module's default of 131,072 characters is too small for long outputs
    if "\r" in text and "\n" not in text:
        text = text.replace("\r", "\n")  # old Mac line endings
    # Split on "\n" only: str.splitlines() also breaks at U+2028, U+0085, form feeds…, which may sit inside
    # a cell (model outputs) and would tear the row apart and shift the line numbers.
    # strict: malformed quoting is an error, not guessed (an unclosed quote would swallow every later row).
    reader = csv.reader(io.StringIO(text, newline="\n"), strict=True)
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as exc:
        problems.append(Problem(source, "line 1", "", f"invalid CSV header: {exc}"))
        return
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        problems.append(Problem(source, "line 1", duplicates[0], "appears more than once in the header"))
        return
    if header_out is not None:
        header_out.extend(header)
    start = reader.line_num + 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            problems.append(Problem(source, f"line {start}", "", f"invalid CSV: {exc}"))
            return
        where = f"line {start}"
        start = reader.line_num + 1
        if not row or (len(row) == 1 and not row[0].strip()):
            continue  # blank line
        if len(row) < len(header):  # name the first column the row lacks
            problems.append(
                Problem(
                    source,
                    where,
                    header[len(row)],
                    f"is missing: the row has {len(row)} cells but the header has {len(header)}",
                )
            )
            continue
        if len(row) > len(header):
            problems.append(Problem(source, where, "", f"has {len(row)} cells but the header has {len(header)}"))
            continue
        yield where, dict(zip(header, row))


def _lines(text: str) -> Iterator[str]:
    """The ``\n``-separated lines of ``text``, one at a time (like ``text.split("\n")`` without the list)."""
    start = 0
    while True:
        end = text.find("\n", start)
        if end < 0:
            yield text[start:]
            return
        yield text[start:end]
        start = end + 1


def _rows_jsonl(text: str, source: str, problems: list[Problem]) -> Iterator[tuple[str, dict[str, Any]]]:
    # Split on "\n" only (not str.splitlines()): JSON strings may hold a raw U+2028, U+0085, form feed…
    # Lines are cut one at a time, never as a list: a 10^6-row file would hold every line twice otherwise.
    for number, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(Problem(source, f"line {number}", "", f"invalid JSON: {exc.msg} (column {exc.colno})"))
            continue
        except RecursionError:
            problems.append(Problem(source, f"line {number}", "", "JSON nested too deeply"))
            continue
        if not isinstance(row, dict):
            problems.append(Problem(source, f"line {number}", "", f"must be a JSON object, got {_type_name(row)}"))
            continue
        yield f"line {number}", row


def _rows_list(data: Any, source: str, problems: list[Problem], kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(data, dict) and "test_cases" in data:
        data = data["test_cases"]
        if not isinstance(data, list):
            problems.append(Problem(source, "", "test_cases", f"must be a list of objects, got {_type_name(data)}"))
            return
    if not isinstance(data, list):
        problems.append(Problem(source, "", "", f"must be a {kind} list of objects (or a mapping with 'test_cases')"))
        return
    for i, row in enumerate(data):
        if not isinstance(row, dict):
            problems.append(Problem(source, f"item {i}", "", f"must be an object, got {_type_name(row)}"))
            continue
        yield f"item {i}", row


def _parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError([Problem(source, f"line {exc.lineno}", "", f"invalid JSON: {exc.msg}")]) from None
    except RecursionError:
        raise DatasetError([Problem(source, "", "", "JSON nested too deeply")]) from None


def _parse_yaml(text: str, source: str) -> Any:
    return load_yaml(text, source, DatasetError)  # safe loader; tags, duplicate keys… located by line and key


def _as_list(value: Any, separator: str | None, is_csv: bool) -> list[str] | str:
    """A list of strings, or an error message."""
    if isinstance(value, list):
        if not all(isinstance(item, str) for item in value):
            return "must be a list of strings"
        return [item.strip() for item in value if item.strip()] if separator else list(value)
    if isinstance(value, str):
        if separator is not None:
            return [item.strip() for item in value.split(separator) if item.strip()]
        if is_csv:
            if not value.strip():
                return "is empty: a CSV list cell must hold a JSON array of strings (or set dataset.list_separator)"
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError:
                return "must hold a JSON array of strings (or set dataset.list_separator)"
            if isinstance(parsed, list) and all(isinstance(item, str) for item in parsed):
                return parsed
            return "must hold a JSON array of strings (or set dataset.list_separator)"
        return "must be a list of strings (or set dataset.list_separator to split a string)"
    return f"must be a list of strings, got {_type_name(value)}"


def _asked_columns(spec: DatasetSpec, wanted: list[str]) -> dict[str, str]:
    """The extra columns a load asks for, keyed by who asks: ``dataset.cluster`` or ``an extra column``."""
    return {("dataset.cluster" if column == spec.cluster else f"an extra column {column}"): column for column in wanted}


def _missing_columns(explicit: dict[str, str], header: list[str], source: str, problems: list[Problem]) -> bool:
    """Add one problem per field mapped to a column the CSV ``header`` lacks (each listing the header's
    columns, and naming the suite key that asked for it when that is not a field, e.g. ``dataset.cluster``);
    True when there was one."""
    found = False
    for name, column in explicit.items():
        if column not in header:
            asked = f" ({name})" if name == "dataset.cluster" else ""
            problems.append(
                Problem(
                    source, "line 1", column, f"column not found in the header{asked} (columns: {', '.join(header)})"
                )
            )
            found = True
    return found


# check(cases, locations) -> problems of those cases: what load_dataset's ``check`` is (e.g. validate_cases)
CaseCheck = Callable[[Sequence[EvalTestCase], Sequence[str]], list[Problem]]


def _row_number(problem: Problem) -> float:
    """The row a problem is at (``line N``, ``item N``), for ordering; a problem of the whole file sorts last."""
    number = problem.location.rpartition(" ")[2]
    return int(number) if number.isdigit() else float("inf")


def load_dataset(
    spec: DatasetSpec,
    base_dir: Path,
    check: CaseCheck | None = None,
    extra_columns: Sequence[str] = (),
    *,
    generated: bool = False,
) -> LoadedDataset:
    """Load and validate the dataset ``spec`` describes (its path relative to ``base_dir``).

    ``extra_columns``: more columns to read as plain values (:attr:`LoadedDataset.columns`), besides
    ``spec.cluster`` (always read when set). A column that no row has is a problem (named with the file and the
    field, e.g. ``dataset.cluster``); a cell that is a list or an object is a problem of its row.

    ``generated``: a target generates the outputs (docs/targets.md#targets): no ``actual_output`` column is
    needed, each case's ``actual_output`` is ``""``, an ``actual_output`` column present is ignored (one notice in
    :attr:`LoadedDataset.notices`), and each case's ``vars`` holds its row's columns (every key of the row, the
    mapped ones included; CSV cells as strings). A conversation's ``vars`` always hold its row's columns (what a
    conversation metric reads per conversation, e.g. ContextDecayMetric's ``context_facts``).

    ``check(cases, locations)`` (e.g. each case against the suite's metrics: ``validate_cases``) runs on the
    rows that loaded fine, also when other rows are bad: its problems and the loader's are raised together in
    one DatasetError, ordered by row, so every problem is reported at once (docs/python-api.md#python-api).

    Raises:
        DatasetError: the file is missing, unresolvable (symlink loop), unreadable, not UTF-8, unparsable,
            empty, lacks a mapped column, or has rows with a missing/null/non-string output, a non-string text
            field, a string with an unpaired surrogate, a list field that is not a list, or an explicit id that
            an earlier row already used, or ``check`` found problems — every bad row named by file, line or
            item, and field.
    """
    source = os.path.normpath(base_dir / spec.path)  # "a/b/../../c" -> "c", symlinks not followed: a path to read
    try:
        path = (base_dir / spec.path).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before Python 3.13, OSError after)
        raise DatasetError([Problem(source, "", "", f"cannot resolve the dataset path: {exc}")]) from None
    raw, text = _read_text(path, source, spec.path)
    sha256 = hashlib.sha256(raw).hexdigest()
    del raw  # the decoded text is all the rest needs: do not hold the file twice
    suffix = (
        Path(spec.path).suffix.lower()
    )  # the name the suite gives, not a symlink target's (docs/suite.md#suite-file: format from the extension)
    problems: list[Problem] = []
    header: list[str] = []
    rows = _rows(suffix, text, source, problems, header)

    explicit = {k: v for k, v in spec.fields.model_dump().items() if v is not None}
    if generated:
        explicit.pop("actual_output", None)
    wanted = list(dict.fromkeys([*([spec.cluster] if spec.cluster else []), *extra_columns]))
    load = _Load(
        spec=spec,
        source=source,
        suffix=suffix,
        explicit=explicit,
        wanted=wanted,
        output_key=spec.fields.actual_output,
        generated=generated,
        # Only an escape (JSON "\ud800", YAML "\ud800") can produce an unpaired surrogate: skip the per-field
        # check for the files (nearly all) that hold no such escape.
        check_surrogates=suffix != ".csv" and _SURROGATE_ESCAPE.search(text) is not None,
        dataset=LoadedDataset(path=path, sha256=sha256),
        problems=problems,
    )
    dataset = load.dataset
    dataset.columns = {column: [] for column in wanted}
    _read_rows(load, rows)
    _whole_file_problems(load, header)
    problems = load.problems
    if check is not None:
        checked = check(dataset.cases, dataset.locations)
        if checked:
            problems = sorted([*problems, *checked], key=_row_number)  # stable: a row keeps its problems' order
    if problems:
        raise DatasetError(problems, complete=load.read_all)
    if not dataset.cases:
        raise DatasetError([Problem(source, "", "", "the dataset has no rows")])
    dataset.ids = assign_ids(dataset.cases, load.explicit_ids)
    return dataset


def _rows(
    suffix: str, text: str, source: str, problems: list[Problem], header: list[str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (location, row) pairs of a dataset file's ``text``, parsed by its ``suffix`` (``header``: filled with a
    CSV file's columns; ``problems``: where rows that cannot be read are reported)."""
    if suffix == ".csv":
        return _rows_csv(text, source, problems, header)
    if suffix == ".jsonl":
        return _rows_jsonl(text, source, problems)
    if suffix == ".json":
        return _rows_list(_parse_json(text, source), source, problems, "JSON")
    return _rows_list(_parse_yaml(text, source), source, problems, "YAML")


@dataclass
class _Load:
    """One :func:`load_dataset` pass over a file's rows: what it was asked, what it found, and what the checks
    across rows need (``explicit``: the fields the suite maps; ``wanted``: the extra columns)."""

    spec: DatasetSpec
    source: str
    suffix: str
    explicit: dict[str, str]
    wanted: list[str]
    output_key: str
    generated: bool
    check_surrogates: bool
    dataset: LoadedDataset
    problems: list[Problem]
    explicit_ids: list[str | None] = field(default_factory=list)
    column_checked: bool = False
    keys_seen: set[str] = field(
        default_factory=set
    )  # JSON, JSONL, YAML: a mapped key that no row has is a typo, not a blank
    first_seen: dict[str, str] = field(default_factory=dict)  # explicit id -> location of its first row
    # JSON, JSONL, YAML: rows lacking the output key while no row has had it yet. If no row has it at all,
    # the mapping is wrong: one problem for the mapping (listing the keys), not one per row.
    unseen_output: list[Problem] = field(default_factory=list)
    unseen_dropped: bool = False  # more such rows than MAX_PROBLEMS
    read_all: bool = True  # False when reading stopped at MAX_PROBLEMS: the count is then a lower bound

    @property
    def csv(self) -> bool:
        """Whether the file is a CSV file (a header, every cell a string)."""
        return self.suffix == ".csv"


def _read_rows(load: _Load, rows: Iterator[tuple[str, dict[str, Any]]]) -> None:
    """Read every row into ``load.dataset`` (a good row) or ``load.problems``; stop at :data:`MAX_PROBLEMS`."""
    for where, row in rows:
        if not load.csv:
            load.keys_seen.update(row)
            if load.unseen_output and load.output_key in load.keys_seen:  # the key exists: those earlier rows lack it
                load.problems.extend(load.unseen_output)
                load.unseen_output = []
                load.read_all = not load.unseen_dropped
        if load.csv and not load.column_checked:
            load.column_checked = True
            if TURNS in row:  # a conversation needs a list of turns per row: JSONL, JSON or YAML
                load.problems.append(Problem(load.source, "line 1", TURNS, CSV_REFUSED))
                break
            if _missing_columns(
                {**load.explicit, **_asked_columns(load.spec, load.wanted)}, list(row), load.source, load.problems
            ):
                break
        if not load.csv and is_conversation_row(load, row):  # docs/conversations.md#conversation-datasets
            case_fields, row_ok = conversation_fields(load, where, row, _case_fields)
        else:
            case_fields, row_ok = _case_fields(load, where, row)
            # JSON/YAML escapes can encode unpaired surrogates; decoded text cannot hold them
            if load.check_surrogates and not _surrogate_free(load, where, case_fields):
                row_ok = False
        if load.generated or "turns" in case_fields:  # a target's variables; a conversation's own columns
            case_fields["vars"] = {str(key): value for key, value in row.items()}
        extra_values: list[str | None] = []
        for column in load.wanted:
            value = row.get(column)
            if isinstance(value, (list, dict)):
                load.problems.append(
                    Problem(load.source, where, column, f"must be a single value, got {_type_name(value)}")
                )
                row_ok = False
            elif value is None or value == "":
                extra_values.append(None)
            else:
                extra_values.append(value if isinstance(value, str) else json.dumps(value))
        if len(load.problems) >= MAX_PROBLEMS:
            load.read_all = False  # rows after this one are not read
            break
        if row_ok:
            _add_case(load, where, case_fields, extra_values)


def _case_fields(load: _Load, where: str, row: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The test-case fields of one row and whether they are all valid (each bad one adds its problem)."""
    source, problems = load.source, load.problems
    case_fields: dict[str, Any] = {}
    row_ok = True
    for name in ("actual_output", "input", "expected_output", *LIST_FIELDS, *RECORD_FIELDS, "agent_confidence", "id"):
        column = load.explicit.get(name) or (name if name in row else None)
        value = row.get(column, _MISSING) if column else _MISSING
        if name == "actual_output" and load.generated:
            case_fields[name] = ""
            if load.output_key in row and not load.dataset.notices:
                load.dataset.notices.append(
                    f"{source}: the column '{load.output_key}' is ignored: the suite's target generates the outputs "
                    "(--no-target grades the dataset's own)"
                )
        elif name == "actual_output":
            if value is _MISSING or value is None:
                _missing_output(
                    load, Problem(source, where, column or name, "is missing or null (actual_output is required)")
                )
                row_ok = False
            elif not isinstance(value, str):
                problems.append(Problem(source, where, column or name, f"must be a string, got {_type_name(value)}"))
                row_ok = False
            else:
                case_fields[name] = value
        elif value is _MISSING or value is None:
            continue
        elif name in LIST_FIELDS:
            items = _as_list(value, load.spec.list_separator, load.csv)
            if isinstance(items, str):
                problems.append(Problem(source, where, column or name, items))
                row_ok = False
            else:
                case_fields[name] = items
        elif name in RECORD_FIELDS:
            records = as_records(name, value)
            if isinstance(records, Problem):
                problems.append(Problem(source, where, (column or name) + records.field, records.message))
                row_ok = False
            else:
                case_fields[name] = records
        elif name == "agent_confidence":
            confidence = _confidence(value)
            if confidence is None:
                problems.append(Problem(source, where, column or name, f"must be a number in [0, 1], got {value!r}"))
                row_ok = False
            else:
                case_fields[name] = confidence
        elif name == "id":
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                problems.append(
                    Problem(source, where, column or name, f"must be a string or integer, got {_type_name(value)}")
                )
                row_ok = False
            else:
                case_fields[name] = str(value)
        elif not isinstance(value, str):
            problems.append(Problem(source, where, column or name, f"must be a string, got {_type_name(value)}"))
            row_ok = False
        else:
            case_fields[name] = value
    return case_fields, row_ok


def _confidence(value: Any) -> float | None:
    """A confidence cell as a number in [0, 1] (a CSV cell's text parsed), or None when it is not one."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        return None
    return float(value)


def _missing_output(load: _Load, problem: Problem) -> None:
    """Report a row without its output: at once in a CSV file or once a row has had the output key, else held
    back (see :attr:`_Load.unseen_output`; beyond :data:`MAX_PROBLEMS` only counted as dropped)."""
    if load.csv or load.output_key in load.keys_seen:
        load.problems.append(problem)
    elif len(load.unseen_output) < MAX_PROBLEMS:
        load.unseen_output.append(problem)
    else:
        load.unseen_dropped = True


def _surrogate_free(load: _Load, where: str, case_fields: dict[str, Any]) -> bool:
    """Whether no text field of the row holds an unpaired surrogate (each one that does adds its problem)."""
    free = True
    for name, value in case_fields.items():
        if not isinstance(value, (str, list)):  # a number (agent_confidence) holds no text
            continue
        column = load.explicit.get(name) or name
        if name in RECORD_FIELDS:
            continue  # records are not written back as text
        if any(
            _SURROGATE.search(item) for item in ([value] if isinstance(value, str) else value) if not item.isascii()
        ):
            load.problems.append(
                Problem(
                    load.source, where, column, "contains an unpaired surrogate (e.g. \\ud800): not valid Unicode text"
                )
            )
            free = False
    return free


def _add_case(load: _Load, where: str, case_fields: dict[str, Any], extra_values: list[str | None]) -> None:
    """Add a valid row's case, its extra columns, id and location to ``load.dataset``; an explicit id that an
    earlier row already used is a problem instead."""
    dataset = load.dataset
    row_id = case_fields.pop("id", None)
    if row_id:  # an empty id cell falls back to the derived id
        if row_id in load.first_seen:
            load.problems.append(
                Problem(
                    load.source,
                    where,
                    load.explicit.get("id") or "id",
                    f"duplicate id '{row_id}' (first at {load.first_seen[row_id]})",
                )
            )
            return
        load.first_seen[row_id] = where
    dataset.cases.append(
        ConversationalEvalTestCase(**case_fields) if "turns" in case_fields else EvalTestCase(**case_fields)
    )
    for column, value in zip(load.wanted, extra_values):
        dataset.columns[column].append(value)
    load.explicit_ids.append(row_id)
    dataset.locations.append(where)


def _whole_file_problems(load: _Load, header: list[str]) -> None:
    """After the rows: each mapped key or extra column that no row has (JSON, JSONL, YAML, when every row was
    read), else the held-back rows without their output; a header-only CSV file's unknown columns."""
    if not load.csv and load.keys_seen and load.read_all:  # every row was read
        keys_seen = load.keys_seen
        keys = ", ".join(sorted(map(str, keys_seen))[:20]) + (", …" if len(keys_seen) > 20 else "")
        asked = [
            *((f"dataset.fields.{name}", column) for name, column in load.explicit.items()),
            *(
                ("dataset.cluster" if column == load.spec.cluster else "an extra column", column)
                for column in load.wanted
            ),
        ]
        for what, column in asked:
            if column not in keys_seen:
                load.problems.append(
                    Problem(load.source, "", column, f"key not found in any row ({what}; keys: {keys})")
                )
    elif load.unseen_output:  # reading stopped early: the key may exist further on, so name the rows
        load.problems.extend(load.unseen_output)
        load.read_all = False
    if load.csv and header and not load.column_checked:  # header only: still report unknown columns
        _missing_columns(
            {**load.explicit, **_asked_columns(load.spec, load.wanted)}, header, load.source, load.problems
        )
