"""Pool the verdicts of several evaluations (seeds) into one: does the margin hold from run to run?

    python tools/combine_runs.py results/study_s0 results/study_s1 results/study_s2 \\
        --out_path results/study_pooled.json

Each RUN is a pipeline run folder (its hw/summary.json is read; --sim reads
sim/summary.json instead), an eval.py / eval_simulator.py output folder (its
summary.json) or a summary.json itself. Per algorithm, the reference's
relative gain in each run (prediction-powered where the run was) is pooled
by inverse variance (eval/pooling.py): the fixed-effect estimate, the runs'
heterogeneity (Cochran's Q with its p-value, I², tau²) and the
random-effects interval, whose verdict is printed with the smallest
difference the pooled comparison detects (95%, 80% power). Pipeline runs
with the cost-model ablation also get its effects pooled (model against
search, `eval.ablation`). Prints markdown tables; --out_path writes them as
JSON with the runs it read.

TorchRec training is pooled from its own folders, e.g. a pipeline run's
R/torchrec (step 7f:paper) or R/oversize/torchrec (7f:oversize):

    python tools/combine_runs.py R0/torchrec R1/torchrec R2/torchrec

There each algorithm's figure is its step time relative to the reference's
(the summary's ratio - 1): positive where the reference trains faster.

--accuracy pools the models' plan-cost error instead, where every run measured
anchors in each round (the pipeline's hw/ and oversize/hw/; `eval.py
--round_anchors`): each run's measurements moved by its own rounds' factors,
the per-measurement MAPE over all runs against the floor of all runs' plans
(`eval.round_calibration.pooled_accuracy`), for every plan and for the plans
with the new types (a table row-wise, table-row-wise or data-parallel), whose
few plans a run leave each run's floor loose:

    python tools/combine_runs.py R0/oversize R1/oversize R2/oversize --accuracy

It then says, run by run, where the new-type plans' error sits: each part (compute, the all-to-alls, the spread
tables' collectives) measured over its moved estimate beside the other plans', and the compute by rank
(`eval.round_calibration.part_ratios`, `rank_compute_ratios`).
"""

import argparse
import hashlib
import json
import sys
from pathlib import Path

from neuroshard.checks import check_output_file
from neuroshard.cli import run_main
from neuroshard.settings import add_flag, parse_flags
from neuroshard.types.errors import ConfigError, InputError


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="pipeline run folder, evaluation folder or summary.json (two or more)")
    p.add_argument("--sim", action="store_true", help="pool the simulator's verdicts (sim/summary.json of "
                                                      "pipeline runs) instead of the hardware's")
    p.add_argument("--accuracy", action="store_true", help="pool the per-round calibrated plan-cost error against "
                                                            "its floor (every plan, and those with the new types) "
                                                            "instead of the verdicts")
    add_flag(p, "out_path", help="write the pooled table as JSON here")
    return parse_flags(p, argv, __file__)


def summary_path(run: str, sim: bool) -> Path:
    """The summary.json a RUN argument names (InputError naming RUN when there is none)."""
    path = Path(run)
    if path.is_file():
        return path
    if not path.exists():
        raise InputError(path, "not found (give a run folder or a summary.json)")
    for candidate in (path / ("sim" if sim else "hw") / "summary.json", path / "summary.json"):
        if candidate.is_file():
            return candidate
    raise InputError(path, f"no {'sim' if sim else 'hw'}/summary.json or summary.json in this folder")


