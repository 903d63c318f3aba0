"""The streaming engine (evaltasks/engine/stream.py) that the flow and evaluate_sync share."""

from __future__ import annotations

from collections.abc import Sequence

from evaltasks.engine.stream import (
    ProgressMeter,
    auto_batch_size,
    chunks,
    embed_chunk,
    score_directly,
    stream_batches,
)


def test_batches_are_collected_in_order_with_a_bounded_window() -> None:
    submitted: list[int] = []
    collected: list[int] = []
    outstanding: list[int] = []  # submitted, not yet collected, at each submission

    def submit(rows: Sequence[int]):
        submitted.append(rows[0])
        outstanding.append(len(submitted) - len(collected))

        def collect() -> list[int]:
            collected.append(rows[0])
            return [r * 10 for r in rows]

        return collect

    batches = chunks(list(range(10)), 3)
    out = list(stream_batches(batches, submit, in_flight=2))
    assert [list(rows) for rows, _ in out] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert [values for _, values in out] == [[0, 10, 20], [30, 40, 50], [60, 70, 80], [90]]
    assert collected == [0, 3, 6, 9] and max(outstanding) == 2


def test_a_direct_call_scores_when_collected() -> None:
    calls: list[list[int]] = []
    submit = score_directly(lambda rows: calls.append(list(rows)) or len(rows))
    assert [n for _, n in stream_batches(chunks(range(5), 2), submit, in_flight=1)] == [2, 2, 1]
    assert calls == [[0, 1], [2, 3], [4]]


def test_progress_reports_at_once_when_asked_and_100_at_the_end() -> None:
    reported: list[float] = []
    advanced: list[int] = []
    meter = ProgressMeter(200, reported.append, advanced.append)
    meter.add(50, now=True)
    meter.add(10, finished=True)  # units a failed provider never counted: the end is still 100 %
    assert reported == [25.0, 100.0] and advanced == [50, 10]


def test_sizes() -> None:
    assert auto_batch_size(100_000) == 5000 and auto_batch_size(1_000_000) == 10_000
    assert embed_chunk(2000) == 512 and embed_chunk(10**6) == 4096
