"""The learned baselines, DreamShard (NeurIPS 2022) and AutoShard (KDD 2022): their sharders (registered
without torch), policies and checkpoints, networks, RL estimators, the oracle they train against, and
their training (what train_dreamshard.py / train_autoshard.py run)."""
