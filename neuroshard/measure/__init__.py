"""Measurement on hardware: the timing helper, the FBGEMM compute and all-to-all benchmarks,
the torchrun launcher, the worker pool and the cost-data collections."""
