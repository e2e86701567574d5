"""Fit TorchRec's estimator to the cost data the neural models train on: the analytic rival of the ablation.

    python fit_torchrec_estimator.py --data_dir results/quick/compute_data --comm_data_dir results/quick/comm_data \\
        --plan_data_dir results/quick/plan_data --out_path results/quick/models/onpolicy/torchrec_estimator_4.json

TorchRec's `EmbeddingPerfEstimator` costs a table-wise or column-wise shard from its input read, lookup,
output and table-size terms and an all-to-all bandwidth (`neuroshard/planner/costs/analytic.py`). This fits
those coefficients (non-negative least squares) to the measured shards of --data_dir (and the on-policy
samples of --plan_data_dir) and the bandwidth to the exchanges of --comm_data_dir, prints them with the
fit's error on held-out shards, and writes the estimator (JSON). `--alg torchrec_fitted` plans with it in
TorchRec's planner, `--alg neuroshard_fitted` in NeuroShard's search (`--torchrec_estimator PATH`).
"""

from __future__ import annotations

import argparse
import sys

from neuroshard.cli import run_main
from neuroshard.settings import add_flag, parse_flags


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Fit TorchRec's estimator to the compute and comm cost data.")
    add_flag(p, "data_dir", required=True, help="compute cost data (collect_compute_cost_data.py's out_dir)")
    p.add_argument("--comm_data_dir", required=True, help="comm cost data (collect_comm_cost_data.py's out_dir)")
    add_flag(p, "plan_data_dir", help="on-policy cost data (collect_plan_cost_data.py's out_dir: its compute/ "
                                      "and comm/ join the fit)")
    add_flag(p, "extra_data_dirs")
    add_flag(p, "out_path", required=True, help="the fitted estimator (JSON; torchrec_estimator_<n>.json)")
    add_flag(p, "test_share", 0.2, help="share of the compute samples held out to report the fit's error")
    add_flag(p, "seed", help="the held-out split")
    return parse_flags(p, argv, __file__)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.checks import check_float, check_output_file, parse_path_list
    from neuroshard.planner.costs.analytic import TERMS
    from neuroshard.train.torchrec_estimator import fit_from_data

    check_float("--test_share", args.test_share, 0.05, 0.9)
    check_output_file("--out_path", args.out_path)
    model = fit_from_data(args.data_dir, args.comm_data_dir, args.plan_data_dir, args.test_share, args.seed,
                          parse_path_list(args.extra_data_dirs, "--extra_data_dirs"))
    c, m = model.fit["compute"], model.fit["comm"]
    print("| term | forward coefficient |\n|---|---|")
    for name, value in zip(TERMS, model.coef):
        print(f"| {name} | {value:.4g} |")
    print(f"all-to-all bandwidth {model.a2a_bw / 1e6:.3g} GB/s (as TorchRec reads it: bytes per ms / 1e6)")
    print(f"compute: held-out MAPE {100 * c['test_mape']:.1f}% (Spearman {c['test_spearman']:.3f}, "
          f"{c['test_samples']} shards), fitted {100 * c['train_mape']:.1f}%; comm: MAPE {100 * m['mape']:.1f}% "
          f"over {m['exchanges']} exchanges")
    model.save(args.out_path)
    print(f"wrote {args.out_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
