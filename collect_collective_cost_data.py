"""Time the collectives of row-wise and data-parallel tables on real ranks and fit their cost model.

    python collect_collective_cost_data.py --device cpu --ndevices 4 --data_size 240 --noise_samples 30 \
        --out_dir results/quick/collective_data --out_path results/quick/models/collectives_4.json

A row-wise table's ranks reduce-scatter its B x dim partial sums forward and
all-gather the gradient backward; a data-parallel table's gradient, rows x
dim, is all-reduced backward (neuroshard/measure/collectives.py). Samples
cycle through the three collectives, with sizes drawn over what the plans
send (B x d for d up to --max_dim; up to --max_numel elements all-reduced),
and are timed on --ndevices ranks in one torchrun job (each sample: the ranks'
mean ms), appended to OUT_DIR/data.jsonl as they arrive; the first
--noise_samples are timed again at the job's end (noise.jsonl: the noise floor).
With --local_world_size K (ranks per host, fewer than --ndevices), as many
samples again run over each host's group of K ranks, as table-row-wise tables
do, one host at a time (on one machine two hosts' groups at once would share
its cores, which separate hosts do not), after the others (a collection without
them is extended, not redrawn), and are fitted apart (the fits `op@K`).
Then each collective's model, linear (a + b N), power (c N^p) or hinge (a
bandwidth that drops past a size), whichever predicts held-out samples better
(--folds cross-validation), is written to --out_path with each form's held-out
MAPE beside the noise floor (neuroshard/planner/costs/collective_model.py).

One model for any world size: --world_data_dirs names finished collections of
other sizes; the model fitted over them and this one (world_linear or
world_hinge: the group's size an input) prices every size between, and
--check_data_dirs judges it on collections it never saw, each against its own
noise floor:

    python collect_collective_cost_data.py --ndevices 8 --out_dir coll_8 --world_data_dirs coll_2,coll_4 \
        --check_data_dirs coll_3,coll_6 --out_path models/collectives.json

Interrupted? Rerun the same command: the samples already in OUT_DIR are kept.
"""

from __future__ import annotations

import argparse
import sys

from neuroshard.cli import run_main
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags


def parse_args(argv=None) -> argparse.Namespace:
    from neuroshard.cli import add_device_arg, add_progress_arg

    p = argparse.ArgumentParser(description="Time the collectives of spread tables and fit their cost model.")
    # the ranks and their hosts; the seed of the sizes and of the held-out samples
    Problem.add_args(p, skip=("max_mem",), helps={"local_world_size": "ranks per host: the collectives also timed "
                                                                      "over each host's group (table-row-wise)"})
    add_flag(p, "gpu_devices")
    add_device_arg(p)
    add_flag(p, "data_size", 240, help="samples (the three collectives in turn)")
    p.add_argument("--noise_samples", type=int, default=30,
                   help="the first N samples timed again afterwards: the noise floor (default: 30)")
    add_flag(p, "batch_size", 4096, help="the global batch B of the row-wise collectives (the dataset's)")
    add_flag(p, "max_dim", 2048, help="largest dim sum d of a row-wise group's B x d collectives")
    p.add_argument("--max_numel", type=int, default=2 ** 24,
                   help="largest all-reduce, in fp32 elements: the largest data-parallel table (rows x dim; "
                        "default 2^24, 1/16 of a 1 GB device)")
    add_flag(p, "warmup", 3)
    add_flag(p, "iters", 7)
    add_flag(p, "folds", 4, help="cross-validation folds: each form judged on every sample by a fit without it")
    add_flag(p, "out_dir", required=True, help="where the samples go (data.jsonl, noise.jsonl)")
    add_flag(p, "out_path", required=True, help="the fitted model (collectives_<ndevices>.json)")
    p.add_argument("--world_data_dirs", default=None,
                   help="comma list of finished collections of other world sizes: fit one model for any world size "
                        "over them and this one (collectives.json)")
    add_flag(p, "check_data_dirs", help="with --world_data_dirs: finished collections of world sizes the model may "
                                        "never have seen (comma list), each judged against its own noise floor")
    add_progress_arg(p)
    return parse_flags(p, argv, __file__)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.checks import check_int, check_output_file
    from neuroshard.cli import resolve_devices, resolve_ranks
    from neuroshard.formats.io import write_json_atomic
    from neuroshard.measure import collectives
    from neuroshard.planner.costs.collective_model import (
        FORMS,
        WORLD_FORMS,
        check_collectives,
        fit_collectives,
        fit_world_collectives,
    )
    from neuroshard.types.errors import ConfigError, InputError

    device, ndevices = resolve_ranks(resolve_devices(args.device, args.gpu_devices), args.ndevices, args.gpu_devices)
    if ndevices < 2:
        raise ConfigError("--ndevices", f"a collective needs at least 2 ranks, got {ndevices}")
    problem = Problem.from_args(args, ndevices=ndevices)
    check_int("--data_size", args.data_size, 12)
    check_int("--noise_samples", args.noise_samples, 0, args.data_size)
    check_int("--batch_size", args.batch_size, ndevices)
    if problem.local_world_size == 1:
        raise ConfigError("--local_world_size", "1 rank per host has no collective within a host: give 2 or more")
    check_int("--max_dim", args.max_dim, 4)
    check_int("--max_numel", args.max_numel, 1000)
    check_int("--warmup", args.warmup, 0)
    check_int("--iters", args.iters, 1)
    check_int("--folds", args.folds, 2, args.data_size)
    check_output_file("--out_path", args.out_path)
    samples = collectives.draw_samples(args.data_size, ndevices, args.batch_size, args.max_dim, args.max_numel,
                                       problem.seed, problem.local_world_size)
    write_json_atomic(f"{args.out_dir}/config.json", {k: v for k, v in vars(args).items() if k != "no_progress"}
                      | {"device": device, "ndevices": ndevices})
    rows, again = collectives.collect(args.out_dir, samples, ndevices, warmup=args.warmup, iters=args.iters,
                                      device=device, gpu_devices=args.gpu_devices, noise_samples=args.noise_samples,
                                      progress=not args.no_progress)
    others = [d for d in (args.world_data_dirs or "").split(",") if d]
    if args.check_data_dirs and not others:
        raise ConfigError("--check_data_dirs", "judges a model for any world size: add --world_data_dirs")
    try:
        if others:
            model = fit_world_collectives([(ndevices, rows, again), *(collectives.read_collection(d) for d in others)],
                                          args.folds, problem.seed)
        else:
            model = fit_collectives(rows, ndevices, args.folds, problem.seed, again)
    except ValueError as e:
        raise InputError(f"{args.out_dir}/{collectives.DATA_FILE}", str(e)) from None
    model.save(args.out_path)
    forms = WORLD_FORMS if others else FORMS
    print(f"| collective (@ ranks per host group) | form | samples | "
          f"{' | '.join(f'held-out MAPE {f}' for f in forms)} | noise floor |\n"
          f"|---|---|---|{'---|' * len(forms)}---|")
    for op, fit in model.fits.items():
        floor = "-" if fit.noise_floor is None else f"{fit.noise_floor:.1f}%"
        print(f"| {op} | {fit.form} | {fit.samples} | {' | '.join(f'{fit.test_mape[f]:.1f}%' for f in forms)} "
              f"| {floor} |")
    for d in [d for d in (args.check_data_dirs or "").split(",") if d]:
        n, held, held_again = collectives.read_collection(d)
        for key, row in check_collectives(model, n, held, held_again).items():
            floor = "" if row["floor"] is None else f" vs noise floor {row['floor']:.1f}% ({row['over_floor']:.2f}x)"
            print(f"held out, {n} ranks ({d}): {key} MAPE {row['mape']:.1f}%{floor}")
    print(f"wrote {args.out_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
