"""Plan formats: plans.json / results.json (plan records with a readable per-table view) and eval.py's
measurement log.

A plan file is a JSON list of `PlanRecord.to_json()` objects, one record per
line and its view one original table per line, so it reads and diffs well.
The measurement log is append-only, one `{"key", "m"}` object per measured
plan and repeat.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

from neuroshard.formats.io import (
    json_default,
    load_json,
    read_lines_tolerant,
    show_value,
    write_text_atomic,
)
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.errors import InputError, InvalidPlanError
from neuroshard.types.plan import Plan, apply_column_steps, table_devices
from neuroshard.types.records import (
    PLAN_STATUSES,
    EndToEnd,
    PlanMeasurement,
    PlanRecord,
    RefineRecord,
)
from neuroshard.types.tables import ShardTable

# --------------------------------------------------------------------------- plans


def plan_view(tables: Sequence[ShardTable], plan: Plan) -> list[dict]:
    """Readable per-original-table view of a plan.

    `tables`: the task's tables before any split (origin = position). Returns
    `[{"table": origin, "shards": [{"dim": d, "device": r}, ...]}, ...]` in
    origin order; the shards of a split table in post-split table order. A
    spread table adds its `"type"` and gives each rank's `"rows"`:
    `{"table": 3, "type": "row_wise", "shards": [{"dim": 64, "rows": 500,
    "device": 0}, ...]}`. Raises InvalidPlanError if a post-split table is
    placed never, twice, or is out of range.
    """
    split = apply_column_steps(tables, plan.column_steps)
    device_of = table_devices(plan, len(split))
    view = [{"table": t.origin, "shards": []} for t in tables]
    for i, t in enumerate(split):
        if device_of[i] is not None:
            view[t.origin]["shards"].append({"dim": t.dim, "device": device_of[i]})
    for s in plan.spread:
        t = tables[s.table]
        view[s.table] = {"table": t.origin, "type": s.kind,
                         "shards": [{"dim": t.dim, "rows": rows, "device": r}
                                    for r, rows in zip(s.ranks, s.rows_on(int(t.config.row)))]}
    return view


def write_plans(path, records: Sequence[PlanRecord]) -> None:
    """Write plan records as JSON (atomic): a JSON list, one record per line, its "view" one
    original table per line, so the file reads well and diffs well."""
    chunks = []
    for rec in records:
        d = rec.to_json()
        view = d.pop("view", None)
        head = json.dumps(d, default=json_default)
        if view is None:
            chunks.append(" " + head)
            continue
        rows = ",\n".join("   " + json.dumps(v, default=json_default) for v in view)
        body = "[\n" + rows + "\n  ]" if view else "[]"
        chunks.append(" " + head[:-1] + ',\n  "view": ' + body + "}")
    write_text_atomic(path, "[\n" + ",\n".join(chunks) + "\n]\n" if chunks else "[]\n")


def read_plans(path) -> list[PlanRecord]:
    """Read plan records written by `write_plans` (or eval.py's results.json)."""
    path = Path(path)
    data = load_json(path)
    if not isinstance(data, list):
        raise InputError(path, f"expected a JSON list of plan records, got {type(data).__name__}")
    return [_record_from_json(path, k, rec) for k, rec in enumerate(data)]


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def _check_finite(path: Path, where: str, name: str, costs) -> None:
    """A measured cost that is NaN, infinite or negative would enter every mean and interval built on it."""
    if costs is None:
        return
    if isinstance(costs, CostBreakdown):
        parts = {"compute": costs.compute, "bw_comm": costs.bw_comm, "fw_comm": costs.fw_comm}
    else:
        parts = {"repeat_costs": list(costs.repeat_costs or []), "per_rank": costs.per_rank, "iters": costs.iters}
    parts["cost"] = [costs.cost]
    for key, values in parts.items():
        bad = [v for v in values if not _finite(v)]
        if bad:
            raise InputError(path, f"{where}: {name} \"{key}\" holds {bad[0]!r}; costs must be finite and non-negative")


def _record_from_json(path: Path, k: int, rec) -> PlanRecord:
    if not isinstance(rec, dict):
        raise InputError(path, f"record {k}: expected a JSON object")
    task = rec.get("task")
    if isinstance(task, bool) or not isinstance(task, int) or task < 0:
        raise InputError(path, f"record {k}: \"task\" must be a non-negative integer, got {json.dumps(task)}")
    where = f"record {k} (task {task})"
    alg = rec.get("alg")
    if not isinstance(alg, str) or not alg:
        raise InputError(path, f"{where}: \"alg\" must be an algorithm name, got {json.dumps(alg)}")
    if "plan" not in rec:
        raise InputError(path, f"{where}: missing \"plan\"")
    status = rec.get("status", "ok" if rec["plan"] is not None else None)
    if status not in PLAN_STATUSES:
        raise InputError(path, f"{where}: \"status\" must be one of {', '.join(PLAN_STATUSES)}, "
                               f"got {json.dumps(status)}")
    plan = None if rec["plan"] is None else _plan_from_json(path, where, rec["plan"])
    if (plan is None) != (status != "ok"):
        raise InputError(path, f"{where}: status {status!r} with "
                               f"{'no plan' if plan is None else 'a plan'}")
    try:
        estimate = None if rec.get("estimate") is None else CostBreakdown.from_json(rec["estimate"])
        measured = None if rec.get("measured") is None else CostBreakdown.from_json(rec["measured"])
        e2e = None if rec.get("e2e") is None else EndToEnd.from_json(rec["e2e"])
        refine = None if rec.get("refine") is None else RefineRecord.from_json(rec["refine"])
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(path, f"{where}: malformed cost breakdown ({type(e).__name__}: {e})") from None
    _check_finite(path, where, "measured", measured)
    _check_finite(path, where, "e2e", e2e)
    repeat_costs = rec.get("repeat_costs")
    if repeat_costs is not None and not (isinstance(repeat_costs, list) and all(_finite(c) for c in repeat_costs)):
        raise InputError(path, f"{where}: \"repeat_costs\" must be a list of finite non-negative numbers, "
                               f"got {show_value(json.dumps(repeat_costs))}")
    identity = {}
    for key in ("table_ids", "dims"):  # optional: plans files written before they were recorded lack them
        value = rec.get(key)
        if value is not None and not (isinstance(value, list) and all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)):
            raise InputError(path, f"{where}: \"{key}\" must be a list of non-negative integers, "
                                   f"got {show_value(json.dumps(value))}")
        identity[key] = None if value is None else tuple(value)
    if None not in identity.values() and len(identity["table_ids"]) != len(identity["dims"]):
        raise InputError(path, f"{where}: {len(identity['table_ids'])} table ids but {len(identity['dims'])} dims")
    return PlanRecord(task=task, alg=alg, status=status, message=rec.get("message"), plan=plan,
                      estimate=estimate, search_ms=rec.get("search_ms"), num_tables=rec.get("num_tables"),
                      view=rec.get("view"), measured=measured, e2e=e2e, refine=refine,
                      repeat_costs=repeat_costs, **identity)


