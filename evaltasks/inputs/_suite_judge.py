"""The suite's ``judge:`` block: its model, and the check that drops (and reports) options a judge client cannot take
(docs/judges.md#llm-judges)."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evaltasks.errors import Problem, quote
from evaltasks.inputs._suite_schema import JUDGE_OPTIONS_SCHEMA, judge_block_schema


class JudgeBlock(BaseModel):
    """The suite's ``judge:`` block: defaults for every judge metric (docs/judges.md#llm-judges).

    ``model`` and ``samples`` are the judge metrics' arguments of the same names; every other key is a judge
    client option (:data:`JUDGE_OPTIONS_SCHEMA`), merged under each metric's ``judge_options``. A metric's own
    ``model``, ``samples`` and ``judge_options`` win.
    """

    model_config = ConfigDict(extra="allow", json_schema_extra=lambda schema: judge_block_schema(schema))

    model: str | None = Field(
        default=None, min_length=1, description="The judge model (Azure OpenAI: the deployment); default gpt-4o-mini."
    )
    samples: int | None = Field(default=None, ge=1, description="Times each case is judged (default 1).")

    @field_validator("model", "samples", mode="before")
    @classmethod
    def _strict(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"must not be a boolean, got {quote(value)}")
        return value

    def options(self) -> dict[str, Any]:
        """The client options: every key but ``model`` and ``samples``."""
        return dict(self.model_extra or {})


def checked_judge_block(source: str, block: JudgeBlock, problems: list[Problem]) -> JudgeBlock:
    """The suite's ``judge:`` block without its bad options, each reported at ``judge`` (field: the option):
    every option that is not a judge client option (docs/judges.md#llm-judges) and every value that breaks its
    JSON Schema (:data:`JUDGE_OPTIONS_SCHEMA`). The client checks the rest when the metrics are built."""
    import jsonschema

    from evaltasks.judges.openai import OPTIONS

    bad = []
    for key, value in block.options().items():
        if key == "api_key":
            continue  # refused by the Suite model
        if key not in OPTIONS:
            close = difflib.get_close_matches(key, sorted(OPTIONS - {"api_key"}), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(
                Problem(
                    source,
                    "judge",
                    key,
                    f"is not a judge option{hint}; known: model, samples, {', '.join(sorted(OPTIONS - {'api_key'}))}",
                )
            )
            bad.append(key)
            continue
        schema = JUDGE_OPTIONS_SCHEMA.get(key)
        error = (
            jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
            if schema is not None
            else None
        )
        if error is not None:
            where = "".join(f"[{quote(p)}]" for p in error.absolute_path)
            problems.append(Problem(source, "judge", key, f"{where + ': ' if where else ''}{error.message}"))
            bad.append(key)
    if not bad:
        return block
    kept = {k: v for k, v in block.options().items() if k not in bad}
    return JudgeBlock(model=block.model, samples=block.samples, **kept)
