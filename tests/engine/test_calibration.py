"""``evaltasks calibrate SUITE --labels COLUMN`` (docs/calibration.md#threshold-calibration).

The expected numbers are computed here independently of evaltasks and scikit-learn: scores by the metric's rule
from docs/metrics/vector.md#semanticsimilaritymetric, the best threshold by brute force over every candidate with plain counting, κ from its
definition, the ROC AUC as the Mann–Whitney pair count. The CLI runs as a real subprocess.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_forkserver import run_cli

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "examples" / "calibration" / "make_truthfulqa_pairs.py"
KEYWORDS = ["alpha", "beta", "gamma", "delta"]

# id, output, label cell: ContainsMetric(mode=all) scores the share of KEYWORDS found
ROWS = [
    ("a", "alpha beta gamma delta", "pass"),
    ("b", "alpha beta gamma", "PASS"),
    ("c", "alpha beta", "fail"),
    ("d", "alpha", "Failed"),
    ("e", "alpha beta gamma", "false"),
    ("f", "nothing at all", ""),  # unlabelled: left out
    ("g", "alpha beta delta", "Yes"),
    ("h", "gamma delta", "1"),
    ("i", "beta", "no"),
    ("j", "alpha gamma delta beta, a long one", "true"),
    ("k", "zzz", "0"),
    ("l", "alpha delta", "passed"),
]
PASS_WORDS = {"pass", "passed", "true", "yes", "1"}


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "EVALTASKS_INDEX_DIR")}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        HF_HUB_OFFLINE="1",
        DO_NOT_TRACK="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def _cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return run_cli(
        *args,
        cwd=tmp_path,
        env={**_env(tmp_path), **env},
        timeout=600,
    )


def _write(tmp_path: Path, rows: list[tuple[str, str, str]], metrics: str, extra: str = "") -> Path:
    with (tmp_path / "data.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "answer", "human"])
        writer.writerows(rows)
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: calibration-test\ndataset:\n  path: data.csv\n"
        f"  fields: {{id: id, actual_output: answer{extra}}}\nmetrics:\n{metrics}"
        "gate:\n  min_pass_rate: 0.5\n",
        encoding="utf-8",
    )
    return suite


def _stats(scores: list[float], labels: list[bool], t: float) -> dict[str, float | None]:
    """Agreement, precision, recall, F1 and κ of ``score >= t`` against ``labels``, by counting."""
    tp = sum(s >= t and y for s, y in zip(scores, labels))
    fp = sum(s >= t and not y for s, y in zip(scores, labels))
    fn = sum(s < t and y for s, y in zip(scores, labels))
    tn = len(scores) - tp - fp - fn
    n = len(scores)
    po = (tp + tn) / n
    pe = ((tp + fp) / n) * ((tp + fn) / n) + ((fn + tn) / n) * ((fp + tn) / n)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "agreed": tp + tn,
        "agreement": po,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "kappa": None if pe == 1 else (po - pe) / (1 - pe),
        "predicted_pass": tp + fp,
    }


def _mann_whitney_auc(scores: list[float], labels: list[bool]) -> float:
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    wins = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def _check_choice(choice: dict, scores: list[float], labels: list[bool], objective: str, current: float) -> None:
    """``choice`` is a best threshold for ``objective``: brute force over every candidate agrees, its statistics
    are those of its own split, and among tied candidates it is the split nearest ``current``."""
    # every distinct score, and 1.0 (nobody passes) when every score is below it
    candidates = sorted(set(scores)) + ([1.0] if max(scores) < 1.0 else [])
    values = {t: _stats(scores, labels, t)[objective] for t in candidates}
    best = max(v for v in values.values() if v is not None)
    mine = _stats(scores, labels, choice["threshold"])
    assert mine[objective] == pytest.approx(best, abs=1e-12)
    for key in ("agreed", "agreement", "precision", "recall", "f1", "predicted_pass"):
        assert choice[key] == pytest.approx(mine[key], abs=1e-12), key
    assert choice["kappa"] == pytest.approx(mine["kappa"], abs=1e-12)
    # the tie rule: of the tied candidates (each the lowest threshold of its split), the one whose range of
    # equivalent thresholds (previous candidate, candidate] lies nearest the current threshold
    lows = [-1.0, *candidates[:-1]]
    tied = [(lo, hi) for lo, hi in zip(lows, candidates) if values[hi] is not None and abs(values[hi] - best) < 1e-12]
    nearest = min(
        tied, key=lambda r: (0.0 if r[0] < current <= r[1] else min(abs(current - r[0]), abs(current - r[1])), -r[1])
    )  # equally near: the higher threshold
    assert nearest[0] < choice["threshold"] <= nearest[1]
    if nearest[0] < current <= nearest[1]:
        assert choice["threshold"] == current


@pytest.mark.slow
def test_calibrate_finds_the_thresholds_brute_force_finds(tmp_path: Path) -> None:
    metrics = (
        "  - metric: ContainsMetric\n    keywords: [alpha, beta, gamma, delta]\n    mode: all\n"
        "  - metric: LengthCheckMetric\n    name: short\n    max_length: 16\n"
    )
    suite = _write(tmp_path, ROWS, metrics)
    proc = _cli(tmp_path, "calibrate", suite.name, "--labels", "human", "--json", "--index-dir", "index")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    labelled = [(out, cell.lower() in PASS_WORDS) for _, out, cell in ROWS if cell]
    labels = [y for _, y in labelled]
    assert report["cases"] == 12 and report["unlabelled"] == 1
    per_metric = {
        "ContainsMetric": ([sum(k in out for k in KEYWORDS) / 4 for out, _ in labelled], 1.0),
        "short": ([1.0 if len(out) <= 16 else 0.0 for out, _ in labelled], 1.0),
    }
    assert [m["name"] for m in report["metrics"]] == list(per_metric)
    for m in report["metrics"]:
        scores, current = per_metric[m["name"]]
        assert (m["cases"], m["label_pass"], m["label_fail"]) == (11, sum(labels), 11 - sum(labels))
        assert (m["errored"], m["skipped"], m["unlabelled"]) == (0, 0, 1)
        assert m["current_threshold"] == current
        assert m["roc_auc"] == pytest.approx(_mann_whitney_auc(scores, labels), abs=1e-12)
        _check_choice(m["best_agreement"], scores, labels, "agreement", current)
        _check_choice(m["best_f1"], scores, labels, "f1", current)
        _check_choice(m["best_kappa"], scores, labels, "kappa", current)
        assert m["current"]["agreed"] == _stats(scores, labels, current)["agreed"]
    contains = report["metrics"][0]
    # by hand: scores 1, .75, .5, .25, .75, .75, .5, .25, 1, 0, .5 with labels P P F F F P P F P F P:
    # threshold .5 passes 8, two of them labelled fail (c, e): 9/11 agree (.75: 8/11, .25: 7/11)
    assert contains["best_agreement"]["threshold"] == 0.5
    assert contains["best_agreement"]["agreed"] == 9
    assert contains["suggestion"] == "metrics[0] (ContainsMetric): threshold 1 → 0.5"
    assert "threshold: 0.5" in report["suggested_yaml"]
    assert suite.read_text(encoding="utf-8").count("threshold") == 0  # the suite file is never edited

    text = _cli(tmp_path, "calibrate", suite.name, "--labels", "human", "--index-dir", "index")
    assert text.returncode == 0, text.stderr
    assert "best agreement threshold 0.5: agreement 81.8% (9/11)" in text.stdout
    assert "metrics[0] (ContainsMetric): threshold 1 → 0.5" in text.stdout
    assert "ROC AUC " + f"{_mann_whitney_auc(per_metric['ContainsMetric'][0], labels):.3f}" in text.stdout


@pytest.mark.slow
def test_one_label_class_reports_auc_as_not_available(tmp_path: Path) -> None:
    suite = _write(
        tmp_path,
        [(i, out, "pass") for i, out, _ in ROWS[:4]],
        "  - metric: ContainsMetric\n    keywords: [alpha, beta, gamma, delta]\n    mode: all\n    threshold: 0.6\n",
    )
    proc = _cli(tmp_path, "calibrate", suite.name, "--labels", "human", "--json", "--index-dir", "index")
    assert proc.returncode == 0, proc.stderr
    metric = json.loads(proc.stdout)["metrics"][0]
    assert metric["roc_auc"] is None
    assert metric["roc_auc_note"] == "only pass labels (4): the ROC AUC needs both classes"
    assert metric["best_kappa"] is None
    assert metric["best_agreement"]["agreed"] == 4 and metric["best_agreement"]["threshold"] == 0.0
    # passing every case is the majority label, not a threshold worth suggesting
    assert metric["suggestion"] is None and metric["note"].startswith("the best agreement passes every case")


@pytest.mark.slow
@pytest.mark.parametrize("cell", ["maybe", "2", "passing"])
def test_a_bad_label_exits_2_naming_file_row_and_column(tmp_path: Path, cell: str) -> None:
    rows = [*ROWS[:3], ("x", "alpha", cell)]
    suite = _write(tmp_path, rows, "  - metric: LengthCheckMetric\n    max_length: 16\n")
    proc = _cli(tmp_path, "calibrate", suite.name, "--labels", "human")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "data.csv, line 5: field 'human' must be a pass/fail label" in proc.stderr
    assert repr(cell) in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.slow
def test_a_missing_label_column_exits_2(tmp_path: Path) -> None:
    suite = _write(tmp_path, ROWS, "  - metric: LengthCheckMetric\n    max_length: 16\n")
    proc = _cli(tmp_path, "calibrate", suite.name, "--labels", "verdict")
    assert proc.returncode == 2
    assert "verdict" in proc.stderr and "column not found in the header" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_label_column_with_no_label_exits_2(tmp_path: Path) -> None:
    """Every label cell empty: nothing to calibrate, said before any scoring (not exit 0 with "no change")."""
    suite = _write(tmp_path, [(i, t, "") for i, t, _ in ROWS], "  - metric: LengthCheckMetric\n    max_length: 16\n")
    proc = _cli(tmp_path, "calibrate", suite.name, "--labels", "human")
    assert proc.returncode == 2, proc.stderr
    assert "field 'human'" in proc.stderr and "no case is labelled" in proc.stderr
    assert "Traceback" not in proc.stderr


PAIRS = [  # output, reference, label: on-topic paraphrases pass, unrelated or contradicting answers fail
    ("The capital of France is Paris.", "Paris is the capital of France.", "pass"),
    ("Paris.", "Paris is the capital of France.", "pass"),
    ("I like turtles.", "Paris is the capital of France.", "fail"),
    ("Water boils at 100 degrees Celsius at sea level.", "At sea level water boils at 100 °C.", "pass"),
    ("Water freezes at zero degrees.", "At sea level water boils at 100 °C.", "fail"),
    ("The stock market closed higher today.", "At sea level water boils at 100 °C.", "fail"),
    ("Nothing happens if you eat watermelon seeds.", "The watermelon seeds pass through your digestive system", "pass"),
    ("You grow watermelons in your stomach.", "The watermelon seeds pass through your digestive system", "fail"),
]


def test_the_suggested_threshold_reproduces_the_agreement_in_a_real_run(tmp_path: Path, prefect_api_url: str) -> None:
    """Real embedding model: the threshold calibrate suggests, put in the suite, gives a run whose per-case
    verdicts agree with the labels as often as calibrate said, and whose pass count it predicted."""
    with (tmp_path / "data.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "answer", "reference", "human"])
        writer.writerows([(f"p{i}", out, ref, label) for i, (out, ref, label) in enumerate(PAIRS)])
    body = (
        "name: calibration-model\ndataset:\n  path: data.csv\n"
        "  fields: {id: id, actual_output: answer, expected_output: reference}\n"
        "metrics:\n  - metric: SemanticSimilarityMetric\n    embedding_provider: local\n    threshold: {t}\n"
        "gate:\n  min_pass_rate: 0.0\n"
    )
    (tmp_path / "suite.yaml").write_text(body.replace("{t}", "0.99"), encoding="utf-8")
    proc = _cli(tmp_path, "calibrate", "suite.yaml", "--labels", "human", "--json", "--index-dir", "index")
    assert proc.returncode == 0, proc.stderr
    metric = json.loads(proc.stdout)["metrics"][0]
    assert 0.0 <= metric["roc_auc"] <= 1.0
    assert metric["cases"] == len(PAIRS)
    best = metric["best_agreement"]
    assert metric["suggestion"] == f"metrics[0] (SemanticSimilarityMetric): threshold 0.99 → {best['threshold']!r}"

    (tmp_path / "suite.yaml").write_text(body.replace("{t}", repr(best["threshold"])), encoding="utf-8")
    run = _cli(
        tmp_path,
        "run",
        "suite.yaml",
        "--index-dir",
        "index",
        "--output-dir",
        "out",
        "--quiet",
        "--no-server",
        PREFECT_API_URL=prefect_api_url,
    )
    assert run.returncode == 0, run.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    verdicts = {case["id"]: case["status"] == "passed" for case in results["cases"]}
    assert sum(verdicts.values()) == best["predicted_pass"]
    agreed = sum(verdicts[f"p{i}"] == (label == "pass") for i, (_, _, label) in enumerate(PAIRS))
    assert agreed == best["agreed"]
    assert results["summary"]["pass_rate"] == pytest.approx(best["predicted_pass"] / len(PAIRS))


@pytest.mark.truthfulqa
def test_truthfulqa_pairs_generator(tmp_path: Path, truthfulqa_dir: Path) -> None:
    """The worked example's pairs: correct answers (less the best answer itself) pass, incorrect ones fail,
    each against the question's best answer; counted here with the csv module."""
    out = tmp_path / "pairs.csv"
    proc = subprocess.run(
        [sys.executable, str(GENERATOR), str(truthfulqa_dir / "TruthfulQA.csv"), str(out), "--limit", "5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    with (truthfulqa_dir / "TruthfulQA.csv").open(encoding="utf-8", newline="") as handle:
        questions = [row for _, row in zip(range(5), csv.DictReader(handle))]
    expected = []
    for q in questions:
        best = q["Best Answer"].strip()
        expected += [
            (a.strip(), best, "pass") for a in q["Correct Answers"].split(";") if a.strip() and a.strip() != best
        ]
        expected += [(a.strip(), best, "fail") for a in q["Incorrect Answers"].split(";") if a.strip()]
    with out.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["answer"], r["best_answer"], r["label"]) for r in rows] == expected
    assert len({r["id"] for r in rows}) == len(rows)
    passing = sum(label == "pass" for *_, label in expected)
    assert (
        proc.stdout.strip()
        == f"{len(expected)} pairs ({passing} pass, {len(expected) - passing} fail) written to {out}"
    )


