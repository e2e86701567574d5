"""Unpooled (sequence) against pooled FBGEMM kernel time of the same shards: the ratio that prices unpooled compute.

    python benchmarks/bench_unpooled_compute.py --dataset_dir DS --num_shards 50 --out_json unpooled.json

Per shard (a seeded draw of 1 to `--tables_per_shard` dataset tables with at least one lookup per sample, each with a
dim of 16, 32, 64 or 128), the real kernel benchmark (`measure.kernel.ShardBenchmark`, forward and backward, CPU
clock, one thread) times the tables pooled (one embedding-bag op) and unpooled (`PoolingMode.NONE`, one op per
dim, as an EmbeddingCollection runs them) side by side, in alternating order, so that a slow spell of the machine
hits both. Printed: each shard's ratio unpooled / pooled, and over the shards the median ratio with its 95%
bootstrap interval, the 5th-95th percentile of the ratios, and the error of the planner's ratio
(`planner.costs.features.unpooled_ratio`, per table; a shard's the tables' ratios weighted by their floats read
per sample) as a predictor of the unpooled time from the pooled one: its mean absolute percentage error with a
95% bootstrap interval. `--fit` (with `--tables_per_shard 1`) fits `features.UNPOOLED_RATIO`, ln ratio = a +
b ln(max(pooling factor, 1)) + c bin_0 by least squares, and prints it with its leave-one-out error.

    python benchmarks/bench_unpooled_compute.py --dataset_dir DS --num_shards 60 --tables_per_shard 1 --seed 1 --fit
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

import numpy as np

from neuroshard.cli import run_main
from neuroshard.settings import add_flag, parse_flags

DIMS = (16, 32, 64, 128)


def median_interval(x, draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The median of `x` with its 95% bootstrap interval."""
    x = np.asarray(x, dtype=np.float64)
    rng = np.random.default_rng(seed)
    meds = np.median(x[rng.integers(0, len(x), (draws, len(x)))], axis=1)
    return float(np.median(x)), float(np.quantile(meds, 0.025)), float(np.quantile(meds, 0.975))


def fit_ratio(configs, ratios) -> dict:
    """ln ratio = a + b ln(max(pooling factor, 1)) + c bin_0 by least squares over single-table shards: the
    coefficients and the leave-one-out mean absolute percentage error of the ratio."""
    x = np.array([[1.0, np.log(max(c.pooling_factor, 1.0)), c.bins[0]] for c in configs])
    y = np.log(np.asarray(ratios, dtype=np.float64))
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    loo = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        w = np.linalg.lstsq(x[keep], y[keep], rcond=None)[0]
        loo.append(abs(np.exp(x[i] @ w - y[i]) - 1))
    return {"coef": coef.tolist(), "loo_mape": float(np.mean(loo))}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "dataset_dir", help="dataset whose tables and lookups the shards use")
    p.add_argument("--num_shards", type=int, default=50, help="shards to time (default: 50)")
    p.add_argument("--tables_per_shard", type=int, default=4, help="most tables per shard (default: 4)")
    add_flag(p, "iters", 10, help="timed iterations per shard and kind")
    p.add_argument("--fit", action="store_true", help="fit the per-table ratio (needs --tables_per_shard 1)")
    add_flag(p, "seed", 0)
    add_flag(p, "out_json")
    args = parse_flags(p, argv, __file__)
    if args.fit and args.tables_per_shard != 1:
        p.error("--fit needs shards of one table (--tables_per_shard 1)")

    import torch

    from neuroshard.formats.dataset import read_dataset
    from neuroshard.measure.kernel import BenchTable, ShardBenchmark
    from neuroshard.planner.costs.features import unpooled_ratio

    torch.set_num_threads(1)
    dataset = read_dataset(args.dataset_dir)
    busy = [t for t, c in enumerate(dataset.configs) if c.pooling_factor >= 1.0]
    rng = np.random.default_rng(args.seed)
    bench = ShardBenchmark(dataset, warmup=3, iters=args.iters, clock="cpu", seed=args.seed)
    bench.prefault()
    rows = []
    for k in range(args.num_shards):
        ids = rng.choice(busy, size=int(rng.integers(1, args.tables_per_shard + 1)), replace=False)
        pooled = [BenchTable(dataset.configs[t].row, int(rng.choice(DIMS)), int(t)) for t in ids]
        unpooled = [replace(t, pooled=False) for t in pooled]
        times = {}
        for kind, tables in (("pooled", pooled), ("unpooled", unpooled))[::1 if k % 2 else -1]:
            times[kind] = bench.measure(tables).median_ms
        configs = [dataset.configs[t.table_id] for t in pooled]
        lookups = sum(c.pooling_factor for c in configs)
        floats = np.array([c.pooling_factor * t.dim for c, t in zip(configs, pooled)])
        predicted = float((floats / floats.sum()) @ [unpooled_ratio(c) for c in configs])
        row = {"shard": k, "tables": [[t.table_id, t.rows, t.dim] for t in pooled], "lookups_per_sample": lookups,
               "floats_per_sample": float(floats.sum()), **{f"{kind}_ms": ms for kind, ms in times.items()},
               "ratio": times["unpooled"] / times["pooled"], "predicted_ratio": predicted}
        rows.append(row)
        print(f"shard {k}: {len(pooled)} tables, {lookups:.1f} lookups/sample: pooled {times['pooled']:.3f} ms, "
              f"unpooled {times['unpooled']:.3f} ms, ratio {row['ratio']:.3f}", flush=True)
    ratios = np.array([r["ratio"] for r in rows])
    med, lo, hi = median_interval(ratios, seed=args.seed)
    corr = float(np.corrcoef(ratios, [r["lookups_per_sample"] for r in rows])[0, 1]) if len(rows) > 2 else None
    ape = np.array([abs(r["predicted_ratio"] / r["ratio"] - 1) for r in rows])
    boot = np.random.default_rng(args.seed).integers(0, len(ape), (2000, len(ape)))
    mape = [float(ape.mean()), *np.quantile(ape[boot].mean(axis=1), [0.025, 0.975]).tolist()]
    summary = {"shards": len(rows), "median_ratio": med, "median_ci95": [lo, hi],
               "p5_p95": [float(np.quantile(ratios, 0.05)), float(np.quantile(ratios, 0.95))],
               "corr_with_lookups": corr, "unpooled_ratio_mape": mape}
    print(f"unpooled / pooled over {len(rows)} shards: median {med:.3f} (95% CI {lo:.3f}-{hi:.3f}), 5th-95th "
          f"percentile {summary['p5_p95'][0]:.3f}-{summary['p5_p95'][1]:.3f}, correlation with lookups per "
          f"sample {corr if corr is None else round(corr, 3)}")
    print(f"the planner's ratio (features.unpooled_ratio) predicting the unpooled time from the pooled: MAPE "
          f"{100 * mape[0]:.1f}% (95% CI {100 * mape[1]:.1f}-{100 * mape[2]:.1f}%)")
    if args.fit:
        summary["fit"] = fit_ratio([dataset.configs[r["tables"][0][0]] for r in rows], ratios)
        print(f"fit: UNPOOLED_RATIO = ({', '.join(f'{w:.3f}' for w in summary['fit']['coef'])}), leave-one-out "
              f"MAPE {100 * summary['fit']['loo_mape']:.1f}%")
    if args.out_json:
        from neuroshard.formats.io import write_json_atomic

        write_json_atomic(args.out_json, {"settings": vars(args), "shards": rows, "summary": summary})
    else:
        json.dump(summary, sys.stdout, indent=1)


if __name__ == "__main__":
    sys.exit(run_main(main))
