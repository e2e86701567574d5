"""Train the forward and backward comm cost models (DESIGN.md §6).

    python train_comm_cost_model.py --data_dir data/cost_data/comm_4 \
        --fw_out_path models/comm_4_fw.pt --bw_out_path models/comm_4_bw.pt

Forward model: per-device dims + sleeps -> per-device forward all-to-all ms;
backward model: dims -> backward ms. Each checkpoint records `ndevices`
(loading it for another device count is an error) and gets a test scatter
(<stem>_test_scatter.png) and metrics (<stem>_metrics.json: MSE, MAPE,
Spearman per split) beside it. If the data dir holds a noise_floor.json
(collect_comm_cost_data.py --noise_floor N), the test MAPE is printed next to
it: no model can beat the measurement noise.
"""

import argparse

from neuroshard.cli import run_main
from neuroshard.train.comm import train_comm_models
from neuroshard.train.loop import TrainConfig
from neuroshard.train.metrics import format_metrics


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data_dir", type=str, default="data/cost_data/comm_4/")
    p.add_argument("--fw_out_path", type=str, default=None, help="default models/comm_<n>_fw.pt")
    p.add_argument("--bw_out_path", type=str, default=None, help="default models/comm_<n>_bw.pt")
    TrainConfig.add_args(p)
    args = p.parse_args(argv)

    cfg = TrainConfig.from_args(args)
    results = train_comm_models(args.data_dir, cfg, args.fw_out_path, args.bw_out_path)
    for kind, res in results.items():
        name = "forward" if kind == "fw" else "backward"
        print(f"{name} comm model ({res['ndevices']} devices, {res['num_samples']} samples, "
              f"best epoch {res['best_epoch']})")
        print(format_metrics(res["metrics"]))
        nf = res.get("noise_floor")
        if nf:
            print(f"test MAPE {100 * res['metrics']['test']['mape']:.2f}% vs noise floor "
                  f"{100 * nf['mean']:.2f}% (mean |re-measured - recorded| / recorded; "
                  f"median {100 * nf['median']:.2f}%)")
        print(f"model {res['checkpoint']}; scatter {res['scatter']}; metrics {res['metrics_path']}")


if __name__ == "__main__":
    run_main(main)