@pytest.mark.slow
def test_calibration_never_imports_prefect(tmp_path: Path) -> None:
    """The engine layer calibrates without Prefect (docs/architecture.md#architecture): nothing of it is imported."""
    _write(tmp_path, ROWS, "  - metric: ContainsMetric\n    keywords: [alpha, beta]\n    mode: all\n")
    code = (
        "import sys; from evaltasks.engine.calibration import calibrate_suite; "
        "r = calibrate_suite('suite.yaml', 'human', index_dir='index'); "
        "print(r.metrics[0].cases, sorted(m for m in sys.modules if m.split('.')[0] == 'prefect'))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["11", "[]"]


@pytest.mark.slow
def test_json_labels_and_errored_cases_are_counted(tmp_path: Path) -> None:
    """JSON booleans and integers are labels, null is unlabelled; a case the metric errors on (JSON nested too
    deeply to parse, docs/metrics/index.md#statuses) is left out and counted."""
    rows = [
        {"id": "a", "out": '{"x": 1}', "ok": True},
        {"id": "b", "out": '{"x": "s"}', "ok": False},
        {"id": "c", "out": "[" * 100_000 + "]" * 100_000, "ok": 1},
        {"id": "d", "out": '{"x": 2}', "ok": None},
        {"id": "e", "out": "nope", "ok": 0},
    ]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: json-labels\ndataset:\n  path: data.jsonl\n  fields: {id: id, actual_output: out}\nmetrics:\n"
        "  - metric: JsonSchemaMetric\n    schema: {type: object, properties: {x: {type: integer}}, required: [x]}\n",
        encoding="utf-8",
    )
    proc = _cli(tmp_path, "calibrate", "suite.yaml", "--labels", "ok", "--json", "--index-dir", "index")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    metric = report["metrics"][0]
    assert (report["cases"], report["unlabelled"]) == (5, 1)
    assert (metric["cases"], metric["label_pass"], metric["label_fail"], metric["errored"]) == (3, 1, 2, 1)
    assert metric["roc_auc"] == 1.0 and metric["best_agreement"]["agreed"] == 3
    assert metric["best_agreement"]["threshold"] == 1.0 and metric["suggestion"] is None
    assert report["suggested_yaml"] is None


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.6, 0.6213, 0.62),
        (float("-inf"), 0.3, 0.0),
        (0.56, 0.57, 0.57),
        (0.5699, 0.57, 0.57),
        (0.9, 1.0, 1.0),
        (0.123456, 0.1234567, 0.1234567),
        (0.29, 0.3, 0.3),
        (0.0999, 0.1001, 0.1),
    ],
)
def test_the_shown_threshold_is_the_shortest_decimal_with_the_same_verdicts(
    low: float, high: float, expected: float
) -> None:
    """A threshold in (low, high] gives the verdicts of ``high`` (the candidate score, ``score >= t``); the one
    shown is the shortest such decimal, read back exactly from its text (no exponent: YAML)."""
    from evaltasks.engine.calibration import _number, shortest_decimal

    shown = shortest_decimal(low, high)
    assert shown == expected and low < shown <= high
    assert float(_number(shown)) == shown and "e" not in _number(shown)


