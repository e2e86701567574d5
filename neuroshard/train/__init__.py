"""Training of the three cost models: the one training loop, metrics, each model's data glue, and the
held-out-table check of the compute model."""
