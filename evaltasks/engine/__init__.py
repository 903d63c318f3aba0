"""The engine: what turns results into verdicts — a run's life and its typed outcome (:mod:`.lifecycle`,
:mod:`.outcome`), statistics (intervals, paired tests), run history and drift, threshold calibration. It never
imports Prefect; the tasks and flows compose it."""
