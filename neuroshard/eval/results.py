"""Results of an evaluation: the comparison across algorithms, the simulator's accuracy, and the writers.

One module for both evaluations: `eval_simulator.py` summarises the
simulated cost of each plan record, `eval.py` the measured cost beside the
simulated one (and, in end-to-end mode, the end-to-end step). Both write
the same files through `write_outputs`, with columns chosen by what the
records hold: config.json, plans.json, results.json/.csv, summary.json/.csv/.md
and, for measured plans, ranks.csv. Costs in ms.
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from neuroshard.eval.intervals import exceeds_repeat_noise, mean_interval, paired_difference, verdict
from neuroshard.types import PlanRecord

REFERENCE_ALG = "neuroshard"
CONFIG_JSON = "config.json"
PLANS_JSON = "plans.json"
RESULTS_JSON = "results.json"
RESULTS_CSV = "results.csv"
RANKS_CSV = "ranks.csv"
SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"


# --------------------------------------------------------------------------- the comparison


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def _median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.median(xs)) if xs else None


def _finite(x):
    return float(x) if x is not None and math.isfinite(x) else None


def summarize(records: Sequence[PlanRecord], algs: Sequence[str], num_tasks: int,
              cost_key: str = "estimated_cost", reference: str = REFERENCE_ALG) -> dict:
    """The comparison table: per algorithm, upstream's Average and Valid v / N, and the fair comparison.

    `cost_key`: the record attribute compared ("estimated_cost", "cost" for
    the measured cost, "e2e_cost"). `average`: mean cost over the tasks
    where that algorithm's plan is valid (upstream's Average); `mean_common`:
    mean over the tasks valid for every algorithm; `rank`: order of
    `mean_common` (1 = cheapest); `neuroshard_gain`: the reference's relative
    improvement over that algorithm on the common tasks, `(alg - neuroshard)
    / alg` (a fraction); search times in ms.
    """
    def cost(r):
        return getattr(r, cost_key)

    by_alg = {a: {r.task: r for r in records if r.alg == a} for a in algs}
    valid = {a: {t for t, r in rs.items() if cost(r) is not None} for a, rs in by_alg.items()}
    common = sorted(set.intersection(*valid.values())) if valid else []
    rows = []
    for a in algs:
        rs = by_alg[a]
        ok = [rs[t] for t in sorted(valid[a])]
        rows.append({
            "alg": a, "valid": len(ok), "tasks": num_tasks,
            "oom": sum(1 for r in rs.values() if r.status == "oom"),
            "invalid": sum(1 for r in rs.values() if r.status == "invalid"),
            "average": _mean(cost(r) for r in ok),
            "mean_common": _mean(cost(rs[t]) for t in common),
            "median_search_ms": _median(r.search_ms for r in rs.values()),
            "mean_search_ms": _mean(r.search_ms for r in rs.values()),
            "mean_splits": _mean(r.num_splits for r in ok),
        })
    ranked = sorted((r for r in rows if r["mean_common"] is not None), key=lambda r: r["mean_common"])
    for i, r in enumerate(ranked):
        r["rank"] = i + 1
    ref = next((r for r in rows if r["alg"] == reference), None)
    beats, verdicts = {}, {}
    if common:
        ref_costs = _repeat_matrix([by_alg[reference][t] for t in common], cost_key) if ref else None
        for r in rows:
            costs = _repeat_matrix([by_alg[r["alg"]][t] for t in common], cost_key)
            iv = mean_interval(costs)
            r["mean_common_ci"] = [iv.lo, iv.hi]
            if ref is None:
                continue
            if r["mean_common"]:
                r["neuroshard_gain"] = (r["mean_common"] - ref["mean_common"]) / abs(r["mean_common"])
            if r["alg"] != reference:
                a, b = _same_repeats(ref_costs, costs)
                diff = paired_difference(a, b)
                verdicts[r["alg"]] = verdict(diff)
                beats[r["alg"]] = verdicts[r["alg"]] == "beats"
                r["vs_reference"] = {"diff_ms": diff.to_json(), "verdict": verdicts[r["alg"]],
                                     "gain_ci": [diff.lo / abs(r["mean_common"]), diff.hi / abs(r["mean_common"])]
                                     if r["mean_common"] else None}
    return {"tasks": num_tasks, "common_tasks": len(common), "cost": cost_key, "reference": reference,
            "algorithms": rows, "ranking": [r["alg"] for r in ranked], "neuroshard_beats": beats,
            "verdicts": verdicts}


def _repeat_matrix(records: Sequence[PlanRecord], cost_key: str) -> list[list[float]]:
    """costs[task][repeat] of records (one per task); tasks with another repeat count than the
    first (an evaluation merged from runs with different --repeats) enter with their mean."""
    rows = [r.costs(cost_key) for r in records]
    if len({len(x) for x in rows}) > 1:
        rows = [[float(np.mean(x))] for x in rows]
    return rows


def _same_repeats(a: list, b: list) -> tuple[list, list]:
    """Pair two cost matrices repeat by repeat; if their repeat counts differ, task means."""
    if len(a[0]) != len(b[0]):
        return [[float(np.mean(x))] for x in a], [[float(np.mean(x))] for x in b]
    return a, b


def simulator_accuracy(records: Sequence[PlanRecord], cost_key: str = "cost") -> dict:
    """How well the simulator's estimates match the hardware, over every measured plan.

    `mape` and `spearman` of estimated vs measured plan cost (`cost_key`:
    "cost" for the sum of parts, "e2e_cost" for the end-to-end step);
    `pair_agreement`: for every task and every pair of algorithms with both
    plans measured, the share where the simulator orders the two plans as
    the hardware does. Pairs with the same plan, or with estimates within
    1e-9 ms, say nothing about ordering and are left out (`pairs_tied`).
    `parts`: MAPE and Spearman of the per-rank compute, backward comm,
    forward comm and total (all ranks of all plans) show where errors come from.
    """
    from neuroshard.train.metrics import regression_metrics

    done = [r for r in records if getattr(r, cost_key) is not None and r.estimated_cost is not None]
    out: dict = {"cost": cost_key, "plans": len(done), "mape": None, "spearman": None,
                 "pair_agreement": None, "pairs": 0, "pairs_tied": 0, "parts": {}}
    if not done:
        return out
    est = np.array([r.estimated_cost for r in done])
    meas = np.array([getattr(r, cost_key) for r in done])
    m = regression_metrics(est, meas)
    out.update(mape=_finite(m["mape"]), spearman=_finite(m["spearman"]),
               mean_estimated=float(est.mean()), mean_measured=float(meas.mean()))
    if cost_key == "cost":
        for part in ("compute", "bw_comm", "fw_comm", "total"):
            pe, pm = [], []
            for r in done:
                e, mm = getattr(r.estimate, part), getattr(r.measured, part)
                if len(e) == len(mm):
                    pe += list(e)
                    pm += list(mm)
            if pe:
                pm_ = regression_metrics(pe, pm)
                out["parts"][part] = {"mape": _finite(pm_["mape"]), "spearman": _finite(pm_["spearman"]),
                                      "n": pm_["n"]}

    agree = total = tied = 0
    beyond = agree_beyond = 0
    by_task: dict[int, list[PlanRecord]] = {}
    for r in done:
        by_task.setdefault(r.task, []).append(r)
    for rs in by_task.values():
        for a, b in itertools.combinations(rs, 2):
            if a.plan_key == b.plan_key or abs(a.estimated_cost - b.estimated_cost) <= 1e-9:
                tied += 1
                continue
            total += 1
            same = (a.estimated_cost < b.estimated_cost) == (getattr(a, cost_key) < getattr(b, cost_key))
            agree += same
            # pairs whose measured difference exceeds their repeat noise (needs >= 2 repeats)
            if exceeds_repeat_noise(a.costs(cost_key), b.costs(cost_key)):
                beyond += 1
                agree_beyond += same
    repeats = min(len(r.costs(cost_key)) for r in done)
    out.update(pairs=total, pairs_tied=tied, pair_agreement=agree / total if total else None,
               pairs_beyond_noise=beyond if repeats >= 2 else None,
               pair_agreement_beyond_noise=agree_beyond / beyond if beyond else None)
    return out


def hardware_summary(records: Sequence[PlanRecord], algs: Sequence[str], num_tasks: int) -> dict:
    """The comparison across algorithms on measured costs, beside the simulator's, and its accuracy.

    The table is `summarize`'s on the measured cost; each row adds the same
    figures for the simulator's estimate of the same plans (`*_estimated`)
    and, in end-to-end mode, for the end-to-end step (`*_e2e`).
    """
    from neuroshard.train.metrics import spearman

    hw = summarize(records, algs, num_tasks, cost_key="cost")
    sim = summarize(records, algs, num_tasks, cost_key="estimated_cost")
    e2e = any(r.e2e_cost is not None for r in records)
    e2e_sum = summarize(records, algs, num_tasks, cost_key="e2e_cost") if e2e else None
    for k, row in enumerate(hw["algorithms"]):
        for suffix, other in (("estimated", sim), ("e2e", e2e_sum)):
            if other is None:
                continue
            o = other["algorithms"][k]
            for key in ("average", "mean_common", "rank", "neuroshard_gain"):
                row[f"{key}_{suffix}"] = o.get(key)
    greedy = {a: b for a, b in hw["neuroshard_beats"].items() if a.endswith("_greedy")}
    summary = {**hw, "simulator_ranking": sim["ranking"],
               "neuroshard_beats_every_greedy": all(greedy.values()) if greedy else None,
               "simulator_accuracy": simulator_accuracy(records)}
    if e2e:
        summary["e2e_ranking"] = e2e_sum["ranking"]
        summary["simulator_accuracy_e2e"] = simulator_accuracy(records, "e2e_cost")
        pairs = [(r.e2e_cost, r.cost) for r in records if r.e2e_cost is not None and r.cost is not None]
        if pairs:
            e, c = np.array(pairs).T
            summary["e2e_vs_parts"] = {"plans": len(pairs), "mean_ratio": float(np.mean(e / c)),
                                       "spearman": _finite(spearman(e, c))}
    return summary


# --------------------------------------------------------------------------- text


def fmt(x, digits: int = 3, pct: bool = False) -> str:
    """A number for a table: "-" for missing or non-finite, a signed percentage with `pct`."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{100 * x:+.1f}%" if pct else f"{x:.{digits}f}"


