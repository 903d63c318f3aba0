"""Reading a user's files as data: UTF-8 text located by line, and YAML through the safe loader with checks.

Shared by the suite file, datasets and reference-set files (so a metric that reads a reference set does not
depend on the suite's parser).
"""

from __future__ import annotations

import codecs
from typing import Any

import yaml

from evaltasks.errors import InputError, Problem

_FOREIGN_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def decode_text(raw: bytes, source: str, error: type[InputError]) -> str:
    """The bytes of a suite or dataset file as text: UTF-8, a leading UTF-8 byte-order mark dropped.

    Raises ``error`` with one problem located by line: a UTF-16/UTF-32 byte-order mark ("save it as UTF-8"),
    bytes that are not UTF-8, or a NUL byte (binary data, or UTF-16 without a byte-order mark; the CSV reader
    would otherwise accept it silently).
    """
    for bom, name in _FOREIGN_BOMS:
        if raw.startswith(bom):
            raise error([Problem(source, "line 1", "", f"is {name} text (byte-order mark); save it as UTF-8")])
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error([Problem(source, f"line {line}", "", f"is not UTF-8 text (byte {exc.start})")]) from None
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw[:nul].count(b"\n") + 1
        raise error(
            [
                Problem(
                    source,
                    f"line {line}",
                    "",
                    f"contains a NUL byte (byte {nul}): binary data, or UTF-16 text without a byte-order mark?",
                )
            ]
        )
    return text


_YAML_CORE = "tag:yaml.org,2002:"
# Tags the safe loader constructs (standard YAML types), plus merge keys (``<<``), which it flattens.
_SAFE_TAGS = frozenset(t for t in yaml.SafeLoader.yaml_constructors if t is not None) | {_YAML_CORE + "merge"}
_MAX_YAML_PROBLEMS = 100
# Nodes that aliases (``*name``) may add to a YAML document beyond those written out. Sharing a mapping of
# provider options among a few metrics adds tens, a list of 100 references shared by 1,000 dataset items
# 100,000; a 1 KB "billion laughs" document adds 387 million.
MAX_ALIAS_EXPANSION = 1_000_000


def _short_tag(tag: str) -> str:
    return "!!" + tag[len(_YAML_CORE) :] if tag.startswith(_YAML_CORE) else tag


def load_yaml(text: str, source: str, error: type[InputError]) -> Any:
    """Parse YAML ``text`` as plain data: the safe loader, plus checks that nothing is invented or lost.

    Raises ``error`` with every problem located by ``line N`` and, where there is one, the key (field):

    - invalid YAML (the line of the syntax error), or nesting deeper than Python's recursion limit;
    - a tag without a standard constructor (``!!python/object/apply:…``, ``!!python/name:…``, ``!include``):
      YAML is data, so nothing is constructed, let alone executed;
    - a duplicate key in a mapping (YAML forbids it; PyYAML would silently keep the last one);
    - a scalar its type cannot hold, e.g. ``2024-13-45`` (read as a timestamp) or ``!!int abc``, which PyYAML
      reports as a bare ValueError.

    - aliases that expand the document by more than :data:`MAX_ALIAS_EXPANSION` nodes (a "billion laughs"
      bomb: every consumer of the data, a validation message included, would walk the expanded tree), or an
      alias inside the node it names (a recursive structure).

    The document is composed into nodes first and checked iteratively (aliases are visited once), then
    constructed.
    """
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise error([Problem(source, f"line {loader.line + 1}", "", "YAML nested too deeply")]) from None
        except yaml.YAMLError as exc:
            raise error([_yaml_syntax_problem(source, exc)]) from None
        if node is None:
            return None
        problems = _yaml_alias_problems(node, source) if "&" in text else []  # no anchor, no alias
        if problems:
            raise error(problems)
        problems = _yaml_node_problems(loader, node, source)
        if problems:  # collection stops at _MAX_YAML_PROBLEMS: the count is then a lower bound
            raise error(problems, complete=len(problems) < _MAX_YAML_PROBLEMS)
        try:
            return loader.construct_document(node)
        except RecursionError:
            raise error([Problem(source, "", "", "YAML nested too deeply")]) from None
        except yaml.YAMLError as exc:
            raise error([_yaml_syntax_problem(source, exc)]) from None
        except (ValueError, TypeError, KeyError, OverflowError) as exc:  # a value PyYAML cannot construct
            raise error([Problem(source, "", "", f"invalid YAML value: {exc}")]) from None
    finally:
        loader.dispose()


