"""The noise floor of collected cost data: how far a re-measurement lands from the recorded time.

One implementation and one JSON schema for the compute and the communication
data (each collector re-measures in its own way and hands the numbers here;
`formats.cost_data.write_noise_floor` / `read_noise_floor` write and read the file).
`<data_dir>/noise_floor.json`:

    {"kind": "compute" | "comm", "num_samples": S, "repeats": R, ...settings,
     "targets": {"<target>": {"fresh_vs_stored": {"median", "mean", "p90", "n", "values"},
                              "fresh_over_stored": {"median", "mean", "n"},
                              "fresh_vs_fresh": {...}}},     # the last with R >= 2
     "samples": [...]}                                        # what was re-measured

Targets: "cost" (compute ms per shard); "fw" and "bw" (per-rank all-to-all
ms). `fresh_vs_stored` is |fresh - stored| / stored over every entry: its
mean is the MAPE a model that predicted the re-measurement exactly would
score on the recorded data, the floor for a cost model's test MAPE (its
"values", one per entry, give that ratio an interval: `train.metrics.
ratio_interval`; reports written before them have none);
`fresh_over_stored` is the signed ratio fresh / stored: its median is how
much slower (> 1) or faster the machine runs now than when the data was
recorded (`eval.drift` re-measures after the hardware evaluation for this);
`fresh_vs_fresh` compares two fresh repeats (rounds interleaved over the
samples, so slow spells of the machine hit both alike).
"""

from __future__ import annotations

import math

import numpy as np

from neuroshard.formats.cost_data import NOISE_TARGETS as TARGETS
from neuroshard.numerics import rel_errors


def rel_diff_stats(reference, other, values: bool = False) -> dict:
    """|other - reference| / reference over entries with reference > 0: median, mean, p90, n; with `values`,
    also each entry's difference (so that a model's MAPE over the mean can be given an interval)."""
    ref = np.asarray(reference, dtype=np.float64).ravel()
    new = np.asarray(other, dtype=np.float64).ravel()
    keep = (ref > 0) & np.isfinite(new)
    r = rel_errors(new[keep], ref[keep])
    stats = {"median": float(np.median(r)), "mean": float(np.mean(r)), "p90": float(np.quantile(r, 0.9)),
             "n": int(len(r))} if len(r) else {"median": math.nan, "mean": math.nan, "p90": math.nan, "n": 0}
    if values:
        stats["values"] = [round(float(x), 6) for x in r]
    return stats


def ratio_stats(reference, other) -> dict:
    """other / reference over entries with reference > 0: median, mean, n (1.0: no drift)."""
    ref = np.asarray(reference, dtype=np.float64).ravel()
    new = np.asarray(other, dtype=np.float64).ravel()
    keep = (ref > 0) & np.isfinite(new)
    r = new[keep] / ref[keep]
    if not len(r):
        return {"median": math.nan, "mean": math.nan, "n": 0}
    return {"median": float(np.median(r)), "mean": float(np.mean(r)), "n": int(len(r))}


def noise_report(kind: str, stored: dict, fresh: dict, samples: list, **settings) -> dict:
    """The noise-floor JSON (schema in the module doc).

    `stored[target]`: [S, ...] recorded values; `fresh[target]`: [R, S, ...]
    re-measurements (NaN where one failed; such samples are left out).
    """
    if kind not in TARGETS or set(stored) != set(TARGETS[kind]) or set(fresh) != set(TARGETS[kind]):
        raise ValueError(f"noise_report: kind {kind!r} needs targets {TARGETS.get(kind)}")
    first = np.asarray(fresh[TARGETS[kind][0]], dtype=np.float64)
    repeats, n = first.shape[:2]
    ok = np.ones(n, dtype=bool)
    for t in TARGETS[kind]:
        f = np.asarray(fresh[t], dtype=np.float64).reshape(repeats, n, -1)
        ok &= np.isfinite(f).all(axis=(0, 2))
    targets = {}
    for t in TARGETS[kind]:
        f = np.asarray(fresh[t], dtype=np.float64).reshape(repeats, n, -1)[:, ok]
        s = np.asarray(stored[t], dtype=np.float64).reshape(n, -1)[ok]
        targets[t] = {"fresh_vs_stored": rel_diff_stats(s, f[0], values=True),
                      "fresh_over_stored": ratio_stats(s, f[0])}
        if repeats >= 2:
            targets[t]["fresh_vs_fresh"] = rel_diff_stats(f[0], f[1])
    return {"kind": kind, "num_samples": int(ok.sum()), "repeats": int(repeats), **settings,
            "targets": targets, "samples": samples}
