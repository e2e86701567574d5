"""The pipeline's report: `report.md`, plots and `config.json` in the run's folder.

Reads what the steps wrote (simulator and hardware `summary.json`, the cost
models' `*_metrics.json`, the plan records with search times) and puts the
paper-style comparison next to the cost-model accuracy.
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

import numpy as np

from neuroshard.formats import atomic_write, write_json_atomic


def _load(path: Path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError):
        return None


def library_versions() -> dict:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("torch", "fbgemm-gpu-cpu", "fbgemm-gpu", "numpy", "tqdm", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def _ms(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def comparison_table(sim: dict | None, hw: dict | None) -> tuple[str, dict]:
    """Markdown: per algorithm the mean cost in the simulator and on hardware (over the tasks
    valid for every algorithm), NeuroShard's improvement over it, and the valid counts."""
    algs: list[str] = []
    for s in (sim, hw):
        for r in (s or {}).get("algorithms", []):
            if r["alg"] not in algs:
                algs.append(r["alg"])
    rows = {name: {r["alg"]: r for r in (s or {}).get("algorithms", [])} for name, s in (("sim", sim), ("hw", hw))}
    lines = ["| algorithm | simulator ms | NeuroShard gain (sim) | hardware ms | NeuroShard gain (hw) | valid (sim) "
             "| valid (hw) |", "|---|---|---|---|---|---|---|"]
    for a in algs:
        s, h = rows["sim"].get(a, {}), rows["hw"].get(a, {})
        gain_s = "" if a == "neuroshard" else _pct(s.get("neuroshard_gain"))
        gain_h = "" if a == "neuroshard" else _pct(h.get("neuroshard_gain"))
        valid = lambda r: f"{r['valid']} / {r['tasks']}" if r else "-"  # noqa: E731
        lines.append(f"| {a} | {_ms(s.get('mean_common'))} | {gain_s} | {_ms(h.get('mean_common'))} | {gain_h} "
                     f"| {valid(s)} | {valid(h)} |")
    beats = {name: (s or {}).get("neuroshard_beats") for name, s in (("simulator", sim), ("hardware", hw))}
    return "\n".join(lines) + "\n", beats


def accuracy_table(acc: dict) -> str:
    """Markdown: how well the simulator's estimates match the measured plan costs and parts."""
    pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    num = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    lines = ["| what | MAPE | Spearman | n |", "|---|---|---|---|",
             f"| plan cost | {pct(acc.get('mape'))} | {num(acc.get('spearman'))} | {acc.get('plans')} |"]
    for part, m in acc.get("parts", {}).items():
        lines.append(f"| per-rank {part} | {pct(m.get('mape'))} | {num(m.get('spearman'))} | {m.get('n')} |")
    lines.append("")
    lines.append(f"The simulator orders two algorithms' plans for the same task as the hardware does in "
                 f"{pct(acc.get('pair_agreement'))} of {acc.get('pairs')} cases "
                 f"({acc.get('pairs_tied', 0)} ties left out).")
    return "\n".join(lines) + "\n"


LEARNED = ("dreamshard", "autoshard")


def learned_table(out: Path, sim: dict | None, hw: dict | None) -> tuple[str, list[dict]]:
    """Markdown: each trained learned baseline's training (oracle, time, plans measured) and its
    held-out cost next to `random`'s, in the simulator and on hardware (gain = (random - it) / random)."""
    rows = []
    for name in LEARNED:
        cfg = _load(out / "models" / f"{name}_config.json")
        if not cfg:
            continue
        row = {"alg": name, "oracle": cfg.get("oracle"), "training_s": cfg.get("training_s"),
               "oracle_plans": cfg.get("oracle_plans"), "train_tasks": cfg.get("train_tasks"),
               "train_greedy_sim_ms": cfg.get("train_greedy_sim_ms"), "curve": cfg.get("curve_png")}
        for where, s in (("sim", sim), ("hw", hw)):
            by = {r["alg"]: r for r in (s or {}).get("algorithms", [])}
            mine, rnd = by.get(name, {}).get("mean_common"), by.get("random", {}).get("mean_common")
            row[f"{where}_ms"] = mine
            row[f"{where}_vs_random"] = (rnd - mine) / rnd if mine is not None and rnd else None
        rows.append(row)
    lines = ["| policy | oracle | training s | plans measured | training tasks (greedy, sim ms) | simulator ms "
             "| gain over random (sim) | hardware ms | gain over random (hw) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['alg']} | {r['oracle']} | {_ms(r['training_s'])} | {r['oracle_plans']} "
                     f"| {r['train_tasks']} ({_ms(r['train_greedy_sim_ms'])}) | {_ms(r['sim_ms'])} "
                     f"| {_pct(r['sim_vs_random'])} | {_ms(r['hw_ms'])} | {_pct(r['hw_vs_random'])} |")
    return "\n".join(lines) + "\n", rows