@pytest.mark.slow
def test_calibrate_shows_its_stages_on_a_terminal_and_nothing_on_a_pipe(tmp_path: Path) -> None:
    """In a pseudo-terminal, ``evaltasks calibrate`` names the embedding (how many texts, which model) and the
    scoring stage while it works (the real local model, offline); piped, stderr stays empty."""
    from tests.cli.test_terminal import ANSI, _run_in_terminal

    rows = [
        {
            "id": f"c{i}",
            "answer": f"answer number {i} about the sky",
            "refs": ["the sky is blue"],
            "human": "pass" if i % 2 else "fail",
        }
        for i in range(12)
    ]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: stages\ndataset:\n  path: d.jsonl\n  fields: {id: id, actual_output: answer, references: refs}\n"
        "metrics:\n  - {metric: ReferenceMatchMetric, embedding_provider: local}\n",
        encoding="utf-8",
    )
    code, raw = _run_in_terminal(
        ["calibrate", "suite.yaml", "--labels", "human", "--index-dir", "index"], tmp_path, _env(tmp_path), columns=100
    )
    assert code == 0, raw
    shown = ANSI.sub("", raw)  # every frame the terminal got
    assert "embedding 13 texts (all-MiniLM-L6-v2)" in shown, shown  # 12 answers and 1 reference
    assert "scoring 12 cases × 1 metric" in shown, shown
    assert "best agreement threshold" in shown
    piped = _cli(tmp_path, "calibrate", "suite.yaml", "--labels", "human", "--index-dir", "index2")
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr
