"""Targets: the system under test, run to produce the outputs a suite evaluates (docs/targets.md#targets)."""

from evaltasks.targets.base import Target, TargetError, TargetKind, TargetOutput, TransientTargetError

__all__ = ["Target", "TargetError", "TargetKind", "TargetOutput", "TransientTargetError"]