def _yaml_syntax_problem(source: str, exc: yaml.YAMLError) -> Problem:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}" if mark is not None else ""
    return Problem(source, where, "", f"invalid YAML: {getattr(exc, 'problem', None) or exc}")


def _yaml_alias_problems(root: yaml.Node, source: str) -> list[Problem]:
    """A problem when aliases expand the tree under ``root`` by more than :data:`MAX_ALIAS_EXPANSION` nodes or
    form a cycle, else none. Iterative, each distinct node visited once (sizes are memoised), so a bomb costs
    what its text costs."""
    size: dict[int, int] = {}  # node id -> nodes in its expanded subtree (capped)
    on_path: set[int] = set()
    distinct = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if not children_done:
            if id(node) in size:
                continue
            if id(node) in on_path:
                return [
                    Problem(
                        source,
                        f"line {node.start_mark.line + 1}",
                        "",
                        "a YAML alias refers to a node that contains it (a recursive structure)",
                    )
                ]
            on_path.add(id(node))
            distinct += 1
            stack.append((node, True))
            stack += [(child, False) for child in _yaml_children(node)]
            continue
        on_path.discard(id(node))
        total = 1 + sum(size[id(child)] for child in _yaml_children(node))
        if total - distinct > MAX_ALIAS_EXPANSION:
            return [
                Problem(
                    source,
                    f"line {node.start_mark.line + 1}",
                    "",
                    f"YAML aliases expand this document by more than {MAX_ALIAS_EXPANSION:,} nodes (an alias "
                    "'bomb'?): write the values out, or share less through aliases",
                )
            ]
        size[id(node)] = total
    return []


def _yaml_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _yaml_node_problems(loader: yaml.SafeLoader, root: yaml.Node, source: str) -> list[Problem]:
    """Unsafe tags, duplicate keys and unconstructible scalars under ``root``, in line order (see load_yaml)."""
    problems: list[Problem] = []
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]  # (node, the key it is the value of)
    while stack and len(problems) < _MAX_YAML_PROBLEMS:
        node, key = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        line = f"line {node.start_mark.line + 1}"
        if node.tag not in _SAFE_TAGS:
            problems.append(
                Problem(
                    source,
                    line,
                    key,
                    f"YAML tag '{_short_tag(node.tag)}' is not allowed: only "
                    "standard YAML types are read (the file is data)",
                )
            )
        elif isinstance(node, yaml.ScalarNode):
            if node.tag not in (_YAML_CORE + "str", _YAML_CORE + "merge"):
                try:
                    loader.construct_object(node)
                except (ValueError, TypeError, KeyError, OverflowError, yaml.YAMLError):
                    problems.append(
                        Problem(source, line, key, f"invalid {_short_tag(node.tag)} value '{node.value[:80]}'")
                    )
        elif isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for k, v in node.value:
                name = str(k.value)[:80] if isinstance(k, yaml.ScalarNode) else key
                if isinstance(k, yaml.ScalarNode) and k.tag != _YAML_CORE + "merge":
                    if (k.tag, k.value) in first:
                        problems.append(
                            Problem(
                                source,
                                f"line {k.start_mark.line + 1}",
                                name,
                                f"duplicate key (first at line {first[(k.tag, k.value)]})",
                            )
                        )
                    else:
                        first[(k.tag, k.value)] = k.start_mark.line + 1
                stack += [(v, name), (k, name)]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(item, key) for item in node.value]
    return sorted(problems, key=lambda p: int(p.location.split()[1]))
