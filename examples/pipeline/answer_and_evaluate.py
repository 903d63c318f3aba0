"""Someone else's pipeline with an evaluation step: generate answers → evaluate → branch on the pass rate.

It shows evaltasks' tasks dropped into an existing Prefect flow: ``evaluate_test_cases`` scores many cases
with many metrics in one task run, ``publish_results`` writes the reports and the Prefect artifacts and
applies the gate. Run it: ``.venv/bin/python examples/pipeline/answer_and_evaluate.py``.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task

from evaltasks import EvalTestCase, LengthCheckMetric, ReferenceMatchMetric
from evaltasks.tasks import evaluate_test_cases, publish_results

QUESTIONS = {
    "What is the capital of France?": ["Paris is the capital of France."],
    "How many planets are in the Solar System?": ["The Solar System has eight planets."],
    "Who first walked on the Moon?": ["Neil Armstrong, in July 1969."],
    "What is the speed of light?": ["Light travels at about 299,792 kilometres per second in a vacuum."],
}

# A stand-in for the team's model call (no LLM is reachable here): canned answers, one of them off-topic.
CANNED_ANSWERS = {
    "What is the capital of France?": "The capital of France is Paris.",
    "How many planets are in the Solar System?": "There are eight planets in the Solar System.",
    "Who first walked on the Moon?": "Neil Armstrong was the first person on the Moon, in 1969.",
    "What is the speed of light?": "Our company was founded in 2020 and is based in San Francisco.",
}


@task(name="generate-answers")
def generate_answers(questions: list[str]) -> list[str]:
    """The pipeline's own generation step (here: canned answers)."""
    return [CANNED_ANSWERS[q] for q in questions]


@task(name="promote-model")
def promote(pass_rate: float) -> str:
    """What the pipeline does when the evaluation passes."""
    return f"promoted (pass rate {pass_rate:.0%})"


@task(name="open-incident")
def open_incident(pass_rate: float) -> str:
    """What the pipeline does when the evaluation fails."""
    return f"incident opened (pass rate {pass_rate:.0%})"


@flow(name="answer-and-evaluate")
def answer_and_evaluate(min_pass_rate: float = 0.75, output_dir: str | None = None) -> dict:
    """Generate answers, evaluate them with evaltasks' tasks, then promote or open an incident.

    Returns ``{"decision", "pass_rate", "passed", "artifacts"}``.
    """
    questions = list(QUESTIONS)
    answers = generate_answers(questions)
    cases = [EvalTestCase(input=q, actual_output=a, references=QUESTIONS[q]) for q, a in zip(questions, answers)]
    metrics = [
        ReferenceMatchMetric(threshold=0.6, embedding_provider="local"),
        LengthCheckMetric(max_length=40, unit="words"),
    ]
    result = evaluate_test_cases(cases, metrics)
    published = publish_results(result, "answer-and-evaluate", output_dir=output_dir, min_pass_rate=min_pass_rate)
    decision = promote(published["pass_rate"]) if published["passed"] else open_incident(published["pass_rate"])
    get_run_logger().info("Decision: %s", decision)
    return {"decision": decision, **published}


if __name__ == "__main__":
    print(answer_and_evaluate())