def plan_mismatch(rec: PlanRecord, tables: Sequence[ShardTable], check_plan: bool = True) -> str | None:
    """How plan record `rec` does not fit `tables` (the task's tables before splits), or None when it fits.

    Checks what the record says of its task: its table ids and dims (recorded
    since they were, see `PlanRecord`), the table count, and the per-table dims
    of its readable view; then the plan itself: its column splits must halve
    these dims and it must place every resulting table exactly once (what an
    old file without the identity keys can be checked by; `check_plan=False`
    leaves that to the caller, e.g. an evaluation that reports a plan breaking
    the rules as "invalid"). The first mismatch, in words.
    """
    n = len(tables)
    ids, dims = [t.table_id for t in tables], [t.dim for t in tables]
    for key, mine in (("table_ids", ids), ("dims", dims)):
        theirs = getattr(rec, key)
        if theirs is None:
            continue
        what = "dataset table" if key == "table_ids" else "dim"
        if len(theirs) != n:
            return f"the plan is for {len(theirs)} tables, the tables given are {n}"
        for i, (a, b) in enumerate(zip(theirs, mine)):
            if a != b:
                return f"table {i} is {what} {a} in the plan, {what} {b} here"
    if rec.num_tables is not None and rec.num_tables != n:
        return f"the plan is for {rec.num_tables} tables, the tables given are {n}"
    if isinstance(rec.view, list):
        if len(rec.view) != n:
            return f"the plan's view has {len(rec.view)} tables, the tables given are {n}"
        for i, (v, d) in enumerate(zip(rec.view, dims)):
            try:  # a spread table's view lists every rank's rows at the table's whole dim
                vd = int(v["shards"][0]["dim"]) if "type" in v else sum(int(s["dim"]) for s in v["shards"])
            except (KeyError, TypeError, ValueError, IndexError):
                return f"table {i}: the plan's view is malformed"
            if vd != d:
                return f"table {i} has dim {vd} in the plan, dim {d} here"
    if check_plan and rec.plan is not None:
        try:
            plan_view(tables, rec.plan)
        except InvalidPlanError as e:
            return f"the plan does not fit these tables ({e})"
    return None


