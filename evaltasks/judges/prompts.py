"""Prompt templates of the judge metrics: readable text files a user can override per metric.

A template file has two parts, each introduced by a line of its own: ``### system`` (the instructions) and
``### user`` (the test case's data). Both are Jinja2 templates (``{{ input }}``, ``{% for c in
retrieval_context %}``) run in Jinja's sandbox; undefined variables are errors, nothing is HTML-escaped, and
``include`` / ``extends`` / ``import`` / ``from`` are refused (one self-contained file). A user's override may use
only the variables the built-in template of the same prompt uses (checked when the metric is made). The
built-in templates live in ``evaltasks/judges/prompts/<MetricClass>/<prompt>.md``; a metric's ``prompts:``
argument maps a prompt's name to a file of the user's (a path relative to the suite file) that replaces it.

Trust: the system part may use only the metric's own configuration (criteria, evaluation steps, which a suite's
author wrote); the test case's text (input, output, contexts: untrusted) may appear only in the user part.
:func:`render` enforces it: a system part that uses a case variable is an error.

Data blocks (docs/metrics/judge.md#prompts): the user part delimits case text with tags (``<output>`` ...
``</output>``), and case text cannot forge them. Every value a ``{{ ... }}`` of the user part prints is
neutralised: a ``<`` that starts an opening or closing tag whose name the user part's own literal text uses as a
tag (any case, spaces allowed: ``</ Output >``) is written ``&lt;``, and so is every ``<`` of a run of three or
more (the ``<<<END name>>>`` markers some templates use). So ``</output>`` inside an output reaches the judge as
``&lt;/output>``: text of the block, never its end. The rule needs no per-request state: the same case renders
the same request (the answer store's key), and a text without such tags renders unchanged. Delimiters that are
not tags (Markdown headings, ``---``) are not protected: a user's template should delimit case text with tags.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
"""Where the built-in templates live: ``PROMPTS_DIR/<MetricClass>/<prompt>.md``."""

CASE_VARIABLES = frozenset(
    {
        "input",
        "actual_output",
        "expected_output",
        "context",
        "retrieval_context",
        "references",
        "tools_called",
        "expected_tools",
        "statements",
        "claims",
        "truths",
        "opinions",
        "chunk",
        "case",
        "policy_rules",  # PolicyComplianceMetric: each case's expected_output unless the suite gives them
        "user_turns",
        "assistant_turns",
        "chatbot_role",
        "user_goal",
        "task_description",
        "success_criteria",
    }
)
"""Variables holding test-case text (or text derived from it by an earlier judge answer): user part only. A
conversation's turns, role, goal and success criteria count as case text wherever they come from."""

_SYSTEM, _USER = "### system", "### user"
_TAG_NAME = re.compile(r"<\s*/?\s*([A-Za-z][\w.:-]*)")
_FENCE_RUN = re.compile(r"<{3,}")


class PromptError(ValueError):
    """A prompt template file is missing, unreadable, not in the two-part format, or not a valid template."""


@dataclass(frozen=True)
class PromptTemplate:
    """One prompt: a system part and a user part, Jinja2 source text.

    Attributes:
        name: the prompt's name (e.g. ``"verdicts"``).
        system: the system part's template source.
        user: the user part's template source.
        source: where it was read from (a file path, for messages).
    """

    name: str
    system: str
    user: str
    source: str

    def render(self, variables: Mapping[str, Any]) -> list[dict[str, str]]:
        """The two chat messages ``[{"role": "system", ...}, {"role": "user", ...}]`` for ``variables``.

        Raises:
            PromptError: a variable is undefined, the template fails, or the system part uses a case variable.
        """
        return render(self, variables)


def parse_template(name: str, text: str, source: str) -> PromptTemplate:
    """Split a template file's ``text`` into its two parts.

    Raises:
        PromptError: a part is missing, repeated, or out of order, or there is text before ``### system``.
    """
    template, _, _ = parse_parts(name, text, source)
    problem = sorted(_variables(template.system, source) & CASE_VARIABLES)
    if problem:
        raise PromptError(
            f"prompt '{name}' ({source}): the system part uses test-case text ({', '.join(problem)}); "
            "case text belongs in the user part"
        )
    return template


