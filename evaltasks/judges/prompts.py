"""Prompt templates of the judge metrics: readable text files a user can override per metric.

A template file has two parts, each introduced by a line of its own: ``### system`` (the instructions) and
``### user`` (the test case's data). Both are Jinja2 templates (``{{ input }}``, ``{% for c in
retrieval_context %}``); undefined variables are errors, and nothing is HTML-escaped. The built-in templates
live in ``evaltasks/judges/prompts/<MetricClass>/<prompt>.md``; a metric's ``prompts:`` argument maps a prompt's
name to a file of the user's (a path relative to the suite file) that replaces it.

Trust: the system part may use only the metric's own configuration (criteria, evaluation steps, which a suite's
author wrote); the test case's text (input, output, contexts: untrusted) may appear only in the user part.
:func:`render` enforces it: a system part that uses a case variable is an error.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
"""Where the built-in templates live: ``PROMPTS_DIR/<MetricClass>/<prompt>.md``."""

CASE_VARIABLES = frozenset({
    "input", "actual_output", "expected_output", "context", "retrieval_context", "references", "tools_called",
    "expected_tools", "statements", "claims", "truths", "opinions", "chunk", "case",
})
"""Variables holding test-case text (or text derived from it by an earlier judge answer): user part only."""

_SYSTEM, _USER = "### system", "### user"


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
    lines = text.splitlines()
    marks = [i for i, line in enumerate(lines) if line.strip() in (_SYSTEM, _USER)]
    heads = [lines[i].strip() for i in marks]
    if heads != [_SYSTEM, _USER]:
        raise PromptError(f"prompt '{name}' ({source}) must have a '{_SYSTEM}' line, then a '{_USER}' line, each "
                          f"once; found {heads or 'neither'}")
    if any(line.strip() for line in lines[: marks[0]]):
        raise PromptError(f"prompt '{name}' ({source}): text before '{_SYSTEM}'")
    system = "\n".join(lines[marks[0] + 1: marks[1]]).strip("\n")
    user = "\n".join(lines[marks[1] + 1:]).strip("\n")
    template = PromptTemplate(name=name, system=system, user=user, source=source)
    for part in (system, user):
        _compile(part, source)
    problem = sorted(_variables(system, source) & CASE_VARIABLES)
    if problem:
        raise PromptError(f"prompt '{name}' ({source}): the system part uses test-case text ({', '.join(problem)}); "
                          "case text belongs in the user part")
    return template


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


@functools.lru_cache(maxsize=None)
def builtin_template(metric: str, name: str) -> PromptTemplate:
    """The built-in template ``name`` of the metric class ``metric``. Raises PromptError if there is none."""
    return load_template(PROMPTS_DIR / metric / f"{name}.md", name)


@functools.lru_cache(maxsize=None)
def _environment() -> Any:
    import jinja2

    return jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)


@functools.lru_cache(maxsize=512)
def _compile(source_text: str, source: str) -> Any:
    import jinja2

    try:
        return _environment().from_string(source_text)
    except jinja2.TemplateSyntaxError as exc:
        raise PromptError(f"prompt {source}: line {exc.lineno}: {exc.message}") from None


def _variables(source_text: str, source: str) -> set[str]:
    import jinja2.meta

    try:
        return set(jinja2.meta.find_undeclared_variables(_environment().parse(source_text)))
    except Exception as exc:  # noqa: BLE001 - reported as the template's problem
        raise PromptError(f"prompt {source}: {exc}") from None


def render(template: PromptTemplate, variables: Mapping[str, Any]) -> list[dict[str, str]]:
    """See :meth:`PromptTemplate.render`."""
    import jinja2

    try:
        system = _compile(template.system, template.source).render(
            {k: v for k, v in variables.items() if k not in CASE_VARIABLES})
        user = _compile(template.user, template.source).render(dict(variables))
    except jinja2.UndefinedError as exc:
        raise PromptError(f"prompt '{template.name}' ({template.source}): {exc.message}") from None
    except jinja2.TemplateError as exc:
        raise PromptError(f"prompt '{template.name}' ({template.source}): {exc}") from None
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
