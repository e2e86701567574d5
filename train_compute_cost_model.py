"""Train the compute cost model on collected compute cost data (DESIGN.md §6).

    python train_compute_cost_model.py --data_dir data/cost_data/compute --out_path models/compute.pt

Writes the checkpoint (--out_path, self-describing), a predicted-vs-measured
scatter of the test split (<out_path stem>_test_scatter.png) and the metrics
(<out_path stem>_metrics.json) next to it. If the data dir holds a
noise_floor.json (compute_noise_floor.py), the test MAPE is shown next
to it: no model can beat the measurement noise. The loss is the absolute
relative error in batches of 128 by default (`--loss rel_mse --batch_size
512` trains as the comm models do).
"""

import argparse

from neuroshard.checks import parse_path_list
from neuroshard.cli import add_progress_arg, run_main
from neuroshard.settings import add_flag, parse_flags
from neuroshard.train.compute_model import TRAIN_DEFAULTS, train_compute_model
from neuroshard.train.loop import TrainConfig
from neuroshard.train.metrics import format_metrics


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "data_dir", "data/cost_data/compute/", help="compute cost data dir (collect_compute_cost_data.py)")
    add_flag(p, "out_path", "models/compute.pt", help="checkpoint to write")
    add_flag(p, "plan_data_dir")
    add_flag(p, "extra_data_dirs")
    TrainConfig.add_args(p, defaults=TRAIN_DEFAULTS)
    add_progress_arg(p)
    args = parse_flags(p, argv, __file__)

    cfg = TrainConfig.from_args(args)
    result = train_compute_model(args.data_dir, cfg, args.out_path, progress=not args.no_progress,
                                 plan_data_dir=args.plan_data_dir,
                                 extra_data_dirs=parse_path_list(args.extra_data_dirs, "--extra_data_dirs"))
    print(format_metrics(result["metrics"]))
    print(f"best epoch {result['best_epoch']}; model {args.out_path}; scatter {result['scatter']}; "
          f"metrics {result['metrics_path']}")
    if "noise_floor" in result:
        nf = result["noise_floor"]
        ci = result.get("mape_over_floor")
        ratio = f"; {ci['ratio']:.2f}x ({ci['low']:.2f}-{ci['high']:.2f}, 95%)" if ci else ""
        print(f"test MAPE {100 * result['metrics']['test']['mape']:.2f}% vs noise floor "
              f"{100 * nf['mean']:.2f}% (mean |re-measured - stored| / stored; median {100 * nf['median']:.2f}%)"
              f"{ratio}")


if __name__ == "__main__":
    run_main(main)
