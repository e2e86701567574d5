"""The planner: cost-model inference, the simulator, NeuroShard's search, the baselines, the registry.

Imports without torch: the cost models are torch modules (`nets`) only once loaded
(`cost_models.CostModels.load`), and the search evaluates them as NumPy copies (`scorer`).
"""
