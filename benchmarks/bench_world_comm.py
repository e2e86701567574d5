"""The comm models for any world size against one model per world size, on the same held-out samples.

    python benchmarks/bench_world_comm.py --data_dirs comm_2,comm_3,comm_4,comm_6,comm_8 --train_sizes 2,4,8 \
        --seeds 0,1,2 --out_json world_comm.json

Each collection (`collect_collective_cost_data.py` for one world size, with its noise floor) is cut by a seeded
permutation into a test part (`--held_share`) and the rest. Per seed: a forward and a backward model per world
size of `--train_sizes` on the rest of its own collection (`train_comm_cost_model.py`'s settings), and one pair
for any world size on the rest of all of them (`--world 1`'s); both judged on each trained size's test part,
and the world models on every sample of the sizes they never saw. Printed per direction and size: each one's
MAPE (mean over seeds), the world model's over the per-size model's (its 95% bootstrap interval over the test
samples, seeds pooled) and over the collection's noise floor (the same). The targets: at held-out sizes at most
1.2x the floor; at trained ones at most 1.05x the per-size models.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from neuroshard.cli import run_main
from neuroshard.settings import add_flag, parse_flags


def ratio_of_means(a, b, draws: int = 2000, seed: int = 0) -> dict:
    """mean(a) / mean(b) of paired per-sample errors with a 95% bootstrap interval (pairs resampled)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), (draws, len(a)))
    ratios = a[idx].mean(1) / np.maximum(b[idx].mean(1), 1e-12)
    return {"ratio": float(a.mean() / max(b.mean(), 1e-12)), "low": float(np.percentile(ratios, 2.5)),
            "high": float(np.percentile(ratios, 97.5))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data_dirs", required=True, help="comma list of comm collections, one world size each")
    p.add_argument("--train_sizes", required=True, help="the world sizes trained on (comma list); the others held out")
    p.add_argument("--seeds", default="0,1,2", help="splits and initialisations (comma list)")
    p.add_argument("--held_share", type=float, default=0.2, help="of each trained collection, held out for testing")
    p.add_argument("--max_epochs", type=int, default=1000, help="at most (early stopping on validation)")
    add_flag(p, "bw_linear", help="1: the backward model for any world size linear in its features, on the "
                                  "squared error (the per-size ones keep their own setting)")
    add_flag(p, "out_json")
    args = parse_flags(p, argv, __file__)

    import torch

    from neuroshard.formats.cost_data import read_comm_data
    from neuroshard.numerics import rel_errors
    from neuroshard.train.comm_model import (
        build_model,
        build_world_model,
        comm_tensors,
        floor_values,
        per_count_settings,
        world_settings,
        world_tensors,
    )
    from neuroshard.train.loop import TrainConfig, train_model
    from neuroshard.train.metrics import ratio_interval
    from neuroshard.types.errors import ConfigError

    torch.set_num_threads(1)
    dirs = [d for d in args.data_dirs.split(",") if d]
    data = {}
    for d in dirs:
        samples = read_comm_data(d)
        data[samples[0].ndevices] = (d, samples)
    train_sizes = [int(k) for k in args.train_sizes.split(",")]
    if not set(train_sizes) <= set(data):
        raise ConfigError("--train_sizes", f"{train_sizes}: the collections have {sorted(data)}")
    held_sizes = sorted(set(data) - set(train_sizes))
    errors = {kind: {"per": {k: [] for k in train_sizes}, "world": {k: [] for k in data}} for kind in ("fw", "bw")}
    for seed in [int(s) for s in args.seeds.split(",")]:
        cfg = TrainConfig(epochs=args.max_epochs, seed=seed, train_ratio=0.875, valid_ratio=0.12,  # of the rest
                          loss="rel_mse")
        rest, test = {}, {}
        for k in train_sizes:
            samples = data[k][1]
            perm = np.random.default_rng([seed, k]).permutation(len(samples))
            cut = int(round(len(samples) * args.held_share))
            test[k], rest[k] = [samples[i] for i in perm[:cut]], [samples[i] for i in perm[cut:]]
        for kind in ("fw", "bw"):
            # each model as train_comm_cost_model.py trains it, one per world size or one for any
            for k in train_sizes:
                x, y = comm_tensors(rest[k], kind)
                torch.manual_seed(seed)
                settings = per_count_settings(kind, cfg)
                model = build_model(kind, k, x, settings.get("wait_term", False), settings["hidden"],
                                    settings.get("wait_inputs", False))
                train_model(model, (x,), y, settings["cfg"], progress=False)
                xt, yt = comm_tensors(test[k], kind)
                with torch.no_grad():
                    errors[kind]["per"][k] += rel_errors(model(xt).numpy(), yt.numpy()).tolist()
            pooled = [s for k in train_sizes for s in rest[k]]
            x, counts, y = world_tensors(pooled, kind)
            torch.manual_seed(seed)
            hidden, wcfg = world_settings(kind, cfg, args.bw_linear == 1)
            world = build_world_model(kind, x, counts, hidden, train_sizes)
            train_model(world, (x, counts), y, wcfg, progress=False)
            for k in data:
                judged = test[k] if k in train_sizes else data[k][1]
                xt, ct, yt = world_tensors(judged, kind)
                with torch.no_grad():
                    errors[kind]["world"][k] += rel_errors(world(xt, ct).numpy(), yt.numpy()).tolist()
            print(f"seed {seed} {kind} done", file=sys.stderr)
    out = {"data_dirs": dirs, "train_sizes": train_sizes, "held_sizes": held_sizes, "seeds": args.seeds,
           "results": {}}
    for kind in ("fw", "bw"):
        print(f"{'forward' if kind == 'fw' else 'backward'} all-to-all:")
        rows = {}
        for k in sorted(data):
            world = errors[kind]["world"][k]
            floor = floor_values(data[k][0], kind)
            row = {"world_mape": float(np.mean(world)), "samples": len(world)}
            if floor:
                row["floor"] = float(np.mean(floor))
                row["world_over_floor"] = ratio_interval(world, floor)
            if k in train_sizes:
                per = errors[kind]["per"][k]
                row["per_size_mape"] = float(np.mean(per))
                row["world_over_per_size"] = ratio_of_means(world, per)
            rows[str(k)] = row
            where = "trained" if k in train_sizes else "held out"
            text = f"  {k} ranks ({where}): world {100 * row['world_mape']:.1f}%"
            if "per_size_mape" in row:
                r = row["world_over_per_size"]
                text += (f", per size {100 * row['per_size_mape']:.1f}% (world / per size {r['ratio']:.2f}, "
                         f"{r['low']:.2f}-{r['high']:.2f})")
            if "floor" in row:
                r = row["world_over_floor"]
                text += (f"; floor {100 * row['floor']:.1f}% (world / floor {r['ratio']:.2f}, "
                         f"{r['low']:.2f}-{r['high']:.2f})")
            print(text)
        out["results"][kind] = rows
    if args.out_json:
        from neuroshard.formats.io import write_json_atomic

        write_json_atomic(args.out_json, out)
    return 0


if __name__ == "__main__":
    run_main(main)
