"""Results of an evaluation as text and files: the comparison table, the per-task lines, the writers.

One module for both evaluations (the comparison itself is `eval.summary`):
`eval_simulator.py` and `eval.py` write the same files through
`write_outputs`, with columns chosen by what the records hold: config.json,
plans.json, results.json/.csv, summary.json/.csv/.md and, for measured
plans, ranks.csv. Costs in ms.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Callable, Sequence

from neuroshard.eval.summary import AlgorithmRow, Summary
from neuroshard.types.records import PlanRecord

CONFIG_JSON = "config.json"
PLANS_JSON = "plans.json"
RESULTS_JSON = "results.json"
RESULTS_CSV = "results.csv"
RANKS_CSV = "ranks.csv"
SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"


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


def gain_cell(row: AlgorithmRow) -> str:
    """The reference's relative gain over an algorithm with its interval: "+12.3% [+5.1%, +19.0%]"."""
    gain = fmt(row.neuroshard_gain, pct=True)
    ci = None if row.vs_reference is None else row.vs_reference.gain_ci
    return gain + (f" [{fmt(ci[0], pct=True)}, {fmt(ci[1], pct=True)}]" if ci else "")


def _pct(x, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def summary_markdown(summary: Summary) -> str:
    """The comparison table as Markdown; for measured plans also the estimated (and end-to-end)
    columns and the simulator's accuracy."""
    ref = summary.reference
    hw, e2e = summary.is_hardware, summary.e2e_ranking is not None

    def other(r: AlgorithmRow, suffix: str, key: str):
        o = getattr(r, suffix)
        return None if o is None else getattr(o, key)

    columns: list[tuple[str, Callable[[AlgorithmRow], str]]] = [
        ("algorithm", lambda r: r.alg),
        ("valid", lambda r: f"{r.valid} / {r.tasks}"),
        ("average ms", lambda r: fmt(r.average)),
        (f"mean ms (common {summary.common_tasks}) [95% CI]", lambda r: fmt_ci(r.mean_common, r.mean_common_ci)),
        ("rank", lambda r: str(r.rank if r.rank is not None else "-")),
        (f"{ref} gain [95% CI]", lambda r: "" if r.alg == ref else gain_cell(r)),
        (f"{ref} vs it", lambda r: "" if r.alg == ref else (r.verdict or "-")),
    ]
    if hw:
        columns += [("estimated ms (common)", lambda r: fmt(other(r, "estimated", "mean_common"))),
                    ("sim rank", lambda r: str(other(r, "estimated", "rank") or "-"))]
    if e2e:
        columns += [("end-to-end ms (common)", lambda r: fmt(other(r, "e2e", "mean_common"))),
                    ("e2e rank", lambda r: str(other(r, "e2e", "rank") or "-"))]
    if not hw:
        columns.append(("median search ms", lambda r: fmt(r.median_search_ms, 1)))
    lines = ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    for r in summary.algorithms:
        lines.append("| " + " | ".join(cell(r) for _, cell in columns) + " |")
    if hw:
        lines.append("")
        for acc, what in ((summary.simulator_accuracy, "sum of parts"), (summary.simulator_accuracy_e2e, "end-to-end")):
            if not acc:
                continue
            beyond = ""
            if acc.pairs_beyond_noise is not None:
                beyond = (f"; in {_pct(acc.pair_agreement_beyond_noise)} of the "
                          f"{acc.pairs_beyond_noise} pairs whose measured difference exceeds the repeat noise")
            lines.append(f"Simulator vs hardware ({what}) over {acc.plans} measured plans: MAPE "
                         f"{_pct(acc.mape)}, Spearman {fmt(acc.spearman)}, same order as the hardware in "
                         f"{_pct(acc.pair_agreement)} of {acc.pairs} (task, algorithm pair) cases "
                         f"({acc.pairs_tied} ties left out){beyond}.")
            if acc.parts:
                lines.append("Per-rank MAPE: " + ", ".join(f"{k} {_pct(v.mape)}" for k, v in acc.parts.items())
                             + ".")
        if summary.e2e_vs_parts is not None:
            ev = summary.e2e_vs_parts
            lines.append(f"End-to-end step / sum-of-parts cost: mean ratio {ev.mean_ratio:.2f}, "
                         f"Spearman {fmt(ev.spearman)} over {ev.plans} plans.")
    return "\n".join(lines) + "\n"


def print_summary(summary: Summary, file=None) -> None:
    """Upstream's closing lines per algorithm (Average, Valid v / N), then the comparison table
    when there are several algorithms or measured plans."""
    file = file or sys.stdout
    rows = summary.algorithms
    for r in rows:
        if len(rows) > 1:
            print(f"[{r.alg}]", file=file)
        print(f"Average: {fmt(r.average, 4)}", file=file)
        print(f"Valid {r.valid} / {r.tasks}", file=file)
    if len(rows) > 1 or summary.is_hardware:
        print(file=file)
        print(summary_markdown(summary), file=file, end="")


def format_measured(rec: PlanRecord, num_tasks: int) -> str:
    """One line per task and algorithm: the measured cost, the estimate and the per-rank parts."""
    from neuroshard.eval.planning import format_record

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


def write_outputs(out_dir, records: Sequence[PlanRecord], summary: Summary, config: dict | None = None,
                  plans: bool = True) -> None:
    """config.json (when given), plans.json (with the readable view; unless `plans` is False, as for
    measured plans, whose plans.json was written before the job), results.json/.csv,
    summary.json/.csv/.md, and ranks.csv when the plans were measured."""
    from neuroshard.formats.io import atomic_write, write_csv, write_json_atomic
    from neuroshard.formats.plan_file import write_plans

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hw = summary.is_hardware
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
    write_json_atomic(out / SUMMARY_JSON, summary.to_json())
    names = HW_SUMMARY_COLUMNS if hw else SUMMARY_COLUMNS
    write_csv(out / SUMMARY_CSV, names, ([r.verdict if c == "verdict" else row.get(c) for c in names]
                                         for r in summary.algorithms for row in [r.to_json()]))
    with atomic_write(out / SUMMARY_MD) as fh:
        fh.write(summary_markdown(summary))