def parse_parts(name: str, text: str, source: str) -> tuple[PromptTemplate, int, int]:
    """The two parts of a template file's ``text``, each a valid self-contained Jinja2 template, and the file's
    0-based line index of each part's first line (Jinja counts lines within a part). The judges' trust rule
    (:func:`parse_template`: no case text in the system part) is not applied: a chat target's prompt is the
    user's own (docs/targets.md#chat-targets).

    Raises:
        PromptError: a part is missing, repeated, or out of order, text before ``### system``, a syntax error or
            a loading tag (with the file's line).
    """
    lines = text.splitlines()
    marks = [i for i, line in enumerate(lines) if line.strip() in (_SYSTEM, _USER)]
    heads = [lines[i].strip() for i in marks]
    if heads != [_SYSTEM, _USER]:
        raise PromptError(
            f"prompt '{name}' ({source}) must have a '{_SYSTEM}' line, then a '{_USER}' line, each "
            f"once; found {heads or 'neither'}"
        )
    if any(line.strip() for line in lines[: marks[0]]):
        raise PromptError(f"prompt '{name}' ({source}): text before '{_SYSTEM}'")
    system, system_line = _part(lines, marks[0] + 1, marks[1])
    user, user_line = _part(lines, marks[1] + 1, len(lines))
    template = PromptTemplate(name=name, system=system, user=user, source=source)
    for part, first in ((system, system_line), (user, user_line)):
        _compile(part, source, first)
        _refuse_loading(part, name, source, first)
    return template, system_line, user_line


def sandbox() -> Any:
    """The Jinja2 environment prompt templates run in: the sandbox, undefined variables as errors, no HTML
    escaping, no loader (shared by the judge prompts and the chat targets' prompts)."""
    return _environment()


def _part(lines: list[str], start: int, end: int) -> tuple[str, int]:
    """The part of ``lines[start:end]`` without its leading and trailing empty lines, and the file's 0-based
    line index its first line has (added to Jinja's line numbers, which count within the part)."""
    raw = "\n".join(lines[start:end])
    return raw.strip("\n"), start + len(raw) - len(raw.lstrip("\n"))


def _refuse_loading(part: str, name: str, source: str, first: int) -> None:
    """Raise PromptError when ``part`` uses ``include``, ``extends``, ``import`` or ``from`` (a prompt template
    is one self-contained file: there is no loader)."""
    import jinja2.nodes

    tree = _environment().parse(part)
    for node in tree.find_all(
        (jinja2.nodes.Include, jinja2.nodes.Extends, jinja2.nodes.Import, jinja2.nodes.FromImport)
    ):
        tag = {"Include": "include", "Extends": "extends", "Import": "import", "FromImport": "from"}[
            type(node).__name__
        ]
        raise PromptError(
            f"prompt '{name}' ({source}): line {node.lineno + first}: the '{tag}' tag is not allowed; "
            "a prompt template is one self-contained file"
        )


def check_variables(template: PromptTemplate, allowed: set[str] | frozenset[str], metric: str) -> None:
    """Raise PromptError when ``template`` (a user's override) uses a variable outside ``allowed`` (the ones the
    metric passes to that prompt: those its built-in template uses) or Jinja's globals (``range``, ``dict``,
    ``loop``...), naming the unknown ones and the available ones."""
    used = variables(template)
    unknown = sorted(used - set(allowed) - set(_environment().globals))
    if unknown:
        raise PromptError(
            f"prompt '{template.name}' ({template.source}): undefined variable(s) {', '.join(unknown)}; "
            f"{metric}'s '{template.name}' prompt has: {', '.join(sorted(allowed)) or 'none'}"
        )


def variables(template: PromptTemplate) -> set[str]:
    """The variables ``template``'s two parts use (undeclared names, Jinja's globals included)."""
    return _variables(template.system, template.source) | _variables(template.user, template.source)


