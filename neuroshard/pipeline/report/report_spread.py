"""The report on the row-wise, table-row-wise and data-parallel tables ("spread" tables): which plans have
them, their collectives estimated against measured, and the collective model's fit beside the cost models."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from neuroshard.numerics import mape
from neuroshard.pipeline.report.report_common import load_json
from neuroshard.types.records import PlanRecord


def spread_choices(records: list[PlanRecord] | None) -> list[str]:
    """One line: how many of each algorithm's plans have row-wise, table-row-wise or data-parallel tables, and
    how many such tables (nothing when no plan has one)."""
    plans, kinds = Counter(), {}
    for r in records or []:
        if r.plan is not None and r.plan.spread:
            plans[r.alg] += 1
            kinds.setdefault(r.alg, Counter()).update(s.kind for s in r.plan.spread)
    if not plans:
        return []
    parts = [f"{alg} in {n} plans ({', '.join(f'{c} {k}' for k, c in sorted(kinds[alg].items()))})"
             for alg, n in plans.items()]
    return [f"- Row-wise, table-row-wise and data-parallel tables: {'; '.join(parts)}."]


def collective_check(records: list[PlanRecord] | None) -> list[str]:
    """One line: the collective model against the measured collectives of the plans with row-wise or
    data-parallel tables (each rank's forward + backward collectives; nothing without such plans)."""
    pairs = [(sum(e), sum(m)) for r in records or [] if r.estimate is not None and r.measured is not None
             and r.estimate.collectives and r.measured.collectives
             for e, m in zip(r.estimate.collectives, r.measured.collectives) if sum(m) > 0]
    if not pairs:
        return []
    est, got = np.array(pairs).T
    plans = sum(1 for r in records if r.measured is not None and r.measured.collectives)
    err = 100 * mape(est, got)
    return [f"- The collectives of those plans ({plans} measured, {len(pairs)} ranks): estimated "
            f"{est.mean():.2f} ms a rank, measured {got.mean():.2f} ms (MAPE {err:.1f}%)."]


def collective_lines(models_dir: Path, rows: list[dict]) -> list[str]:
    """Markdown on the collective model of step 3e (the paper runtime's row-wise, table-row-wise and
    data-parallel tables): per collective and group its form and held-out MAPE beside the noise floor, appended
    to `rows`; nothing without one."""
    lines = []
    for path in sorted(models_dir.glob("collectives_*.json")):
        raw = load_json(path) or {}
        for key, fit in (raw.get("fits") or {}).items():
            op, _, k = key.partition("@")
            group = f"{raw.get('ndevices')} ranks" if not k else f"each host's {k} of {raw.get('ndevices')} ranks"
            err, floor = fit["test_mape"][fit["form"]], fit.get("noise_floor")
            rows.append({"model": f"{op} ({group})", "form": fit["form"], "samples": fit["samples"],
                         "mape": err / 100, "noise_floor": None if floor is None else floor / 100})
            ratio = f"{err / floor:.2f}" if floor else "-"
            lines.append(f"| {op} ({group}, {fit['form']}) | {fit['samples']} | - | "
                         f"{err:.1f}% | - | {'-' if floor is None else f'{floor:.1f}%'} | {ratio} |")
    if not lines:
        return []
    return ["", "The collectives of row-wise, table-row-wise and data-parallel tables on the paper's runtime (step 3e, "
                "`collect_collective_cost_data.py`: each a linear, power or hinge law of the elements it moves, "
                "whichever predicted held-out samples best):", "",
            "| collective | samples | - | held-out MAPE | - | noise floor | MAPE / noise floor |",
            "|---|---|---|---|---|---|---|", *lines]
