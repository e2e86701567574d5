"""Plans for every task and algorithm, their simulated costs, and the comparison (DESIGN §10).

`eval_simulator.py` is a thin wrapper around this module, and the hardware
evaluation (`eval.py`) computes its plans with `compute_plans` too, so both
evaluate the same plans made by the same code.

A plan record is a JSON-friendly dict (what `formats.write_plans` writes):

    {"task": i, "alg": name, "status": "ok" | "oom" | "invalid",
     "message": why not ok (or None), "plan": Plan (or None),
     "estimated_cost": ms (or None), "estimate": CostBreakdown.to_json() (or None),
     "search_ms": wall time of the sharder call, "num_tables": T, "num_splits": k,
     "view": formats.plan_view(...) (or None)}

"oom": the sharder found no plan within the memory cap, or returned one that
exceeds it; "invalid": the sharder returned a plan that breaks the rules.
Both count as invalid tasks (upstream's `Valid v / N`).
"""

from __future__ import annotations

import csv
import io
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from neuroshard.sharders import ShardingContext, algorithm_names, get_sharder
from neuroshard.simulator import get_scorer, simulate
from neuroshard.types import (
    InvalidPlanError,
    NeuroShardError,
    OutOfMemoryError,
    Plan,
    TableConfig,
    Task,
)

REFERENCE_ALG = "neuroshard"
CONFIG_JSON = "config.json"
PLANS_JSON = "plans.json"
RESULTS_JSON = "results.json"
RESULTS_CSV = "results.csv"
SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"


# --------------------------------------------------------------------------- inputs


@dataclass
class EvalInputs:
    """Everything an evaluation reads: dataset table configs, tasks, and the three cost models."""

    configs: list[TableConfig]
    tasks: list[Task]
    models: ShardingContext  # compute_model, fw_model, bw_model set; seed/options unused


def add_input_args(parser, data_help: str = "dataset dir with table_configs.json") -> None:
    """The flags naming what an evaluation reads, shared by eval_simulator.py and eval.py."""
    parser.add_argument("--data_dir", default="data/dlrm_datasets", help=data_help)
    parser.add_argument("--task_path", default="data/tasks/4_gpu/data.txt", help="task file (one task per line)")
    parser.add_argument("--compute_model", default="models/compute.pt", help="compute cost model checkpoint")
    for kind, name in (("fw", "forward"), ("bw", "backward")):
        parser.add_argument(f"--{kind}_comm_model", default=None,
                            help=f"{name} comm cost model checkpoint (default: models/comm_<ndevices>_{kind}.pt)")
    parser.add_argument("--alg", default="neuroshard",
                        help="sharding algorithm: neuroshard, random, dim_greedy, lookup_greedy, size_greedy, "
                             "size_lookup_greedy (any registered name), a comma list, or 'all' "
                             "(default: neuroshard)")
    parser.add_argument("--max_mem", type=float, default=4.0, help="memory per device in GB (default: 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the randomised algorithms (default: 0)")
    parser.add_argument("--max_tasks", type=int, default=None, help="evaluate only the first N tasks")


def default_comm_model_path(ndevices: int, kind: str) -> str:
    """Where the pipeline puts the comm model for `ndevices` devices (`models/comm_<n>_<kind>.pt`)."""
    return os.path.join("models", f"comm_{ndevices}_{kind}.pt")


def load_inputs(data_dir, task_path, compute_model, fw_comm_model, bw_comm_model, ndevices: int,
                max_tasks: int | None = None) -> EvalInputs:
    """Read the dataset's table configs, the tasks (the first `max_tasks`) and the cost models.

    Only `table_configs.json` of the dataset is read: the simulator needs no lookups.
    """
    from neuroshard.formats import read_table_configs, read_tasks
    from neuroshard.models import load_comm_model, load_compute_model

    if ndevices < 1:
        raise NeuroShardError(f"--ndevices must be >= 1, got {ndevices}")
    if max_tasks is not None and max_tasks < 1:
        raise NeuroShardError(f"--max_tasks must be >= 1, got {max_tasks}")
    configs = read_table_configs(Path(data_dir) / "table_configs.json")
    tasks = read_tasks(task_path, num_tables=len(configs))
    if max_tasks is not None:
        tasks = tasks[:max_tasks]
    models = ShardingContext(compute_model=load_compute_model(compute_model),
                             fw_model=load_comm_model(fw_comm_model, ndevices, "fw"),
                             bw_model=load_comm_model(bw_comm_model, ndevices, "bw"))
    return EvalInputs(configs, tasks, models)


def resolve_algs(alg: str) -> list[str]:
    """`--alg` value -> algorithm names: "all" is every registered one; a comma list is allowed."""
    names = algorithm_names()
    if alg == "all":
        return names
    algs = [a.strip() for a in alg.split(",") if a.strip()]
    unknown = [a for a in algs if a not in names]
    if not algs or unknown:
        raise NeuroShardError(f"--alg: unknown algorithm {', '.join(unknown) or repr(alg)}; "
                              f"choose from all, {', '.join(names)}")
    return list(dict.fromkeys(algs))


