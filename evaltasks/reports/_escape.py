"""Escaping of untrusted text (model outputs, inputs, reasons) for markdown and XML reports."""

from __future__ import annotations

import regex

_CONTROL = regex.compile(r"[\p{Cc}--[\n\t]]", flags=regex.V1)
_XML_INVALID = regex.compile(r"[^\u0009\u000A\u000D\u0020-\uD7FF\uE000-\uFFFD\U00010000-\U0010FFFF]")
# Every ASCII punctuation character that means something to CommonMark/GFM, HTML or GitHub autolinks; a
# backslash before ASCII punctuation always renders as the character itself (CommonMark 2.4).
_MD_SPECIAL = regex.compile(r"""([\\`*_{}\[\]()<>#+\-!|~:&.=$^"])""")


def markdown_inline(text: str | None, limit: int = 200) -> str:
    """``text`` made inert inside a markdown table cell or paragraph, cut to ``limit`` characters.

    Control characters are dropped, newlines become spaces, markdown and HTML punctuation (links, images,
    emphasis, code, tables, tags, entities, autolinks) is backslash-escaped, and a zero-width space after
    ``@`` keeps @mentions from notifying anyone.
    """
    if text is None:
        return ""
    text = _CONTROL.sub("", text).replace("\n", " ").replace("\t", " ")
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return _MD_SPECIAL.sub(r"\\\1", text).replace("@", "@\u200b")


def xml_text(text: str | None) -> str:
    """``text`` with characters XML 1.0 forbids removed (escaping is the XML writer's job)."""
    return "" if text is None else _XML_INVALID.sub("", text)
