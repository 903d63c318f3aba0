"""Targets: the system under test, run to produce the outputs a suite evaluates (docs/targets.md#targets)."""

from evaltasks.targets.base import Target, TargetError, TargetKind, TargetOutput, TransientTargetError
from evaltasks.targets.chat import ChatTarget
from evaltasks.targets.generate import GeneratedCase, GenerationStopped, generate_batch, generate_case
from evaltasks.targets.http import HttpTarget
from evaltasks.targets.python import PythonTarget
from evaltasks.targets.store import OutputStore, StoredOutput

__all__ = [
    "ChatTarget",
    "GeneratedCase",
    "GenerationStopped",
    "HttpTarget",
    "OutputStore",
    "PythonTarget",
    "StoredOutput",
    "Target",
    "TargetError",
    "TargetKind",
    "TargetOutput",
    "TransientTargetError",
    "generate_batch",
    "generate_case",
]