def task_seed(seed: int, task: int) -> int:
    """The seed a sharder gets for task `task`: different per task, fixed by `--seed`."""
    return int(np.random.SeedSequence([int(seed), int(task)]).generate_state(1)[0])


# --------------------------------------------------------------------------- plans


def plan_task(tables, alg: str, ndevices: int, max_mem: float, models, seed: int = 0,
              options: dict | None = None) -> dict:
    """Run one sharder on one task and simulate its plan: a plan record without "task"."""
    from neuroshard.formats import plan_view

    sharder = get_sharder(alg)
    ctx = ShardingContext(compute_model=models.compute_model, fw_model=models.fw_model,
                          bw_model=models.bw_model, seed=seed, options=dict(options or {}))
    rec = {"alg": alg, "status": "ok", "message": None, "plan": None, "estimated_cost": None,
           "estimate": None, "search_ms": None, "num_tables": len(tables), "num_splits": None, "view": None}
    t0 = time.perf_counter()
    try:
        plan = sharder(list(tables), ndevices, max_mem, ctx)
    except OutOfMemoryError as e:
        rec.update(status="oom", message=str(e), search_ms=1e3 * (time.perf_counter() - t0))
        return rec
    except InvalidPlanError as e:
        rec.update(status="invalid", message=str(e), search_ms=1e3 * (time.perf_counter() - t0))
        return rec
    rec["search_ms"] = 1e3 * (time.perf_counter() - t0)
    try:
        breakdown = simulate(tables, plan, models, max_mem)  # validates the plan first
    except OutOfMemoryError as e:
        rec.update(status="oom", message=f"{alg} returned a plan that does not fit: {e}")
        return rec
    except InvalidPlanError as e:
        rec.update(status="invalid", message=f"{alg} returned an invalid plan: {e}")
        return rec
    rec.update(plan=plan, estimated_cost=breakdown.cost, estimate=breakdown.to_json(),
               num_splits=len(plan.column_steps), view=plan_view(tables, plan))
    return rec


def compute_plans(configs: Sequence[TableConfig], tasks: Sequence[Task], algs: Sequence[str], ndevices: int,
                  max_mem: float, models, seed: int = 0, options: dict | None = None, progress: bool = True,
                  on_record: Callable[[dict], None] | None = None) -> list[dict]:
    """Plan records for every task (outer loop, with a progress bar) and algorithm (inner loop)."""
    from tqdm import tqdm

    if getattr(models, "compute_model", None) is not None:
        get_scorer(models)  # build the fast model copies now, so the first task's search time is fair
    records = []
    # disable=None: no bar when stderr is not a terminal (logs, pipes)
    for i in tqdm(range(len(tasks)), desc="tasks", unit="task", disable=None if progress else True,
                  file=sys.stderr):
        tables = tasks[i].tables(configs)
        for alg in algs:
            rec = {"task": i, **plan_task(tables, alg, ndevices, max_mem, models, task_seed(seed, i), options)}
            records.append(rec)
            if on_record is not None:
                on_record(rec)
    return records


def format_record(rec: dict, num_tasks: int) -> str:
    """One line per task and algorithm, as upstream printed: the plan and its estimated cost."""
    head = f"Task {rec['task'] + 1}/{num_tasks} [{rec['alg']}]"
    if rec["status"] != "ok":
        kind = "Out of memory" if rec["status"] == "oom" else "Invalid plan"
        return f"{head} {kind}: {rec['message']}"
    plan: Plan = rec["plan"]
    shards = [list(s) for s in plan.shards]
    return (f"{head} Sharding steps: {list(plan.column_steps)}, shards: {shards} -> "
            f"Latency: {rec['estimated_cost']:.4f} ms (search {rec['search_ms']:.1f} ms)")


# --------------------------------------------------------------------------- summary


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def _median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.median(xs)) if xs else None