def load_template(path: str | Path, name: str | None = None) -> PromptTemplate:
    """Read a template file (UTF-8).

    Raises:
        PromptError: the file cannot be read or is not a valid template (see :func:`parse_template`).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"cannot read prompt file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_template(name or path.stem, text, str(path))


@functools.cache
def builtin_template(metric: str, name: str) -> PromptTemplate:
    """The built-in template ``name`` of the metric class ``metric``. Raises PromptError if there is none."""
    return load_template(PROMPTS_DIR / metric / f"{name}.md", name)


@functools.lru_cache(maxsize=64)
def _environment(tags: frozenset[str] | None = None) -> Any:
    """Jinja's sandbox (a template cannot reach Python internals such as ``cycler.__init__.__globals__``), with
    undefined variables as errors, no HTML escaping and no loader; with ``tags`` (a user part's
    :func:`data_tags`), every printed value is neutralised against them."""
    import jinja2
    import jinja2.sandbox

    extra = {} if tags is None else {"finalize": _finalizer(tags)}
    return jinja2.sandbox.SandboxedEnvironment(
        undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False, **extra
    )


@functools.lru_cache(maxsize=512)
def _compile(source_text: str, source: str, first: int = 0, tags: frozenset[str] | None = None) -> Any:
    """``source_text`` compiled; ``first``: the file's 0-based line index of its first line (for messages);
    ``tags``: see :func:`_environment`."""
    import jinja2

    try:
        return _environment(tags).from_string(source_text)
    except jinja2.TemplateSyntaxError as exc:
        raise PromptError(f"prompt {source}: line {(exc.lineno or 0) + first}: {exc.message}") from None


def _variables(source_text: str, source: str) -> set[str]:
    import jinja2.meta

    try:
        return set(jinja2.meta.find_undeclared_variables(_environment().parse(source_text)))
    except Exception as exc:  # noqa: BLE001 - reported as the template's problem
        raise PromptError(f"prompt {source}: {exc}") from None


def render(template: PromptTemplate, variables: Mapping[str, Any]) -> list[dict[str, str]]:
    """See :meth:`PromptTemplate.render`. The user part's printed values are neutralised (see the module
    docstring, "Data blocks")."""
    import jinja2

    try:
        system = _compile(template.system, template.source).render(
            {k: v for k, v in variables.items() if k not in CASE_VARIABLES}
        )
        user = _compile(template.user, template.source, 0, data_tags(template.user)).render(dict(variables))
    except jinja2.UndefinedError as exc:
        raise PromptError(f"prompt '{template.name}' ({template.source}): {exc.message}") from None
    except jinja2.TemplateError as exc:
        raise PromptError(f"prompt '{template.name}' ({template.source}): {exc}") from None
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@functools.lru_cache(maxsize=512)
def data_tags(source_text: str) -> frozenset[str]:
    """The tag names (lower case) that ``source_text``'s literal text uses (``<output>``, ``</passage>``,
    ``<statements count=...>`` -> output, passage, statements), plus ``"<<<"`` when it uses a run of three or
    more ``<`` as a marker: the delimiters :func:`neutralise` keeps case text from forging. Raises PromptError
    when the text is not a valid template."""
    import jinja2.nodes

    try:
        tree = _environment().parse(source_text)
    except Exception as exc:  # noqa: BLE001 - reported as the template's problem
        raise PromptError(f"prompt: {exc}") from None
    literal = "\n".join(node.data for node in tree.find_all(jinja2.nodes.TemplateData))
    found = {name.lower() for name in _TAG_NAME.findall(literal)}
    if _FENCE_RUN.search(literal):
        found.add("<<<")
    return frozenset(found)


def neutralise(text: str, tags: frozenset[str]) -> str:
    """``text`` with every ``<`` that would open or close one of ``tags`` (see :func:`data_tags`) written
    ``&lt;``: ``"a </Output > b"`` -> ``"a &lt;/Output > b"`` for ``{"output"}``; with ``"<<<"`` in ``tags``, every
    ``<`` of a run of three or more too. Text without such tags is returned unchanged."""
    if "<" not in text or not tags:
        return text
    if "<<<" in tags:
        text = _FENCE_RUN.sub(lambda m: "&lt;" * len(m.group()), text)
    names = sorted(t for t in tags if t != "<<<")
    if names:
        pattern = _tag_pattern(tuple(names))
        text = pattern.sub("&lt;", text)
    return text


@functools.lru_cache(maxsize=64)
def _tag_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    """A ``<`` followed by an opening or closing tag of one of ``names`` (any case, spaces allowed)."""
    alternatives = "|".join(re.escape(n) for n in names)
    return re.compile(rf"<(?=\s*/?\s*(?:{alternatives})(?![\w.:-]))", re.IGNORECASE)


def _finalizer(tags: frozenset[str]) -> Any:
    """Jinja's ``finalize`` for a user part: every printed value as text, neutralised against ``tags``."""

    def finalize(value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float)):
            return value
        return neutralise(value if isinstance(value, str) else str(value), tags)

    return finalize
