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

One model pair for any world size (--world 1): --data_dir names one
collection per world size (comma list, e.g. comm_2,comm_4,comm_8), the models
(default models/comm_fw.pt, comm_bw.pt) see each rank's exchange and the
world's size (nets.WorldCommModel), and --check_data_dirs judges them on
collections of sizes they never saw, each against its own noise floor:

    python train_comm_cost_model.py --world 1 --data_dir comm_2,comm_4,comm_8 --check_data_dirs comm_3,comm_6
"""

import argparse
from pathlib import Path

from neuroshard.cli import add_progress_arg, run_main
from neuroshard.settings import add_flag, parse_flags
from neuroshard.train.comm_model import train_comm_models
from neuroshard.train.loop import TrainConfig
from neuroshard.train.metrics import format_metrics
from neuroshard.types.errors import ConfigError


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "data_dir", "data/cost_data/comm_4/", help="comm cost data dir (collect_comm_cost_data.py)")
    p.add_argument("--fw_out_path", type=str, default=None, help="default models/comm_<n>_fw.pt")
    p.add_argument("--bw_out_path", type=str, default=None, help="default models/comm_<n>_bw.pt")
    p.add_argument("--fw_wait", type=int, choices=[0, 1], default=1,
                   help="1: the forward model adds each rank's wait for the last rank (max sleep - own sleep) to "
                        "the MLP, which learns the transfer; 0: the MLP learns the whole time (DESIGN §6 as "
                        "written); 1 brings the forward model closer to its noise floor")
    add_flag(p, "bw_linear", help="1: the backward model is linear in the per-device dim sums (one n x n layer), "
                                  "fitted on the squared error (--loss is for the other model); 0: DESIGN §6's MLP "
                                  "(128, 64, 32, 16). The linear model has the same held-out error and no dips fitted "
                                  "into the noisy backward times for a search to find. Unset: 1, and 0 with --world 1 "
                                  "(a network: see train/comm_model.world_settings)")
    p.add_argument("--fw_inputs", choices=["waits", "sleeps"], default="waits",
                   help="what the forward model's MLP sees beside the dims: each rank's wait for the last rank "
                        "(max sleep - own sleep) or its sleep (DESIGN §6); waits cut the per-rank forward error and "
                        "its bias on plans whose ranks are ready nearly together (nets.CommCostModel)")
    add_flag(p, "plan_data_dir")
    p.add_argument("--world", type=int, choices=[0, 1], default=0,
                   help="1: one forward and one backward model for any world size, trained on the collections of "
                        "--data_dir (a comma list, one world size each)")
    add_flag(p, "check_data_dirs", help="with --world 1: comm collections of world sizes the models may never have "
                                        "seen (comma list), each judged against its own noise floor")
    TrainConfig.add_args(p)
    add_progress_arg(p)
    args = parse_flags(p, argv, __file__)

    cfg = TrainConfig.from_args(args)
    if args.world:
        return _world(args, cfg)
    if args.check_data_dirs:
        raise ConfigError("--check_data_dirs", "judges a model for any world size: add --world 1")
    if "," in args.data_dir:
        raise ConfigError("--data_dir", f"{args.data_dir!r} names several collections: one world size's models "
                                        "train on one (or add --world 1 for one model of every world size)")
    results = train_comm_models(args.data_dir, cfg, args.fw_out_path, args.bw_out_path, fw_wait=bool(args.fw_wait),
                                progress=not args.no_progress, plan_data_dir=args.plan_data_dir,
                                bw_linear=args.bw_linear != 0, fw_wait_inputs=args.fw_inputs == "waits")
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



def _world(args, cfg) -> None:
    """--world 1: one model pair over the collections of --data_dir, judged on --check_data_dirs."""
    from neuroshard.formats.io import load_json, write_json_atomic
    from neuroshard.train.comm_model import check_world_comm_model, train_world_comm_models

    if args.plan_data_dir:
        raise ConfigError("--plan_data_dir", "on-policy samples are of one world size: train its own models")
    dirs = [d for d in args.data_dir.split(",") if d]
    results = train_world_comm_models(dirs, cfg, args.fw_out_path, args.bw_out_path, progress=not args.no_progress,
                                      bw_linear=args.bw_linear == 1)
    checks = [d for d in (args.check_data_dirs or "").split(",") if d]
    for kind, res in results.items():
        name = "forward" if kind == "fw" else "backward"
        print(f"{name} comm model (world sizes {res['sizes']}, {res['num_samples']} samples, best epoch "
              f"{res['best_epoch']})")
        print(format_metrics(res["metrics"]))
        for k, row in res["by_size"].items():
            floor = "" if row["floor"] is None else (f" vs noise floor {100 * row['floor']:.2f}% "
                                                     f"({row['over_floor']:.2f}x)")
            print(f"  {k} ranks: test MAPE {100 * row['mape']:.2f}%{floor} ({row['samples']} samples)")
        if checks:
            from neuroshard.planner.costs.cost_models import load_model

            model = load_model(res["checkpoint"])
            res["checks"] = [check_world_comm_model(model, d, kind) for d in checks]
            for row in res["checks"]:
                floor = "" if row["floor"] is None else (f" vs noise floor {100 * row['floor']:.2f}% "
                                                         f"({row['over_floor']:.2f}x)")
                print(f"  held out, {row['ndevices']} ranks ({row['data_dir']}): MAPE {100 * row['mape']:.2f}%"
                      f"{floor}")
            metrics = load_json(Path(res["metrics_path"]))
            write_json_atomic(res["metrics_path"], {**metrics, "checks": res["checks"]})
        print(f"model {res['checkpoint']}; scatter {res['scatter']}; metrics {res['metrics_path']}")


if __name__ == "__main__":
    run_main(main)
