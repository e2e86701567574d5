"""Machine drift between the cost-data collection and the hardware evaluation.

The simulator predicts what the machine did while the cost data was
collected. On shared cores the same kernels can run 10-20% slower an hour
later, and every measured plan cost moves with them, which the simulator
cannot know. The pipeline therefore re-measures a sample of the collected
compute shards and comm samples right after the hardware evaluation
(`compute_noise_floor.py --out_path` and `collect_comm_cost_data.py
--noise_floor N --noise_out`, steps 6-drift-compute and 6-drift-comm) and the report
shows

* the drift: median of fresh / recorded time for compute, fw and bw
  (1.0: the machine runs as it did; 1.2: everything takes 20% longer);
* the plan-cost MAPE with the simulator's per-rank compute, fw and bw parts
  multiplied by those three factors: what is left is the models' error,
  not the machine's. The factors come from the re-measurement, never from
  the evaluation's own results.

The same samples are measured just before planning too (steps 5a and 5b):
`--calibration <dir>` scales the
models by those factors (`eval.planning.calibrate`, `CostModels.scaled`), so
the plans and their estimates are for the machine as it runs now, and the
report's drift is then the change from that calibration to the end of the
evaluation.

Those samples are timed outside the plan-measurement job, and the job's own
speed can move apart from theirs within minutes. So the pipeline also
measures plans: the on-policy plans of training tasks (step 4d), measured
again by eval.py just before and just after the evaluation (steps 6a and
6c, into `<hw>/anchors_before` and `<hw>/anchors_after`). Their measured / estimated ratios (`read_anchors`)
are the plan job's speed against the models on plans that are not the
evaluation's, and the report gives the MAPE with the estimates scaled by
them. Their estimates are in-sample (the on-policy models were retrained on
their shards), which is why they measure speed, not the models' accuracy.

The anchors measured before the evaluation can also serve as its forecast
of the machine's speed: `eval.py --plan_speed <hw>/anchors_before` scales
the models by their measured / estimated medians per part
(`read_plan_speed`) on top of `--calibration`, so the evaluation's
estimates, and the band around them, are for the plan job as it ran a
minute before. The anchors' short window is as noisy a snapshot as the
kernel samples, and with it the estimates came out worse
(docs/EXPERIMENTS.md), so the pipeline does not pass it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from neuroshard.formats.cost_data import read_noise_floor
from neuroshard.types.errors import InputError
from neuroshard.types.records import PlanRecord

DRIFT_COMPUTE = "drift_compute.json"
DRIFT_COMM = "drift_comm.json"
# part of the simulator's breakdown -> (drift file, noise-report target)
_PARTS = {"compute": (DRIFT_COMPUTE, "cost"), "fw_comm": (DRIFT_COMM, "fw"), "bw_comm": (DRIFT_COMM, "bw")}


def read_drift(hw_dir) -> dict | None:
    """{"compute", "fw_comm", "bw_comm": median fresh / recorded, "samples": {...}} from the two drift
    files in `hw_dir`, or None when either is missing (the drift steps did not run)."""
    hw_dir = Path(hw_dir)
    if not all((hw_dir / f).exists() for f in (DRIFT_COMPUTE, DRIFT_COMM)):
        return None
    out: dict = {"samples": {}}
    for part, (name, target) in _PARTS.items():
        stats = read_noise_floor(None, target, path=hw_dir / name, stat="fresh_over_stored")
        ratio = float(stats["median"])
        if not np.isfinite(ratio) or ratio <= 0:
            raise InputError(hw_dir / name, f"drift ratio for {target!r} must be a positive number, got {ratio}")
        out[part], out["samples"][part] = ratio, int(stats["n"])
    return out


PARTS = tuple(_PARTS)  # the factors' keys: "compute", "fw_comm", "bw_comm"


def read_calibration(calibration_dir) -> dict:
    """`read_drift`'s factors of a `--calibration` dir; a one-line error naming the missing dir or file."""
    d = Path(calibration_dir)
    if not d.is_dir():
        raise InputError(d, "calibration directory not found (--calibration)")
    factors = read_drift(d)
    if factors is None:
        missing = [n for n in (DRIFT_COMPUTE, DRIFT_COMM) if not (d / n).exists()]
        raise InputError(d / missing[0], "calibration file not found (--calibration)")
    return factors


