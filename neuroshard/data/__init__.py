"""Datasets and tasks: per-table statistics, the public DLRM file, the synthetic generator, task generation."""
