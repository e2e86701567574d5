"""Training of the three cost models: the one training loop, metrics, and each model's data glue."""