def model_table(out: Path) -> tuple[str, list[dict]]:
    """Markdown: test MSE, MAPE, Spearman of each cost model next to its measured noise floor."""
    rows = []
    for name, path in (("compute", out / "models" / "compute_metrics.json"),
                       *[(f"comm {k}", p) for p in sorted((out / "models").glob("comm_*_metrics.json"))
                         for k in [p.name.split("_")[2]]]):
        m = _load(path)
        if not m:
            continue
        test = m["metrics"]["test"]
        noise = m.get("noise_floor")
        noise_val = noise.get("median") if isinstance(noise, dict) else noise
        rows.append({"model": name, "samples": m.get("num_samples"), "mse": test["mse"], "mape": test["mape"],
                     "spearman": test["spearman"], "noise_floor": noise_val, "scatter": m.get("scatter")})
    lines = ["| model | samples | test MSE (ms²) | test MAPE | Spearman | noise floor (median rel. diff.) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        nf = "-" if r["noise_floor"] is None else f"{100 * r['noise_floor']:.1f}%"
        lines.append(f"| {r['model']} | {r['samples']} | {r['mse']:.4g} | {100 * r['mape']:.1f}% | "
                     f"{r['spearman']:.3f} | {nf} |")
    return "\n".join(lines) + "\n", rows


def _plots(out: Path, sim: dict | None, hw: dict | None) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    plots = out / "plots"
    plots.mkdir(exist_ok=True)
    algs = [r["alg"] for r in (sim or hw or {}).get("algorithms", [])]
    if algs:
        fig, ax = plt.subplots(figsize=(7, 3.5), dpi=120)
        x = np.arange(len(algs))
        for off, (label, s) in zip((-0.2, 0.2), (("simulator", sim), ("hardware", hw))):
            if s:
                by = {r["alg"]: r.get("mean_common") for r in s["algorithms"]}
                ax.bar(x + off, [by.get(a) or 0 for a in algs], width=0.4, label=label)
        ax.set_xticks(x, algs, rotation=20, fontsize=8)
        ax.set_ylabel("mean embedding cost (ms)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(plots / "cost_per_algorithm.png")
        plt.close(fig)
        made.append("plots/cost_per_algorithm.png")
    results = _load(out / "sim" / "results.json")
    if results:
        times = {}
        for r in results:
            if r.get("search_ms") is not None:
                times.setdefault(r["alg"], []).append(r["search_ms"])
        if times:
            fig, ax = plt.subplots(figsize=(7, 3.5), dpi=120)
            names = [a for a in algs if a in times] or sorted(times)
            ax.boxplot([times[a] for a in names])
            ax.set_xticks(range(1, len(names) + 1), names, rotation=20, fontsize=8)
            ax.set_yscale("log")
            ax.set_ylabel("search time per task (ms)")
            fig.tight_layout()
            fig.savefig(plots / "search_time.png")
            plt.close(fig)
            made.append("plots/search_time.png")
    return made


def write_report(out, preset, steps: list[dict], seconds: float) -> Path:
    """Write report.md, plots/*.png and config.json into `out`; returns the report's path."""
    out = Path(out)
    sim, hw = _load(out / "sim" / "summary.json"), _load(out / "hw" / "summary.json")
    cmp_md, beats = comparison_table(sim, hw)
    models_md, model_rows = model_table(out)
    plots = _plots(out, sim, hw)
    text = [f"# NeuroShard report — preset `{preset.name}`", "",
            f"{preset.ndevices} devices, {preset.max_mem} GB each; tasks of {preset.t_range.replace(',', '–')} "
            f"tables. The steps took {sum(st['seconds'] for st in steps):.0f} s when they ran "
            f"(this run: {seconds:.0f} s; up-to-date steps are skipped). Every command is listed at the end.", "",
            "## Embedding cost per algorithm", "",
            "Mean cost (ms) over the tasks valid for every algorithm; gain = (baseline − NeuroShard) / baseline.", "",
            cmp_md]
    for where, b in beats.items():
        if b:
            losers = [a for a, won in b.items() if not won]
            text.append(f"- {where}: NeuroShard beats " + ("every baseline." if not losers
                                                              else f"all but {', '.join(losers)}."))
    if hw and hw.get("simulator_accuracy"):
        text += ["", "## Simulator vs hardware", "", accuracy_table(hw["simulator_accuracy"])]
    learned_md, learned_rows = learned_table(out, sim, hw)
    if learned_rows:
        text += ["", "## Learned baselines", "",
                 "DreamShard and AutoShard, re-implemented from their released code (shared/BASELINES.md), trained on "
                 "their own tasks (never the evaluation tasks) against the oracle named here, then placing tables "
                 "greedily by the trained policy. Costs are the means over the tasks valid for every algorithm.", "",
                 learned_md]
        for r in learned_rows:
            curve = Path(r["curve"]) if r.get("curve") else None
            if curve is not None and curve.exists() and curve.resolve().is_relative_to(out.resolve()):
                text.append(f"![{r['alg']} training]({curve.resolve().relative_to(out.resolve())})")
    text += ["", "## Cost models", "", models_md, ""]
    for r in model_rows:
        if r.get("scatter"):
            text.append(f"![{r['model']}]({Path(r['scatter']).resolve().relative_to(out.resolve())})"
                        if Path(r["scatter"]).resolve().is_relative_to(out.resolve()) else f"- {r['scatter']}")
    text += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    text += ["", "## Steps", "", "| step | what | seconds | command |", "|---|---|---|---|"]
    for s in steps:
        secs = f"{s['seconds']:.1f}" + (" (earlier run)" if s["skipped"] else "")
        text.append(f"| {s['step']} | {s['title']} | {secs} | `{s['command']}` |")
    report = out / "report.md"
    with atomic_write(report) as fh:
        fh.write("\n".join(text) + "\n")
    write_json_atomic(out / "config.json", {"preset": asdict(preset), "steps": steps, "wall_seconds": seconds,
                                            "versions": library_versions(), "models": model_rows,
                                            "learned": learned_rows,
                                            "neuroshard_beats": beats})
    return report