def fmt_ci(x, ci, digits: int = 3) -> str:
    """"12.345 [11.900, 12.800]": a mean with its interval ("-" when missing)."""
    if x is None:
        return "-"
    return fmt(x, digits) + (f" [{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]" if ci else "")


def gain_cell(row: dict) -> str:
    """The reference's relative gain over an algorithm with its interval: "+12.3% [+5.1%, +19.0%]"."""
    gain = fmt(row.get("neuroshard_gain"), pct=True)
    ci = (row.get("vs_reference") or {}).get("gain_ci")
    return gain + (f" [{fmt(ci[0], pct=True)}, {fmt(ci[1], pct=True)}]" if ci else "")


def _pct(x, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def _is_hardware(summary: dict) -> bool:
    return "simulator_accuracy" in summary


def summary_markdown(summary: dict) -> str:
    """The comparison table as Markdown; for measured plans also the estimated (and end-to-end)
    columns and the simulator's accuracy."""
    ref = summary.get("reference", REFERENCE_ALG)
    hw, e2e = _is_hardware(summary), "e2e_ranking" in summary
    columns: list[tuple[str, Callable[[dict], str]]] = [
        ("algorithm", lambda r: r["alg"]),
        ("valid", lambda r: f"{r['valid']} / {r['tasks']}"),
        ("average ms", lambda r: fmt(r["average"])),
        (f"mean ms (common {summary['common_tasks']}) [95% CI]", lambda r: fmt_ci(r["mean_common"],
                                                                               r.get("mean_common_ci"))),
        ("rank", lambda r: str(r.get("rank", "-"))),
        (f"{ref} gain [95% CI]", lambda r: "" if r["alg"] == ref else gain_cell(r)),
        (f"{ref} vs it", lambda r: "" if r["alg"] == ref else (r.get("vs_reference") or {}).get("verdict", "-")),
    ]
    if hw:
        columns += [("estimated ms (common)", lambda r: fmt(r.get("mean_common_estimated"))),
                    ("sim rank", lambda r: str(r.get("rank_estimated") or "-"))]
    if e2e:
        columns += [("end-to-end ms (common)", lambda r: fmt(r.get("mean_common_e2e"))),
                    ("e2e rank", lambda r: str(r.get("rank_e2e") or "-"))]
    if not hw:
        columns.append(("median search ms", lambda r: fmt(r["median_search_ms"], 1)))
    lines = ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    for r in summary["algorithms"]:
        lines.append("| " + " | ".join(cell(r) for _, cell in columns) + " |")
    if hw:
        lines.append("")
        for key, what in (("simulator_accuracy", "sum of parts"), ("simulator_accuracy_e2e", "end-to-end")):
            acc = summary.get(key)
            if not acc:
                continue
            beyond = ""
            if acc.get("pairs_beyond_noise") is not None:
                beyond = (f"; in {_pct(acc.get('pair_agreement_beyond_noise'))} of the "
                          f"{acc['pairs_beyond_noise']} pairs whose measured difference exceeds the repeat noise")
            lines.append(f"Simulator vs hardware ({what}) over {acc['plans']} measured plans: MAPE "
                         f"{_pct(acc['mape'])}, Spearman {fmt(acc['spearman'])}, same order as the hardware in "
                         f"{_pct(acc['pair_agreement'])} of {acc['pairs']} (task, algorithm pair) cases "
                         f"({acc['pairs_tied']} ties left out){beyond}.")
            parts = acc.get("parts") or {}
            if parts:
                lines.append("Per-rank MAPE: " + ", ".join(f"{k} {_pct(v['mape'])}" for k, v in parts.items())
                             + ".")
        if "e2e_vs_parts" in summary:
            ev = summary["e2e_vs_parts"]
            lines.append(f"End-to-end step / sum-of-parts cost: mean ratio {ev['mean_ratio']:.2f}, "
                         f"Spearman {fmt(ev['spearman'])} over {ev['plans']} plans.")
    return "\n".join(lines) + "\n"


def print_summary(summary: dict, file=None) -> None:
    """Upstream's closing lines per algorithm (Average, Valid v / N), then the comparison table
    when there are several algorithms or measured plans."""
    file = file or sys.stdout
    rows = summary["algorithms"]
    for r in rows:
        if len(rows) > 1:
            print(f"[{r['alg']}]", file=file)
        print(f"Average: {fmt(r['average'], 4)}", file=file)
        print(f"Valid {r['valid']} / {r['tasks']}", file=file)
    if len(rows) > 1 or _is_hardware(summary):
        print(file=file)
        print(summary_markdown(summary), file=file, end="")


def format_measured(rec: PlanRecord, num_tasks: int) -> str:
    """One line per task and algorithm: the measured cost, the estimate and the per-rank parts."""
    from neuroshard.eval.plans import format_record

    if rec.cost is None:
        return format_record(rec, num_tasks)
    m = rec.measured
    ranks = " ".join(f"{c:.2f}/{b:.2f}/{f:.2f}" for c, b, f in zip(m.compute, m.bw_comm, m.fw_comm))
    est = "-" if rec.estimated_cost is None else f"{rec.estimated_cost:.4f}"
    line = (f"Task {rec.task + 1}/{num_tasks} [{rec.alg}] Latency: {rec.cost:.4f} ms "
            f"(estimated {est} ms; per rank compute/bw/fw ms: {ranks})")
    if rec.e2e_cost is not None:
        line += f" end-to-end {rec.e2e_cost:.4f} ms"
    return line


# --------------------------------------------------------------------------- files


def _max(bd, part):
    return None if bd is None else max(getattr(bd, part))


# results.csv: (header, value) per column; measured plans get the measured columns too
_SIM_COLUMNS = [
    ("task", lambda r: r.task), ("alg", lambda r: r.alg), ("status", lambda r: r.status),
    ("estimated_ms", lambda r: r.estimated_cost),
    ("compute_max_ms", lambda r: _max(r.estimate, "compute")),
    ("bw_comm_max_ms", lambda r: _max(r.estimate, "bw_comm")),
    ("fw_comm_max_ms", lambda r: _max(r.estimate, "fw_comm")),
    ("search_ms", lambda r: r.search_ms), ("num_tables", lambda r: r.num_tables),
    ("num_splits", lambda r: r.num_splits), ("message", lambda r: r.message or "")]
_HW_COLUMNS = [
    ("task", lambda r: r.task), ("alg", lambda r: r.alg), ("status", lambda r: r.status),
    ("cost_ms", lambda r: r.cost), ("estimated_ms", lambda r: r.estimated_cost), ("e2e_ms", lambda r: r.e2e_cost),
    ("compute_max_ms", lambda r: _max(r.measured, "compute")),
    ("bw_comm_max_ms", lambda r: _max(r.measured, "bw_comm")),
    ("fw_comm_max_ms", lambda r: _max(r.measured, "fw_comm")),
    ("search_ms", lambda r: r.search_ms), ("num_tables", lambda r: r.num_tables),
    ("num_splits", lambda r: r.num_splits), ("message", lambda r: r.message or "")]

SUMMARY_COLUMNS = ["alg", "valid", "tasks", "oom", "invalid", "average", "mean_common", "rank",
                   "neuroshard_gain", "verdict", "median_search_ms", "mean_search_ms", "mean_splits"]
HW_SUMMARY_COLUMNS = ["alg", "valid", "tasks", "oom", "invalid", "average", "mean_common", "rank",
                      "neuroshard_gain", "verdict", "average_estimated", "mean_common_estimated", "rank_estimated",
                      "neuroshard_gain_estimated", "average_e2e", "mean_common_e2e", "rank_e2e",
                      "neuroshard_gain_e2e", "median_search_ms", "mean_splits"]


def _rank_rows(records: Sequence[PlanRecord]):
    """One row per rank of each measured plan: measured parts beside the estimated ones."""
    for r in records:
        m, e = r.measured, r.estimate
        if m is None:
            continue
        n = len(m.compute)

        def est(part, q):
            v = None if e is None else getattr(e, part) if part != "total" else e.total
            return v[q] if v is not None and len(v) == n else None

        for q in range(n):
            yield [r.task, r.alg, q, m.ntables[q], m.dims[q], m.compute[q], m.bw_comm[q],
                   m.fw_comm[q], m.total[q], m.fw_comm_nosleep[q], m.skew[q],
                   est("compute", q), est("bw_comm", q), est("fw_comm", q), est("total", q)]


def write_outputs(out_dir, records: Sequence[PlanRecord], summary: dict, config: dict | None = None,
                  plans: bool = True) -> None:
    """config.json (when given), plans.json (with the readable view; unless `plans` is False, as for
    measured plans, whose plans.json was written before the job), results.json/.csv,
    summary.json/.csv/.md, and ranks.csv when the plans were measured."""
    from neuroshard.formats.io import atomic_write, write_csv, write_json_atomic
    from neuroshard.formats.plans import write_plans

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hw = _is_hardware(summary)
    if config is not None:
        write_json_atomic(out / CONFIG_JSON, config)
    if plans:
        write_plans(out / PLANS_JSON, records)
    write_json_atomic(out / RESULTS_JSON, [r.to_json(view=False, measured=hw) for r in records])
    columns = _HW_COLUMNS if hw else _SIM_COLUMNS
    write_csv(out / RESULTS_CSV, [h for h, _ in columns], ([get(r) for _, get in columns] for r in records))
    if hw:
        write_csv(out / RANKS_CSV, ["task", "alg", "rank", "ntables", "dim_sum", "compute_ms", "bw_comm_ms",
                                    "fw_comm_ms", "total_ms", "fw_comm_nosleep_ms", "skew_ms", "est_compute_ms",
                                    "est_bw_comm_ms", "est_fw_comm_ms", "est_total_ms"], _rank_rows(records))
    write_json_atomic(out / SUMMARY_JSON, summary)
    names = HW_SUMMARY_COLUMNS if hw else SUMMARY_COLUMNS
    write_csv(out / SUMMARY_CSV, names, ([(r.get("vs_reference") or {}).get("verdict") if c == "verdict"
                                          else r.get(c) for c in names] for r in summary["algorithms"]))
    with atomic_write(out / SUMMARY_MD) as fh:
        fh.write(summary_markdown(summary))
