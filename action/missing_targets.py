"""Step 3 of the action, before ``evaltasks run``, when missing credentials are skipped (a fork's pull request):
which of the suite's targets cannot run because this run lacks their secret, so their cases are skipped with a
warning instead of failing the run for a key a fork never gets (docs/action.md#prompt-changes-on-every-pull-request).

Run by ``run.sh`` with evaltasks' Python: ``missing_targets.py SUITE FILTERED``. The suite file is read as data
(YAML, safe loader); nothing of the repository is imported. For each entry of ``target:`` / ``targets:``:

- ``chat`` needs the API key of the chat client it shares with the judges (``OPENAI_API_KEY``; Azure:
  ``AZURE_OPENAI_API_KEY``);
- ``http`` needs every environment variable its ``headers:`` name (their values come only from the environment);
- ``python`` needs nothing the action can tell.

The rule is the target's own: evaltasks builds the entry (no request is sent) and asks its
``missing_credentials()``.

Its exit status says what ``run.sh`` does next (any other status, e.g. a crash, counts as ``run``):

- 0, ``run``: no target misses a credential (or the suite has no target, or cannot be read: ``evaltasks run``
  reports that as invalid input);
- 11, ``skip``: every target misses one: nothing can be evaluated; ``evaltasks run`` is not started and the gate is
  not applied (outputs ``skipped=true`` and ``skipped-reason``);
- 10, ``filtered``: some do: a copy of the suite without them is written to ``FILTERED`` (in the suite's folder, so
  its relative paths hold) and run instead (output ``skipped-reason``).

Each skipped target gets a ``::warning`` naming it, the variable it needs, and how many cases are skipped.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _github import annotate, set_output  # noqa: E402

KINDS = ("python", "chat", "http")
#: exit status of :func:`main` per decision
EXIT_STATUS = {"run": 0, "filtered": 10, "skip": 11}


def _entries(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The suite's target entries (``target:`` as a list of one), each a mapping; [] for none or a wrong shape."""
    if isinstance(data.get("targets"), list):
        entries = data["targets"]
    elif isinstance(data.get("target"), dict):
        entries = [data["target"]]
    else:
        return []
    return [entry for entry in entries if isinstance(entry, dict)]


def target_name(entry: dict[str, Any]) -> str:
    """A target entry's name in reports: its ``name``, else its kind (docs/targets.md#targets)."""
    kind = next((k for k in KINDS if k in entry), "target")
    return str(entry.get("name") or kind)


def missing_credential(entry: dict[str, Any], suite: Path) -> str | None:
    """Why a ``chat`` or ``http`` target entry cannot run in this environment (its key or a header's variable
    is unset), in the target's own words (``missing_credentials()`` of the target evaltasks builds from the entry:
    the chat client's key rule, the http target's header rule); None when it can, for a ``python`` target (the
    action cannot tell what it needs), and for an entry evaltasks cannot build (``evaltasks run`` reports that,
    with its location)."""
    if not any(isinstance(entry.get(kind), dict) for kind in ("chat", "http")):
        return None
    try:
        from evaltasks.inputs._suite_targets import TargetSpec, build_targets

        (target,) = build_targets([TargetSpec.model_validate(entry)], suite.parent, str(suite))
        check = getattr(target, "missing_credentials", None)
        return check() if callable(check) else None
    except Exception:  # noqa: BLE001 - any problem of the entry is evaltasks run's to report, located
        return None


def _case_count(suite: Path, data: dict[str, Any]) -> int | None:
    """The number of rows of the suite's dataset (evaltasks' own reader), or None when it cannot be read here."""
    try:
        from evaltasks.inputs.datasets import load_dataset
        from evaltasks.inputs.suite import DatasetSpec

        return len(load_dataset(DatasetSpec.model_validate(data["dataset"]), suite.parent, generated=True).cases)
    except Exception:  # noqa: BLE001 - the count is informative only; evaltasks run reports a bad dataset
        return None


def decide(suite: Path, filtered: Path) -> tuple[str, str]:
    """(``run`` | ``skip`` | ``filtered``, the reason shown in the summary: "" for ``run``); see the module
    docstring. Writes ``filtered`` for ``filtered`` and prints one ``::warning`` per skipped target."""
    from evaltasks.errors import ConfigError
    from evaltasks.inputs.files import load_yaml

    try:
        data = load_yaml(suite.read_text(encoding="utf-8"), str(suite), ConfigError)
    except Exception:  # noqa: BLE001 - unreadable or invalid: evaltasks run says why, as invalid input
        return "run", ""
    if not isinstance(data, dict):
        return "run", ""
    entries = _entries(data)
    missing = [(entry, reason) for entry in entries for reason in [missing_credential(entry, suite)] if reason]
    if not missing:
        return "run", ""
    cases = _case_count(suite, data)
    counted = f"its {cases} cases are" if cases is not None else "its cases are"
    sentences = []
    for entry, why in missing:
        sentence = (
            f"target '{target_name(entry)}' cannot run without a secret this run does not have (pull requests "
            f"from forks get none): {counted} skipped ({why})"
        )
        sentences.append(sentence)
        annotate("warning", sentence + ".", title="evaltasks: target skipped")
    if len(missing) == len(entries):
        return "skip", "; ".join(sentences) + ". Nothing was evaluated, and the gate was not applied."
    kept = [entry for entry in entries if all(entry is not gone for gone, _ in missing)]
    data.pop("targets", None)
    data.pop("target", None)
    if len(kept) == 1:
        data["target"] = kept[0]
    else:
        data["targets"] = kept
    import yaml

    filtered.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    names = ", ".join(f"'{target_name(entry)}'" for entry in kept)
    return "filtered", "; ".join(sentences) + f". Evaluated: {names}."


def main(argv: list[str]) -> int:
    """``missing_targets.py SUITE FILTERED``: set the step outputs, print the decision and return its
    :data:`EXIT_STATUS`; 2 for a wrong call."""
    if len(argv) != 2:
        print("usage: missing_targets.py SUITE FILTERED", file=sys.stderr)
        return 2
    decision, reason = decide(Path(argv[0]), Path(argv[1]))
    if decision == "skip":
        set_output("skipped", "true")
    if reason:
        set_output("skipped-reason", reason)
    print(f"targets: {decision}")
    return EXIT_STATUS[decision]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
