"""Escaping of untrusted text (model outputs, inputs, reasons) for markdown and XML reports."""

from __future__ import annotations

import regex

# Control characters, and format characters (Cf: bidirectional overrides such as U+202E that make
# "gnp.exe" read "exe.png", zero-width spaces and joiners, soft hyphens) that hide or reorder text.
_CONTROL = regex.compile(r"[[\p{Cc}\p{Cf}]--[\n\t]]", flags=regex.V1)
# GitHub turns "#12", "GH-12" and "owner/repo#12" in rendered text into issue references (and notifies the
# other issue): a zero-width space after "#" or "GH-" before a digit keeps them plain text.
_REFERENCE = regex.compile(r"(#|\bGH\\?-)(?=\d)")  # "-" may already be escaped
_XML_INVALID = regex.compile(r"[^\u0009\u000A\u000D\u0020-\uD7FF\uE000-\uFFFD\U00010000-\U0010FFFF]")
# Every ASCII punctuation character that means something to CommonMark/GFM, HTML or GitHub autolinks; a
# backslash before ASCII punctuation always renders as the character itself (CommonMark 2.4).
_MD_SPECIAL = regex.compile(r"""([\\`*_{}\[\]()<>#+\-!|~:&.=$^"])""")
# Renderers with linkify (Prefect's UI, markdown-it with linkify-it) autolink URLs, "www." and bare domains in
# the text *after* backslash escapes are resolved, so escapes cannot stop them: a zero-width space between a
# scheme's ":" and "//", after "www" before its ".", and after the "." before a top-level domain that linkify-it
# links without a scheme (``evil.com``, ``a@b.io``: its default list, and any two letters) leaves no URL, host or
# e-mail to find; file names such as ``answers.jsonl`` and numbers such as ``3.14`` stay as they are.
_SCHEME = regex.compile(r"(?<=[A-Za-z0-9]\\?:)(?=/)")
_WWW = regex.compile(r"(?i)(?<=\bwww)(?=\\?\.)")
_DOMAIN_DOT = regex.compile(
    r"(?i)(?<=\w\\?\.)(?=(?:[a-z]{2}|biz|com|edu|gov|net|org|pro|web|xxx|aero|asia|coop|info|museum|name|shop|рф)"
    r"(?![\w-]))"
)


def markdown_inline(text: str | None, limit: int = 200) -> str:
    """``text`` made inert inside a markdown table cell or paragraph, cut to ``limit`` characters.

    Control and format characters (bidirectional overrides, zero-width characters) are dropped, newlines
    become spaces, markdown and HTML punctuation (links, images, emphasis, code, tables, tags, entities,
    autolinks) is backslash-escaped, and a zero-width space after ``@`` (mentions) and after ``#``/``GH-``
    before a digit (issue references) keeps them from notifying anyone. Zero-width spaces inside ``scheme://``,
    ``www.`` and ``host.tld`` keep renderers that autolink bare URLs (linkify) from making a link of them.
    """
    if text is None:
        return ""
    text = _CONTROL.sub("", text).replace("\n", " ").replace("\t", " ")
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = _MD_SPECIAL.sub(r"\\\1", text).replace("@", "@\u200b")
    text = _DOMAIN_DOT.sub("\u200b", _WWW.sub("\u200b", _SCHEME.sub("\u200b", text)))
    return str(_REFERENCE.sub("\\1\u200b", text))


_ASCII_XML_INVALID = {c: None for c in range(32) if c not in (9, 10, 13)}


def xml_text(text: str | None) -> str:
    """``text`` with characters XML 1.0 forbids removed (escaping is the XML writer's job)."""
    if text is None:
        return ""
    if text.isascii():  # the common case: only C0 controls but TAB, LF, CR are forbidden; str.translate is C
        return text.translate(_ASCII_XML_INVALID)
    return str(_XML_INVALID.sub("", text))
