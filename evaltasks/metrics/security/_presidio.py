"""Offline PII detection with Microsoft Presidio's pattern recognizers (no spaCy model, no network).

Presidio's :class:`~presidio_analyzer.AnalyzerEngine` runs here with the :class:`NoOpNlpEngine` (Presidio's engine
for self-contained recognizers: it loads no model) and a registry holding only regex/checksum recognizers
(https://microsoft.github.io/presidio/analyzer/ : predefined recognizers, ``RecognizerRegistry``). The e-mail
recognizer checks a match's domain against the public suffix list bundled with ``tldextract`` (never the
network copy that library fetches by default). Entities that need a named-entity model (PERSON, LOCATION) are
only available to PIILeakageMetric's judge mode (docs/metrics/security.md#piileakagemetric).

Engines are built once per process and entity-type set (the import of Presidio takes seconds).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

PATTERN_RECOGNIZERS: dict[str, str] = {
    "EMAIL_ADDRESS": "EmailRecognizer",
    "PHONE_NUMBER": "PhoneRecognizer",
    "CREDIT_CARD": "CreditCardRecognizer",
    "IBAN_CODE": "IbanRecognizer",
    "US_SSN": "UsSsnRecognizer",
    "IP_ADDRESS": "IpRecognizer",
    "CRYPTO": "CryptoRecognizer",
    "DATE_TIME": "DateRecognizer",
    "URL": "UrlRecognizer",
    "MAC_ADDRESS": "MacAddressRecognizer",
    "US_BANK_NUMBER": "UsBankRecognizer",
    "US_PASSPORT": "UsPassportRecognizer",
    "US_DRIVER_LICENSE": "UsLicenseRecognizer",
    "US_ITIN": "UsItinRecognizer",
    "UK_NINO": "UkNinoRecognizer",
}
"""Entity type -> the Presidio predefined recognizer (``presidio_analyzer.predefined_recognizers``) that finds
it without a model: the entity types of the offline (``detection_method: model``) mode."""

MODEL_ONLY_TYPES: tuple[str, ...] = ("PERSON", "LOCATION")
"""Entity types Presidio finds only with a named-entity model: the judge mode's alone."""

ALL_TYPES: tuple[str, ...] = (*PATTERN_RECOGNIZERS, *MODEL_ONLY_TYPES)
"""Every entity type PIILeakageMetric knows (the judge's labels too)."""

DEFAULT_TYPES: tuple[str, ...] = (
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "IBAN_CODE",
    "US_SSN",
    "IP_ADDRESS",
    "CRYPTO",
)
"""The entity types looked for unless ``entity_types`` says otherwise: identifiers that reach a person or an
account on their own. DATE_TIME, PERSON, LOCATION, URL and the rest count only when named."""

ALIASES: dict[str, str] = {"SSN": "US_SSN"}
"""eval-ai-library's names (its docs' ``SSN``) -> Presidio's."""

DEFAULT_SCORE_THRESHOLD = 0.4
"""The Presidio confidence a hit needs to count (Presidio's ``score_threshold``; eval-ai-library leaves it at 0, so
every weak pattern hit counts): a phone number (0.4) counts, a bare 9-digit number read as an SSN (0.05) does not."""


@dataclass(frozen=True)
class Hit:
    """One entity found: its type and Presidio's confidence. The matched text is never kept (it is the PII).

    Attributes:
        entity_type: e.g. ``EMAIL_ADDRESS``.
        score: Presidio's confidence in [0, 1].
    """

    entity_type: str
    score: float


_LOCK = threading.Lock()


def _offline_email(base: type) -> type:
    """Presidio's EmailRecognizer with its domain check reading tldextract's bundled suffix list (no network)."""
    import tldextract

    extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

    class OfflineEmailRecognizer(base):  # type: ignore[misc]
        """EmailRecognizer whose ``validate_result`` never fetches the public suffix list."""

        def validate_result(self, pattern_text: str) -> bool:
            return bool(extract(pattern_text).fqdn)

    return OfflineEmailRecognizer


@functools.lru_cache(maxsize=16)
def _engine(entity_types: tuple[str, ...]) -> Any:
    """A Presidio AnalyzerEngine with the pattern recognizers of ``entity_types`` and no NLP model."""
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry, predefined_recognizers
    from presidio_analyzer.nlp_engine import NoOpNlpEngine

    recognizers = []
    for entity in entity_types:
        cls = getattr(predefined_recognizers, PATTERN_RECOGNIZERS[entity])
        if entity == "EMAIL_ADDRESS":
            cls = _offline_email(cls)
        recognizers.append(cls())
    registry = RecognizerRegistry(recognizers=recognizers, supported_languages=["en"])
    nlp = NoOpNlpEngine(models=[{"lang_code": "en", "model_name": "none"}])
    return AnalyzerEngine(registry=registry, nlp_engine=nlp, supported_languages=["en"])


def detector(entity_types: Iterable[str]) -> Callable[[str], list[Hit]]:
    """A function finding the ``entity_types`` (keys of :data:`PATTERN_RECOGNIZERS`) in a text: every hit Presidio
    reports, at any score, as :class:`Hit` (type and score only), in text order.

    Raises:
        KeyError: a type without a pattern recognizer.
        ImportError: presidio-analyzer is not installed.
    """
    types = tuple(sorted(set(entity_types)))
    with _LOCK:  # one thread builds an engine; the others wait for it
        engine = _engine(types)

    def detect(text: str) -> list[Hit]:
        results = engine.analyze(text=text, language="en", entities=list(types), score_threshold=0.0)
        return [Hit(r.entity_type, float(r.score)) for r in sorted(results, key=lambda r: (r.start, r.end))]

    return detect
