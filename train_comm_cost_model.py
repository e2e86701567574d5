"""Train the forward and backward comm cost models (DESIGN.md §6).

    python train_comm_cost_model.py --data_dir data/cost_data/comm_4 \
        --fw_out_path models/comm_4_fw.pt --bw_out_path models/comm_4_bw.pt

Forward model: per-device dims + sleeps -> per-device forward all-to-all ms
(by default the wait for the last rank, max sleep - own sleep, is added
analytically and the MLP learns the transfer: --fw_wait 0 for DESIGN's plain
MLP; by default the MLP sees those waits, not the sleeps: --fw_inputs sleeps
for DESIGN's inputs); backward model: dims -> backward ms, linear in them and fitted on the squared
error by default (--bw_linear 0 for DESIGN's MLP). The loss is the squared relative
error by default (--loss mse for DESIGN's). Each checkpoint records `ndevices`
(loading it for another device count is an error) and gets a test scatter
(<stem>_test_scatter.png) and metrics (<stem>_metrics.json: MSE, MAPE,
Spearman per split) beside it. If the data dir holds a noise_floor.json
(collect_comm_cost_data.py --noise_floor N), the test MAPE is printed next to
it: no model can beat the measurement noise.
"""

import argparse

from neuroshard.cli import add_progress_arg, run_main
from neuroshard.settings import add_flag, parse_flags
from neuroshard.train.comm_model import train_comm_models
from neuroshard.train.loop import TrainConfig
from neuroshard.train.metrics import format_metrics


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "data_dir", "data/cost_data/comm_4/", help="comm cost data dir (collect_comm_cost_data.py)")
    p.add_argument("--fw_out_path", type=str, default=None, help="default models/comm_<n>_fw.pt")
    p.add_argument("--bw_out_path", type=str, default=None, help="default models/comm_<n>_bw.pt")
    p.add_argument("--fw_wait", type=int, choices=[0, 1], default=1,
                   help="1: the forward model adds each rank's wait for the last rank (max sleep - own sleep) to "
                        "the MLP, which learns the transfer; 0: the MLP learns the whole time (DESIGN §6 as "
                        "written); 1 brings the forward model closer to its noise floor")
    p.add_argument("--bw_linear", type=int, choices=[0, 1], default=1,
                   help="1: the backward model is linear in the per-device dim sums (one n x n layer), fitted on "
                        "the squared error (--loss is for the other model); 0: DESIGN §6's MLP (128, 64, 32, 16). "
                        "The linear model has the same held-out error and no dips fitted into the noisy backward "
                        "times for a search to find")
    p.add_argument("--fw_inputs", choices=["waits", "sleeps"], default="waits",
                   help="what the forward model's MLP sees beside the dims: each rank's wait for the last rank "
                        "(max sleep - own sleep) or its sleep (DESIGN §6); waits cut the per-rank forward error and "
                        "its bias on plans whose ranks are ready nearly together (nets.CommCostModel)")
    add_flag(p, "plan_data_dir")
    TrainConfig.add_args(p)
    add_progress_arg(p)
    args = parse_flags(p, argv, __file__)

    cfg = TrainConfig.from_args(args)
    results = train_comm_models(args.data_dir, cfg, args.fw_out_path, args.bw_out_path, fw_wait=bool(args.fw_wait),
                                progress=not args.no_progress, plan_data_dir=args.plan_data_dir,
                                bw_linear=bool(args.bw_linear), fw_wait_inputs=args.fw_inputs == "waits")
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
