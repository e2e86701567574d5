"""Where a plan's estimate leaves the cost models' training data.

A cost model is only known to be right on inputs like those it was trained
on. Each checkpoint records the ranges of its training data (`ranges` in its
extra, written by `train`): for the compute model, the tables' rows, pooling
factors and dims and the shards' table counts and dim sums; for the comm
models, the per-device dim sums and start delays. `warnings` lists, per
table and per device, every feature of a plan outside those ranges (read at
the batch the plan is costed at, `CostModels.at_batch`), and a batch
outside the batches the models' data covers, so a user planning 40 M-row
tables with models trained on 1 M rows is told so.
Models trained before the ranges were recorded give no warnings.
"""

from __future__ import annotations

from typing import Sequence

from neuroshard.planner.costs.features import compute_pooling
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.plan import Plan, apply_column_steps
from neuroshard.types.tables import ShardTable


def compute_ranges(configs, shards: Sequence[Sequence[int]]) -> dict:
    """The training ranges of a compute model: `configs` the (augmented) table list the shards index."""
    used = sorted({i for s in shards for i in s})
    rows = [configs[i].row for i in used]
    pooling = [configs[i].pooling_factor for i in used]
    dims = [configs[i].dim for i in used]
    sums = [sum(configs[i].dim for i in s) for s in shards]
    counts = [len(s) for s in shards]
    return {"rows": [min(rows), max(rows)], "pooling": [min(pooling), max(pooling)], "dim": [min(dims), max(dims)],
            "shard_dim_sum": [min(sums), max(sums)], "shard_tables": [min(counts), max(counts)]}


def comm_ranges(samples) -> dict:
    """The training ranges of a comm model: per-device dim sums and start delays (ms) of its samples."""
    dims = [d for s in samples for d in s.dims]
    sleeps = [x for s in samples for x in s.sleeps]
    return {"dim_sum": [min(dims), max(dims)], "sleep": [min(sleeps), max(sleeps)]}


def batch_warnings(models) -> list[str]:
    """A line per model whose data does not cover the batch the plan is costed at (`CostModels.batch`): one
    measured at other batches is read at the batch's lookup volume (extrapolated), one that does not record
    its batch cannot be moved to another (its estimate is for its own batch)."""
    from neuroshard.planner.costs.cost_models import model_batches

    batch = getattr(models, "batch", None)
    if batch is None:
        return []
    out = []
    for what, model in (("compute", models.compute), ("comm", models.fw)):
        ref, sizes = model_batches(model)
        if ref is None:
            out.append(f"the {what} model does not record the batch of its data: its estimate is for that batch, "
                       f"not for batch {batch}")
        elif not min(sizes) <= batch <= max(sizes):
            covered = f"batch {sizes[0]}" if len(sizes) == 1 else f"batches {min(sizes)}-{max(sizes)}"
            out.append(f"the {what} model's data was measured at {covered}: at batch {batch} its estimate is "
                       "extrapolated by lookup volume")
    return out


def _ranges(model) -> dict:
    extra = getattr(model, "checkpoint_extra", None) or {}
    return extra.get("ranges") or {}


def _outside(value: float, lo_hi) -> bool:
    return lo_hi is not None and not (lo_hi[0] <= value <= lo_hi[1])


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) >= 1000 else f"{x:g}"


def warnings(tables: Sequence[ShardTable], plan: Plan, breakdown: CostBreakdown, models,
             names: Sequence[str] | None = None) -> list[str]:
    """One line per table and per device of `plan` whose estimate rests on inputs outside the ranges its
    models were trained on (`tables`: before splits; `breakdown`: the plan's simulation; `names`: the
    tables' names, by position, else "table <i>")."""
    label = (lambda i: names[i]) if names is not None else (lambda i: f"table {i}")
    out = batch_warnings(models)
    comp = _ranges(models.compute)
    rc, rm = models.batch_ratios if hasattr(models, "batch_ratios") else (1.0, 1.0)
    what = {"rows": "rows", "pooling": "pooling factor"}
    for t in tables:
        bad = []
        for key, value in (("rows", t.config.row), ("pooling", compute_pooling(t.config) * rc)):
            if _outside(value, comp.get(key)):
                lo, hi = comp[key]
                bad.append(f"{what[key]} {_fmt(value)} (trained on {_fmt(lo)}-{_fmt(hi)})")
        if bad:
            out.append(f"{label(t.origin)}: {', '.join(bad)}: the compute estimate is extrapolated")
    split = apply_column_steps(list(tables), plan.column_steps)
    if comp.get("dim"):
        lo, hi = comp["dim"]
        for origin, dim in sorted({(t.origin, t.dim) for t in split if _outside(t.dim, comp["dim"])}):
            out.append(f"{label(origin)}: a shard of dim {dim} (trained on dims {lo}-{hi}): the compute estimate "
                       "is extrapolated")
    fw, bw = _ranges(models.fw), _ranges(models.bw)
    for d, shard in enumerate(plan.shards):
        if not shard:
            continue
        bad = []
        dim_sum = sum(split[i].dim for i in shard)
        exchanged = sum(split[i].exchange_dim for i in shard)  # the comm models' input (unpooled: dim x pooling)
        if _outside(dim_sum, comp.get("shard_dim_sum")):
            bad.append(f"compute: dim sum {dim_sum} (trained on {comp['shard_dim_sum'][0]}-"
                       f"{comp['shard_dim_sum'][1]})")
        if comp.get("shard_tables") and len(shard) > comp["shard_tables"][1]:
            bad.append(f"compute: {len(shard)} tables (trained on at most {comp['shard_tables'][1]})")
        comm = fw.get("dim_sum") or bw.get("dim_sum")
        if _outside(exchanged * rm, comm):
            at = "" if rm == 1.0 else f", {_fmt(exchanged * rm)} at the data's batch"
            bad.append(f"comm: dim sum {exchanged}{at} (trained on {comm[0]}-{comm[1]})")
        if fw.get("sleep") and breakdown.skew and len(breakdown.skew) > d and breakdown.skew[d] > fw["sleep"][1]:
            bad.append(f"forward comm: start delay {breakdown.skew[d]:.1f} ms (trained on at most "
                       f"{fw['sleep'][1]:g} ms)")
        if bad:
            out.append(f"device {d}: {'; '.join(bad)}: the estimate is extrapolated")
    return out
