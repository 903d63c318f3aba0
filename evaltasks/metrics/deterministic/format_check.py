"""FormatCheckMetric: is the output an email address, URL, phone number, date, date-time or UUID?

Source: eval-ai-library's ``FormatCheckMetric`` documentation page
(https://library.eval-ai.com/metrics/deterministic/format-check) for email, phone, date and url; ``datetime``
(RFC 3339) and ``uuid`` are evaltasks' own. The exact rule of each format is
docs/metrics/deterministic.md#formatcheckmetric; each checker below states it too.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import Any, ClassVar, Literal, get_args
from urllib.parse import urlsplit

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import quote
from evaltasks.metrics.base import BaseMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.metrics.text import WHITE_SPACE
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

# Every pattern below is run with fullmatch and has no nested ambiguous repeats: linear time on any output.
_SPACE = re.compile(r"[\s\x00-\x1f\x7f]")  # whitespace or an ASCII control character
_EMAIL = re.compile(r"[^@\s]+@[^@\s.]+(?:\.[^@\s.]+)+")
_PHONE = re.compile(r"\+?(?=[0-9(])(?:[0-9 -]|\([0-9]+\))+(?<=[0-9)])")
_PHONE_CHARS = re.compile(r"[^0-9 ()+-]")
_DIGIT = re.compile(r"[0-9]")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DATETIME = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
PHONE_DIGITS = (7, 15)  # E.164: at most 15 digits; 7 is the shortest subscriber number in common use


def check_email(text: str) -> str | None:
    """None when ``text`` is an email address, else why not.

    Rule: exactly one ``@``; a non-empty local part before it; after it a domain of at least two non-empty
    dot-separated labels (``example.com``; no leading, trailing or doubled dot); no whitespace or control
    characters anywhere. Any other character is allowed (internationalised addresses); this is a shape check,
    not RFC 5322 (no quoted local parts, comments or IP-literal domains) and no check that the domain exists.
    """
    if _EMAIL.fullmatch(text):
        return None
    if _SPACE.search(text):
        return "contains whitespace or a control character"
    ats = text.count("@")
    if ats != 1:
        return "has no '@'" if ats == 0 else "has more than one '@'"
    local, domain = text.split("@")
    if not local:
        return "has nothing before the '@'"
    if "." not in domain:
        return "has no dot in the domain after the '@'"
    return "has an empty label in the domain (a leading, trailing or doubled dot)"


def check_url(text: str) -> str | None:
    """None when ``text`` is a URL, else why not.

    Rule (``urllib.parse.urlsplit``): a scheme (any, e.g. ``https``, ``ftp``, ``s3``) and a non-empty host
    (``scheme://host...``); a port, when given, is a number in [0, 65535]; no whitespace or control characters.
    ``mailto:user@example.com`` has no host, so it is not a URL here (as in eval-ai-library).
    """
    if _SPACE.search(text):
        return "contains whitespace or a control character"
    try:
        parts = urlsplit(text)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in [0, 65535]
    except ValueError as exc:
        return f"cannot be parsed as a URL ({exc})"
    if not parts.scheme:
        return "has no scheme (such as https://)"
    if not host:
        return "has no host after the scheme"
    return None


def check_phone(text: str) -> str | None:
    """None when ``text`` is a phone number, else why not.

    Rule: an optional leading ``+``, then ASCII digits, spaces, dashes and parentheses only; each pair of
    parentheses encloses digits only (``(555)``); it starts with a digit or ``(`` and ends with a digit or
    ``)``; 7 to 15 digits in all (E.164 allows at most 15). Example: ``+1 (555) 123-4567``.
    """
    if not _PHONE.fullmatch(text):
        if _PHONE_CHARS.search(text):
            return "contains a character other than digits, spaces, '-', '(', ')' and a leading '+'"
        if text.rfind("+") > 0:
            return "has a '+' that is not at the start"
        return (
            "has misplaced parentheses or separators (parentheses enclose digits only; it starts with a "
            "digit or '(' and ends with a digit or ')')"
        )
    digits = len(_DIGIT.findall(text))
    low, high = PHONE_DIGITS
    if not low <= digits <= high:
        return f"has {digits} digits (a phone number has {low} to {high}, E.164)"
    return None


def check_date(text: str) -> str | None:
    """None when ``text`` is an ISO 8601 calendar date ``YYYY-MM-DD`` (ASCII digits) that exists
    (``datetime.date.fromisoformat``: 2024-02-29 passes, 2025-02-30 fails), else why not."""
    if not _DATE.fullmatch(text):
        return "is not in the form YYYY-MM-DD"
    try:
        date.fromisoformat(text)
    except ValueError as exc:
        return f"is not a calendar date ({exc})"
    return None


def check_datetime(text: str) -> str | None:
    """None when ``text`` is an RFC 3339 date-time, else why not.

    Rule (RFC 3339 section 5.6): ``YYYY-MM-DDTHH:MM:SS``, optional ``.fraction``, then ``Z`` or an offset
    ``+HH:MM``/``-HH:MM`` (required); ``T`` and ``Z`` may be lowercase; the date exists, hour <= 23,
    minute <= 59, second <= 59, offset hours <= 23 and minutes <= 59. Second 60 (a leap second) is accepted
    only at 23:59:60 UTC (after applying the offset), where RFC 3339 places leap seconds; which days had one is
    not checked.
    """
    found = _DATETIME.fullmatch(text)
    if found is None:
        return "is not in the form YYYY-MM-DDTHH:MM:SS[.fraction] followed by Z or +HH:MM/-HH:MM"
    day, hour, minute, second, sign, offset_h, offset_m = found.groups()
    try:
        date.fromisoformat(day)
    except ValueError as exc:
        return f"has a date that does not exist ({exc})"
    h, m, s = int(hour), int(minute), int(second)
    if h > 23 or m > 59 or s > 60:
        return "has a time of day out of range (hour 0-23, minute 0-59, second 0-59, or 60 for a leap second)"
    offset = 0
    if sign is not None:
        if int(offset_h) > 23 or int(offset_m) > 59:
            return "has a UTC offset out of range (hours 0-23, minutes 0-59)"
        offset = (int(offset_h) * 60 + int(offset_m)) * (1 if sign == "+" else -1)
    if s == 60 and (h * 60 + m - offset) % 1440 != 23 * 60 + 59:
        return "has second 60 (a leap second) at a time other than 23:59:60 UTC"
    return None


def check_uuid(text: str) -> str | None:
    """None when ``text`` is a UUID in the canonical 8-4-4-4-12 hexadecimal form (either case, any version or
    variant, e.g. ``123e4567-e89b-12d3-a456-426614174000``), else why not. Braces, ``urn:uuid:`` prefixes and
    32 digits without dashes, which ``uuid.UUID`` also accepts, are not canonical and fail."""
    if not _UUID.fullmatch(text):
        return "is not in the canonical 8-4-4-4-12 hexadecimal form"
    uuid.UUID(text)  # cannot fail on that shape; the standard library's parser has the last word
    return None


FORMATS: dict[str, tuple[str, Callable[[str], str | None]]] = {
    "email": ("email address", check_email),
    "phone": ("phone number", check_phone),
    "date": ("ISO 8601 date (YYYY-MM-DD)", check_date),
    "url": ("URL", check_url),
    "datetime": ("RFC 3339 date-time", check_datetime),
    "uuid": ("UUID", check_uuid),
}

FormatType = Literal["email", "phone", "date", "url", "datetime", "uuid"]
"""The names of :data:`FORMATS`, as a type (the suite JSON Schema's enumeration)."""
assert get_args(FormatType) == tuple(FORMATS), "FormatType must list FORMATS"


@register_metric("FormatCheckMetric")
class FormatCheckMetric(BaseMetric):
    """Score 1.0 when the output, stripped of surrounding whitespace (as eval-ai-library does), has the format
    ``format_type``, else 0.0.

    Formats: ``email``, ``phone``, ``date``, ``url`` (eval-ai-library's), ``datetime`` and ``uuid``; the exact
    rule of each is the docstring of :func:`check_email`, :func:`check_phone`, :func:`check_date`,
    :func:`check_url`, :func:`check_datetime` and :func:`check_uuid` (and docs/metrics/deterministic.md#formatcheckmetric). An empty output fails.

    Args:
        threshold: minimum passing score, default 1.0.
        format_type: one of the formats above (required).
        name: the name in results (default ``"FormatCheckMetric"``).

    Raises:
        TypeError: ``format_type`` is missing.
        ValueError: an unknown ``format_type`` (the message lists the known ones), a threshold outside [0, 1].

    ``evaluation_log`` keys: ``format_type``, ``valid``, ``failure`` (why it is not valid, e.g. ``"has no
    '@'"``; None when valid).
    """

    version: ClassVar[str] = "1"

    def __init__(self, threshold: float = 1.0, *, format_type: FormatType, name: str | None = None) -> None:
        super().__init__(threshold, name=name)
        if format_type is None:
            raise TypeError(f"FormatCheckMetric requires format_type, one of {list(FORMATS)}")
        if not isinstance(format_type, str) or format_type not in FORMATS:
            raise ValueError(f"format_type must be one of {list(FORMATS)}, got {quote(format_type)}")
        self.format_type = format_type

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, format_type)."""
        return {"threshold": self.threshold, "name": self.name, "format_type": self.format_type}

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Check each case's stripped output; no embeddings involved. The cases of one verdict (valid, or the
        same failure) share one (immutable) result object."""
        results: list[MetricResult] = []
        append, scored, name, threshold = results.append, MetricResult.scored, self.name, self.threshold
        check = FORMATS[self.format_type][1]
        shared: dict[str | None, MetricResult] = {}  # failure (None: valid) -> result, shared by cases
        for case in cases:
            text = case.actual_output.strip(
                WHITE_SPACE
            )  # Unicode White_Space (docs/metrics/deterministic.md#text-comparison)
            failure = check(text) if text else "is empty"
            result = shared.get(failure)
            if result is None:
                verdict = self._verdict(failure)
                result = shared[failure] = scored(name, verdict[0], threshold, verdict[1], verdict[2])
            append(result)
        return results

    def _verdict(self, failure: str | None) -> tuple[float, str, dict[str, Any]]:
        """(score, reason, evaluation_log) of an output that failed for ``failure`` (None: valid)."""
        label = FORMATS[self.format_type][0]
        log = {"format_type": self.format_type, "valid": failure is None, "failure": failure}
        if failure is None:
            return 1.0, f"The output is a valid {label}.", log
        return 0.0, f"The output is not a valid {label}: it {failure}.", log
