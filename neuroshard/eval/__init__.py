"""Evaluation: plans for every task and algorithm, their simulated and measured costs, results,
the report and the one-command pipeline."""