def summarize(records: Sequence[dict], algs: Sequence[str], num_tasks: int, cost_key: str = "estimated_cost",
              reference: str = REFERENCE_ALG) -> dict:
    """The comparison table: per algorithm, upstream's Average and Valid v / N, and the fair comparison.

    `average`: mean cost over the tasks where that algorithm's plan is valid
    (upstream's Average); `mean_common`: mean over the tasks valid for every
    algorithm; `rank`: order of `mean_common` (1 = cheapest);
    `neuroshard_gain`: the reference's relative improvement over that
    algorithm on the common tasks, `(alg - neuroshard) / alg` (a fraction);
    search times in ms.
    """
    by_alg = {a: {r["task"]: r for r in records if r["alg"] == a} for a in algs}
    valid = {a: {t for t, r in rs.items() if r.get(cost_key) is not None} for a, rs in by_alg.items()}
    common = sorted(set.intersection(*valid.values())) if valid else []
    rows = []
    for a in algs:
        rs = by_alg[a]
        ok = [rs[t] for t in sorted(valid[a])]
        rows.append({
            "alg": a, "valid": len(ok), "tasks": num_tasks,
            "oom": sum(1 for r in rs.values() if r.get("status") == "oom"),
            "invalid": sum(1 for r in rs.values() if r.get("status") == "invalid"),
            "average": _mean(r[cost_key] for r in ok),
            "mean_common": _mean(rs[t][cost_key] for t in common),
            "median_search_ms": _median(r.get("search_ms") for r in rs.values()),
            "mean_search_ms": _mean(r.get("search_ms") for r in rs.values()),
            "mean_splits": _mean(r.get("num_splits") for r in ok),
        })
    ranked = sorted((r for r in rows if r["mean_common"] is not None), key=lambda r: r["mean_common"])
    for i, r in enumerate(ranked):
        r["rank"] = i + 1
    ref = next((r for r in rows if r["alg"] == reference), None)
    beats = {}
    if ref is not None and ref["mean_common"] is not None:
        for r in rows:
            if r["mean_common"]:
                r["neuroshard_gain"] = (r["mean_common"] - ref["mean_common"]) / abs(r["mean_common"])
            if r["alg"] != reference and r["mean_common"] is not None:
                beats[r["alg"]] = ref["mean_common"] < r["mean_common"]
    return {"tasks": num_tasks, "common_tasks": len(common), "cost": cost_key, "reference": reference,
            "algorithms": rows, "ranking": [r["alg"] for r in ranked], "neuroshard_beats": beats}


def _fmt(x, digits: int = 3, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{100 * x:+.1f}%" if pct else f"{x:.{digits}f}"


SUMMARY_COLUMNS = ["alg", "valid", "tasks", "oom", "invalid", "average", "mean_common", "rank",
                   "neuroshard_gain", "median_search_ms", "mean_search_ms", "mean_splits"]


def summary_markdown(summary: dict) -> str:
    """The comparison table as Markdown."""
    head = ["algorithm", "valid", "average ms", f"mean ms (common {summary['common_tasks']})", "rank",
            f"{summary['reference']} gain", "median search ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in summary["algorithms"]:
        gain = "" if r["alg"] == summary["reference"] else _fmt(r.get("neuroshard_gain"), pct=True)
        lines.append("| " + " | ".join([r["alg"], f"{r['valid']} / {r['tasks']}", _fmt(r["average"]),
                                        _fmt(r["mean_common"]), str(r.get("rank", "-")), gain,
                                        _fmt(r["median_search_ms"], 1)]) + " |")
    return "\n".join(lines) + "\n"


def print_summary(summary: dict, file=None, table: Callable[[dict], str] | None = None) -> None:
    """Upstream's closing lines per algorithm (Average, Valid v / N), then the comparison table
    (`table(summary)`, this module's `summary_markdown` by default) when given or when several."""
    file = file or sys.stdout
    rows = summary["algorithms"]
    for r in rows:
        if len(rows) > 1:
            print(f"[{r['alg']}]", file=file)
        print(f"Average: {_fmt(r['average'], 4)}", file=file)
        print(f"Valid {r['valid']} / {r['tasks']}", file=file)
    if len(rows) > 1 or table is not None:
        print(file=file)
        print((table or summary_markdown)(summary), file=file, end="")


# --------------------------------------------------------------------------- outputs


def _csv_text(header: Sequence[str], rows) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in rows:
        w.writerow(["" if v is None else (f"{v:.6g}" if isinstance(v, float) else v) for v in row])
    return buf.getvalue()


def write_outputs(out_dir, records: Sequence[dict], summary: dict, config: dict) -> None:
    """config.json, plans.json (with the readable view), results.json/.csv, summary.json/.csv/.md."""
    from neuroshard.cli import atomic_write, write_json_atomic
    from neuroshard.formats import write_plans

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / CONFIG_JSON, config)
    write_plans(out / PLANS_JSON, records)
    results = []
    for r in records:
        r = {k: v for k, v in r.items() if k != "view"}
        if isinstance(r.get("plan"), Plan):
            r["plan"] = r["plan"].to_json()
        results.append(r)
    write_json_atomic(out / RESULTS_JSON, results)
    with atomic_write(out / RESULTS_CSV) as fh:
        fh.write(_csv_text(
            ["task", "alg", "status", "estimated_ms", "compute_max_ms", "bw_comm_max_ms", "fw_comm_max_ms",
             "search_ms", "num_tables", "num_splits", "message"],
            ([r["task"], r["alg"], r["status"], r.get("estimated_cost"),
              max(r["estimate"]["compute"]) if r.get("estimate") else None,
              max(r["estimate"]["bw_comm"]) if r.get("estimate") else None,
              max(r["estimate"]["fw_comm"]) if r.get("estimate") else None,
              r.get("search_ms"), r.get("num_tables"), r.get("num_splits"), r.get("message") or ""]
             for r in records)))
    write_json_atomic(out / SUMMARY_JSON, summary)
    with atomic_write(out / SUMMARY_CSV) as fh:
        fh.write(_csv_text(SUMMARY_COLUMNS, ([r.get(c) for c in SUMMARY_COLUMNS] for r in summary["algorithms"])))
    with atomic_write(out / SUMMARY_MD) as fh:
        fh.write(summary_markdown(summary))
