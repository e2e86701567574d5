"""The report on the learned baselines (DreamShard, AutoShard): their training and their cost beside
`random`'s."""

from __future__ import annotations

from pathlib import Path

from neuroshard.eval.summary import Summary
from neuroshard.pipeline.report.report_common import fmt_ms, load_json, rows_by_alg, signed_pct

LEARNED = ("dreamshard", "autoshard")


def learned_table(out: Path, sim: Summary | None, hw: Summary | None) -> tuple[str, list[dict]]:
    """Markdown: each trained learned baseline's training (oracle, time, plans measured) and its
    held-out cost next to `random`'s, in the simulator and on hardware (gain = (random - it) / random)."""
    rows = []
    for name in LEARNED:
        cfg = load_json(out / "models" / f"{name}_config.json")
        if not cfg:
            continue
        row = {"alg": name, "oracle": cfg.get("oracle"), "training_s": cfg.get("training_s"),
               "oracle_plans": cfg.get("oracle_plans"), "train_tasks": cfg.get("train_tasks"),
               "train_greedy_sim_ms": cfg.get("train_greedy_sim_ms"), "curve": cfg.get("curve_png")}
        for where, s in (("sim", sim), ("hw", hw)):
            by = rows_by_alg(s)
            mine = by[name].mean_common if name in by else None
            rnd = by["random"].mean_common if "random" in by else None
            row[f"{where}_ms"] = mine
            row[f"{where}_vs_random"] = (rnd - mine) / rnd if mine is not None and rnd else None
        rows.append(row)
    lines = ["| policy | oracle | training s | plans measured | training tasks (greedy, sim ms) | simulator ms "
             "| gain over random (sim) | hardware ms | gain over random (hw) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['alg']} | {r['oracle']} | {fmt_ms(r['training_s'])} | {r['oracle_plans']} "
                     f"| {r['train_tasks']} ({fmt_ms(r['train_greedy_sim_ms'])}) | {fmt_ms(r['sim_ms'])} "
                     f"| {signed_pct(r['sim_vs_random'])} | {fmt_ms(r['hw_ms'])} | {signed_pct(r['hw_vs_random'])} |")
    return "\n".join(lines) + "\n", rows