def read_plan_speed(plan_speed_dir, calibration: dict | None) -> dict:
    """`--plan_speed`: per part (`PARTS`) the median measured / estimated of the plans measured in
    `plan_speed_dir` (an eval.py out dir: results.json and config.json), the factor the models are scaled by on top
    of `calibration` (the evaluation's own `--calibration` factors, None without). Those plans must have been
    estimated under the same calibration, or the product would count a factor twice or miss one: a one-line
    error names the file and the factor that differs, as it does a missing file or a part without a ratio."""
    from neuroshard.eval.accuracy import speed_ratios
    from neuroshard.formats.io import read_json
    from neuroshard.formats.plan_file import read_plans

    d = Path(plan_speed_dir)  # eval.py's out dir (eval.results names its files; importing it would close a cycle)
    results, config = d / "results.json", d / "config.json"
    for f in (results, config):
        if not f.is_file():
            raise InputError(f, "plan-speed file not found (--plan_speed: an eval.py --out_dir)")
    cfg = read_json(config)
    if not isinstance(cfg, dict):
        raise InputError(config, "expected a JSON object (eval.py's config.json)")
    theirs = cfg.get("calibration_factors")
    for part in PARTS:
        a = None if theirs is None else theirs.get(part)
        b = None if calibration is None else calibration.get(part)
        if (a is None) != (b is None) or (a is not None and abs(a - b) > 1e-9 * max(abs(a), abs(b))):
            raise InputError(config, f"its plans were estimated with calibration factor {part}={a}, this "
                                     f"evaluation's --calibration gives {b}: measure them with the same --calibration")
    records = read_plans(results)
    ratios = speed_ratios(records)
    out = {}
    for part in PARTS:
        r = ratios[part]
        if r is None or not np.isfinite(r) or r <= 0:
            raise InputError(results, f"no measured / estimated ratio for {part!r} (no measured plan has it)")
        out[part] = float(r)
    out["plans"] = sum(r.cost is not None for r in records)
    return out


def calibrated(models, factors: dict):
    """`models` (a `CostModels`) scaled by calibration `factors` (`read_calibration`)."""
    return models.scaled(factors["compute"], factors["fw_comm"], factors["bw_comm"])


def drift_scaled_accuracy(records: Sequence[PlanRecord], drift: dict) -> dict:
    """MAPE and Spearman of the measured plan cost against the simulator's estimate with each rank's
    compute, fw and bw parts multiplied by `drift`'s factors (plan cost = the largest rank total)."""
    from neuroshard.train.metrics import regression_metrics

    est, meas = [], []
    for r in records:
        if r.cost is None or r.estimate is None:
            continue
        e = r.estimate
        totals = [drift["compute"] * c + drift["bw_comm"] * b + drift["fw_comm"] * f
                  for c, b, f in zip(e.compute, e.bw_comm, e.fw_comm)]
        est.append(max(totals))
        meas.append(r.cost)
    if not est:
        return {"mape": None, "spearman": None, "plans": 0}
    m = regression_metrics(np.array(est), np.array(meas))
    return {"mape": float(m["mape"]), "spearman": float(m["spearman"]), "plans": len(est)}


# the hw dir's folders of the on-policy plans measured again just before and just after the evaluation
ANCHORS = {"before": "anchors_before", "after": "anchors_after"}


def read_anchors(hw_dir) -> dict | None:
    """The anchors' speed (module doc): {"before", "after": `summary.speed_ratios` of each folder's
    results.json, "plans": the plans measured, "factors": per part ("compute", "fw_comm", "bw_comm") the
    geometric mean of before and after}; None when either folder has no results (the steps did not run)."""
    from neuroshard.eval.accuracy import speed_ratios
    from neuroshard.formats.plan_file import read_plans

    paths = [Path(hw_dir) / name / "results.json" for name in ANCHORS.values()]
    if not all(p.exists() for p in paths):
        return None
    records = [read_plans(p) for p in paths]
    before, after = (speed_ratios(r) for r in records)
    factors = {}
    for part in PARTS:
        a, b = before[part], after[part]
        if a is None or b is None:
            return None
        factors[part] = float(np.sqrt(a * b))
    return {"before": before, "after": after, "plans": sum(r.cost is not None for r in records[0]),
            "factors": factors}