def _setting(summary: Path, key: str):
    """An integer setting (seed, repeats) in the config.json beside a summary (the evaluation's), or None."""
    try:
        value = json.loads((summary.parent / "config.json").read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def is_training(data) -> bool:
    """Whether a summary.json is a TorchRec training run's (`eval_torchrec.py`: its common tasks listed, not
    counted as an evaluation's are)."""
    return isinstance(data, dict) and isinstance(data.get("common_tasks"), list)


def _ablation(summary: Path) -> dict | None:
    """The cost-model ablation figures of the pipeline run a hw/summary.json belongs to (its config.json),
    None for another summary or a run without them."""
    if summary.parent.name != "hw":
        return None
    try:
        return json.loads((summary.parent.parent / "config.json").read_text()).get("ablation")
    except (OSError, ValueError, AttributeError):
        return None


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def table(rows, names, reference: str) -> str:
    from neuroshard.eval.pooling import z_level

    z = z_level()
    head = [f"{reference} vs", *names, "pooled (fixed)", "heterogeneity", "pooled (random effects)", "verdict",
            "detectable"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        by_run = {g.run: g for g in r.runs}
        cells = [f"{_pct(g.gain)} [{_pct(g.lo)}, {_pct(g.hi)}]" if g else "-" for g in map(by_run.get, names)]
        p = r.pooled
        het = "-" if p.p_heterogeneity is None else f"Q {p.q:.2f} (p {p.p_heterogeneity:.2f}), I² {100 * p.i2:.0f}%"
        fixed = f"{_pct(p.fixed)} [{_pct(p.fixed - z * p.fixed_se)}, {_pct(p.fixed + z * p.fixed_se)}]"
        lines.append("| " + " | ".join([r.alg, *cells, fixed, het, f"{_pct(p.mean)} [{_pct(p.lo)}, {_pct(p.hi)}]",
                                        f"**{r.verdict}**", f"{100 * r.mdd:.1f}%"]) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.eval.pooling import pool_ablations, pool_runs, pool_training_runs
    from neuroshard.eval.summary import Summary
    from neuroshard.formats.io import read_json, warn, write_json_atomic

    if args.accuracy and args.sim:
        raise ConfigError("--accuracy", "the simulator's runs measured nothing to price: leave out --sim")
    if len(args.runs) < 2:
        raise ConfigError("RUN", f"pooling needs two or more runs, got {len(args.runs)}")
    if args.out_path:
        check_output_file("--out_path", args.out_path)
    named, paths, seen, seeds, kinds = [], [], {}, {}, set()
    for run in args.runs:
        path = summary_path(run, args.sim)
        data = read_json(path)
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
        if digest in seen:
            raise InputError(path, f"the same evaluation as {seen[digest]} (a run given twice counts twice)")
        seen[digest] = path
        paths.append(path)
        trained = is_training(data)
        kinds.add(trained)
        if len(kinds) > 1:
            raise ConfigError("RUN", f"{run} is a {'TorchRec training' if trained else 'plan evaluation'}"
                                     f" and {args.runs[0]} is not: these runs do not compare the same thing")
        try:
            if trained:
                if not isinstance(data["reference"], str) or not isinstance(data["algorithms"], list):
                    raise TypeError("no reference and algorithms")
                summary = data
            else:
                summary = Summary.from_json(data)
        except (KeyError, TypeError, AttributeError) as e:
            raise InputError(path, f"not an evaluation summary ({type(e).__name__}: {e})") from None
        named.append((run, summary))
        seed = _setting(path, "seed")
        if seed is not None and seed in seeds:
            warn(f"{run} and {seeds[seed]} were both made with seed {seed}: their datasets and tasks are likely "
                 "the same, and pooling counts them as independent runs")
        seeds.setdefault(seed, run)
    training = kinds == {True}
    if args.accuracy:
        if training:
            raise ConfigError("--accuracy", "pools plan evaluations' measured plans, not TorchRec training runs")
        return pool_accuracy(named, paths, args.out_path)
    try:
        if training:
            rows = pool_training_runs([(n, s, _setting(p, "repeats") or 0) for (n, s), p in zip(named, paths)])
        else:
            rows = pool_runs(named)
    except ValueError as e:  # runs that do not compare the same thing, a training row without its ratio
        raise ConfigError("RUN", str(e)) from None
    if not rows:
        raise InputError(args.runs[0], "no algorithm compared with the reference in these runs")
    names = [n for n, _ in named]
    reference = named[0][1]["reference"] if training else named[0][1].reference
    if training:
        print(f"TorchRec training: each algorithm's step time over {reference}'s, less 1 (+: {reference} trains "
              "faster)\n")
    print(table(rows, names, reference))
    ablations = [] if args.sim or training else \
        pool_ablations([(n, _ablation(p)) for (n, _), p in zip(named, paths)])
    if ablations:
        # a run without the ablation's figures (its report not written yet) is left out, and its column with it
        pooled = [r["run"] for r in ablations[0]["runs"]]
        left = [n for n in names if n not in pooled]
        print("\nThe cost-model ablation's effects (the first's gain over the second's, paired), pooled"
              + (f" (without {', '.join(left)}: no ablation figures)" if left else "") + ":\n")
        print("| effect | " + " | ".join(pooled) + " | pooled (random effects) | verdict |")
        print("|---|" + "---|" * len(pooled) + "---|---|")
        for e in ablations:
            cells = [f"{_pct(r['gain'])} [{_pct(r['lo'])}, {_pct(r['hi'])}]" for r in e["runs"]]
            p = e["pooled"]
            print(f"| {e['name']} (`{e['base']}` vs `{e['other']}`) | " + " | ".join(cells)
                  + f" | {_pct(p['mean'])} [{_pct(p['lo'])}, {_pct(p['hi'])}] | **{e['verdict']}** |")
    if args.out_path:
        write_json_atomic(args.out_path, {"runs": [str(p) for p in paths], "sim": args.sim,
                                          "training": training, "reference": reference,
                                          "cost": "step_ms" if training else named[0][1].cost,
                                          "rows": [r.to_json() for r in rows], "ablation": ablations})
        print(f"wrote {args.out_path}", file=sys.stderr)
    return 0


def _ratio_cell(c) -> str:
    if c.mape is None:
        return "-"
    ratio = f"{c.mape / c.floor:.2f}x" if c.floor else "-"
    spread = f" ({c.ratio_spread[0]:.2f}-{c.ratio_spread[1]:.2f})" if c.ratio_spread else ""
    return f"{100 * c.mape:.1f}% / {'-' if c.floor is None else f'{100 * c.floor:.1f}%'} = {ratio}{spread}, " \
           f"{c.plans} plans"


def pool_accuracy(named, paths, out_path) -> int:
    """Print (and with `out_path` write) each run's and the pooled per-round calibrated plan-cost error over its
    floor, for every measured plan and for the plans with the new types (module doc)."""
    from neuroshard.eval.results import RESULTS_JSON
    from neuroshard.eval.round_calibration import new_type_records, pooled_accuracy
    from neuroshard.formats.io import write_json_atomic
    from neuroshard.formats.plan_file import read_plans
    from neuroshard.formats.side_files import ROUND_ANCHORS_JSON

    runs = []
    for summary in paths:
        for name in (RESULTS_JSON, ROUND_ANCHORS_JSON):
            if not (summary.parent / name).is_file():
                raise InputError(summary.parent / name, "not found: --accuracy needs each run's measured plans "
                                                        "and anchors measured in every round (--round_anchors)")
        anchors = read_plans(summary.parent / ROUND_ANCHORS_JSON)
        repeats = max((len(a.repeat_costs or []) for a in anchors), default=0)
        runs.append((read_plans(summary.parent / RESULTS_JSON), anchors, repeats))
    names = [n for n, _ in named]
    groups = {"every plan": lambda recs: recs, "with the new types": new_type_records}
    rows = {}
    for label, pick in groups.items():
        picked = [(pick(recs), anchors, repeats) for recs, anchors, repeats in runs]
        rows[label] = {"runs": [pooled_accuracy([one]) for one in picked], "pooled": pooled_accuracy(picked)}
    print("Plan-cost MAPE per measurement after the per-round calibration / a perfect model's floor = the ratio "
          "(10th-90th percentile with the anchors resampled)\n")
    print("| plans | " + " | ".join(names) + " | pooled |")
    print("|---|" + "---|" * len(names) + "---|")
    for label, row in rows.items():
        print(f"| {label} | " + " | ".join(map(_ratio_cell, row["runs"])) + f" | **{_ratio_cell(row['pooled'])}** |")
    parts = part_table(names, runs)
    if out_path:
        write_json_atomic(out_path, {"runs": [str(p.parent) for p in paths], "accuracy": {
            label: {"runs": [c.to_json() for c in row["runs"]], "pooled": row["pooled"].to_json()}
            for label, row in rows.items()}, "new_type_parts": parts})
        print(f"wrote {out_path}", file=sys.stderr)
    return 0


def part_table(names, runs) -> list[dict]:
    """Print, per run, where the new-type plans' error sits beside the other plans' (`round_calibration.part_ratios`
    and `rank_compute_ratios`, each run's estimates moved by its own rounds' factors); returns the figures."""
    from neuroshard.eval.round_calibration import (
        PART_NAMES,
        SPLIT_PARTS,
        part_ratios,
        rank_compute_ratios,
        round_factors,
        split_new_types,
    )

    figures = []
    for recs, anchors, repeats in runs:
        factors = round_factors(anchors, repeats)
        spread, others = split_new_types(recs)
        figures.append({"new_types": part_ratios(spread, factors), "others": part_ratios(others, factors),
                        "compute_by_rank": rank_compute_ratios(spread, factors)})
    if not any(f["new_types"] for f in figures):
        return figures
    cell = lambda f, k: (f"{f['new_types'][k]:.2f}x" if k in f["new_types"] else "-") + (  # noqa: E731
        f" ({f['others'][k]:.2f}x)" if k in f["others"] else "")
    print("\nWhere the new-type plans' error sits: per part, measured over the estimate moved by its round's factors "
          "(median over measurements, summed over the ranks; in brackets the other plans')\n")
    print("| part | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for k in SPLIT_PARTS:
        print(f"| {PART_NAMES[k]} | " + " | ".join(cell(f, k) for f in figures) + " |")
    print("| compute by rank | " + " | ".join(", ".join("-" if v is None else f"{v:.2f}" for v in f["compute_by_rank"])
                                            for f in figures) + " |")
    return figures


if __name__ == "__main__":
    run_main(main)