def check_plan_tables(rec: PlanRecord, tables: Sequence[ShardTable], path, task: str) -> None:
    """InputError naming the plans file, the task (`task`, in words) and the first mismatch when `rec`
    was not made for `tables` (`plan_mismatch`)."""
    problem = plan_mismatch(rec, tables)
    if problem is not None:
        raise InputError(path, f"task {rec.task} [{rec.alg}]: not a plan of {task}: {problem} "
                               "(plans made for another task file or table list?)")


def read_measured_plans(path, tasks: Sequence, configs: Sequence, task_path) -> list[PlanRecord]:
    """The plan records of `path` (a measured results file) checked against the task file `task_path`
    (`tasks`, over dataset `configs`). InputError naming the file: a task the task file does not have, a
    plan made for other tables than its task's (`check_plan_tables`), or no measured plan at all (e.g.
    a plans file given where measured results were meant)."""
    records = read_plans(path)
    for rec in records:
        if rec.task >= len(tasks):
            raise InputError(path, f"task {rec.task} [{rec.alg}]: the task file {task_path} has only "
                                   f"{len(tasks)} tasks")
        if rec.plan is not None:
            check_plan_tables(rec, tasks[rec.task].tables(configs), path, f"task {rec.task} of {task_path}")
    if not any(rec.measured is not None for rec in records):
        raise InputError(path, f"no measured plan among its {len(records)} records (a plans file, not measured "
                               "results?)")
    return records


def _plan_from_json(path, where: str, d) -> Plan:
    if not isinstance(d, dict):
        raise InputError(path, f"{where}: \"plan\" must be an object, got {show_value(json.dumps(d))}")
    steps, shards = d.get("column_steps"), d.get("shards")

    def int_list(x):
        return isinstance(x, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in x)

    if not int_list(steps):
        raise InputError(path, f"{where}: \"column_steps\" must be a list of table indices, "
                               f"got {show_value(json.dumps(steps))}")
    if not isinstance(shards, list) or not all(int_list(s) for s in shards):
        raise InputError(path, f"{where}: \"shards\" must be a list of lists of table indices, "
                               f"got {show_value(json.dumps(shards))}")
    try:
        return Plan.from_json(d)
    except (KeyError, TypeError, ValueError) as e:  # the spread tables: each {"table", "kind", "ranks"}
        raise InputError(path, f"{where}: malformed \"spread\" ({type(e).__name__}: {e}), expected "
                               f"[{{\"table\": t, \"kind\": ..., \"ranks\": [...]}}, ...]") from None


# --------------------------------------------------------------------------- measurement log


def format_measurement(key: str, measurement: PlanMeasurement) -> str:
    """One line of eval.py's measurement log (no newline): `{"key": plan identity, "m": measurement}`."""
    return json.dumps({"key": key, "m": measurement.to_json()}, separators=(",", ":"), default=json_default)


def read_measurements(path) -> dict[str, PlanMeasurement]:
    """eval.py's append-only measurement log: plan identity -> the job's raw measurement of it.

    One JSON object per line (`format_measurement`); a torn last line is
    skipped with a warning; a missing file is an empty log.
    """
    path = Path(path)
    if not path.exists():
        return {}
    out = {}
    for n, line in read_lines_tolerant(path):
        try:
            rec = json.loads(line)
            key = rec["key"]
            if not isinstance(key, str) or not isinstance(rec["m"], dict):
                raise TypeError
            out[key] = PlanMeasurement.from_json(rec["m"])
        except (ValueError, KeyError, TypeError):
            raise InputError(path, f"not a measurement record: {show_value(line)}", n) from None
    return out
