"""The engine: what turns results into verdicts — statistics (intervals, paired tests), run history and drift,
threshold calibration. It never imports Prefect; the tasks and flows compose it."""
