"""The report's figures (`plots/*.png`): the cost per algorithm with its intervals, and the search times."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from neuroshard.eval.summary import Summary
from neuroshard.pipeline.report.report_common import load_json, rows_by_alg


def write_plots(out: Path, sim: Summary | None, hw: Summary | None) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    plots = out / "plots"
    plots.mkdir(exist_ok=True)
    algs = list(rows_by_alg(sim or hw))
    if algs:
        fig, ax = plt.subplots(figsize=(7, 3.5), dpi=120)
        x = np.arange(len(algs))
        for off, (label, s) in zip((-0.2, 0.2), (("simulator", sim), ("hardware", hw))):
            if s:
                by = rows_by_alg(s)
                means = np.array([by[a].mean_common if a in by and by[a].mean_common is not None else 0.0
                                  for a in algs])
                # the 95% interval of each mean as error bars (none where there is none)
                ci = np.array([by[a].mean_common_ci if a in by and by[a].mean_common_ci else [m, m]
                               for a, m in zip(algs, means)], dtype=float)
                yerr = np.clip(np.stack([means - ci[:, 0], ci[:, 1] - means]), 0.0, None)
                ax.bar(x + off, means, width=0.4, label=label, yerr=yerr, capsize=2, error_kw={"elinewidth": 0.8})
        ax.set_xticks(x, algs, rotation=20, fontsize=8)
        ax.set_ylabel("mean embedding cost (ms), 95% CI")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(plots / "cost_per_algorithm.png")
        plt.close(fig)
        made.append("plots/cost_per_algorithm.png")
    results = load_json(out / "sim" / "results.json")
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
