"""NeuroShard: embedding table sharding with pre-trained neural cost models."""

__version__ = "0.1.0"
