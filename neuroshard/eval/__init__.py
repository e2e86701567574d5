"""Evaluation: plans for every task and algorithm (`plans`), the resumable hardware evaluation run
(`hardware`), the comparison and the simulator's accuracy (`summary`), bootstrap intervals and verdicts
(`intervals`), the machine's drift (`drift`), the result files (`results`) and the report (`report`)."""
