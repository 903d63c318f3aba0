"""Conversation rows of a dataset: a ``turns`` list per row, each turn's keys mapped like a case's fields
(docs/conversations.md#conversation-datasets).

A row of a JSONL, JSON or YAML conversation dataset holds ``turns`` (a list of objects, at least one), and
optionally ``chatbot_role`` (a string), ``id`` and ``name``. Each turn is read exactly as a single-turn row is
(the suite's ``dataset.fields`` mapping, list fields, type checks), and a bad turn is a problem of its row named
by the turn and the field: ``line 3: field 'turns[2].actual_output' must be a string, got number``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from evaltasks.errors import Problem
from evaltasks.errors import json_type_name as _type_name

# The loader's own pieces, passed in by evaltasks.inputs.datasets (which imports this module): ``load`` is its
# ``_Load`` (a dataclass: explicit, source, problems, keys_seen, output_key); a turn is read by its row reader.
_Load = Any
RowReader = Callable[[Any, str, dict[str, Any]], tuple[dict[str, Any], bool]]
"""``(load, where, row) -> (case fields, valid)``: how the loader reads a single-turn row (each turn is one)."""

TURNS = "turns"
"""The row key holding the turns when ``dataset.fields.turns`` does not name another."""
CHATBOT_ROLE = "chatbot_role"
"""The row key holding the role when ``dataset.fields.chatbot_role`` does not name another."""
_SURROGATE = re.compile("[\ud800-\udfff]")
CSV_REFUSED = (
    "a conversation dataset must be JSONL, JSON or YAML: a CSV cell cannot hold a list of turns "
    "(docs/conversations.md#conversation-datasets)"
)


def turns_key(load: _Load) -> str:
    """The row key of the turns (``dataset.fields.turns``, default ``turns``)."""
    return load.explicit.get(TURNS) or TURNS


def is_conversation_row(load: _Load, row: dict[str, Any]) -> bool:
    """Whether ``row`` is a conversation: the suite maps ``dataset.fields.turns``, or the row has a ``turns`` key."""
    return TURNS in load.explicit or TURNS in row


def conversation_fields(
    load: _Load, where: str, row: dict[str, Any], read_turn: RowReader
) -> tuple[dict[str, Any], bool]:
    """The :class:`~evaltasks.test_case.ConversationalEvalTestCase` fields of one row (``turns`` as a list of
    field dicts, ``chatbot_role``, ``id``; ``name`` when the row has no id) and whether they are all valid; each
    bad one adds its problem to ``load.problems``, located at ``where`` and named ``turns[i].<field>``. Each turn
    is read by ``read_turn`` (the loader's single-turn row reader: the same mapping, list fields and checks)."""
    source, key = load.source, turns_key(load)
    fields: dict[str, Any] = {}
    ok = True
    turns = row.get(key)
    if turns is None:
        load.problems.append(Problem(source, where, key, "is missing or null: a conversation row needs its turns"))
        ok = False
    elif not isinstance(turns, list) or not turns:
        got = "an empty list" if isinstance(turns, list) else _type_name(turns)
        load.problems.append(Problem(source, where, key, f"must be a non-empty list of turns (objects), got {got}"))
        ok = False
    else:
        fields["turns"] = []
        # each turn read as a single-turn row is: the suite's field mapping, list fields and type checks
        turn_load = replace(load, problems=[], generated=False, keys_seen={load.output_key}, unseen_output=[])
        for i, turn in enumerate(turns):
            if not isinstance(turn, dict):
                load.problems.append(
                    Problem(source, where, f"{key}[{i}]", f"must be an object, got {_type_name(turn)}")
                )
                ok = False
                continue
            load.keys_seen.update(turn)  # a mapped key found in a turn is not a typo
            turn_fields, turn_ok = read_turn(turn_load, where, turn)
            turn_fields.pop("id", None)
            turn_ok = _surrogate_free(turn_load, where, turn_fields) and turn_ok
            load.problems.extend(
                replace(problem, field=f"{key}[{i}].{problem.field}") for problem in turn_load.problems
            )
            turn_load.problems.clear()
            ok = ok and turn_ok
            fields["turns"].append(turn_fields)
    role_key = load.explicit.get(CHATBOT_ROLE) or CHATBOT_ROLE
    role = row.get(role_key)
    if role is not None and not isinstance(role, str):
        load.problems.append(Problem(source, where, role_key, f"must be a string, got {_type_name(role)}"))
        ok = False
    elif role is not None:
        fields["chatbot_role"] = role
    ok = _row_id(load, where, row, fields) and ok
    return fields, ok


def _row_id(load: _Load, where: str, row: dict[str, Any], fields: dict[str, Any]) -> bool:
    """Put the row's id (the ``id`` mapping or key, else its ``name``) in ``fields``; False (and a problem)
    when it is not a string or an integer."""
    for key in (load.explicit.get("id") or "id", "name"):
        value = row.get(key)
        if value is None or value == "":
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            load.problems.append(
                Problem(load.source, where, key, f"must be a string or integer, got {_type_name(value)}")
            )
            return False
        fields["id"] = str(value)
        return True
    return True


def _surrogate_free(load: _Load, where: str, fields: dict[str, Any]) -> bool:
    """Whether no text of a turn's ``fields`` holds an unpaired surrogate (JSON's ``"\\ud800"``); each that does
    adds its problem to ``load.problems`` (relabelled to its turn by the caller)."""
    free = True
    for name, value in fields.items():
        texts = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        if any(_SURROGATE.search(text) for text in texts if isinstance(text, str)):
            load.problems.append(
                Problem(
                    load.source,
                    where,
                    load.explicit.get(name) or name,
                    "contains an unpaired surrogate (e.g. \\ud800): not valid Unicode text",
                )
            )
            free = False
    return free
