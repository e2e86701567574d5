"""Metrics of cost-model predictions (MAPE, Spearman, MSE) and the predicted-vs-measured scatter plot."""

from __future__ import annotations

import numpy as np

from neuroshard.numerics import mape


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(1, len(x) + 1)
    uniq, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    if len(uniq) < len(x):
        sums = np.bincount(inv, weights=ranks)
        ranks = (sums / counts)[inv]
    return ranks


def spearman(a, b) -> float:
    """Spearman rank correlation; nan when either side is constant or too short."""
    a, b = np.ravel(a), np.ravel(b)
    if len(a) < 2:
        return float("nan")
    ra, rb = rankdata(a), rankdata(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def regression_metrics(pred, true) -> dict:
    """MSE (ms²), MAPE (fraction, over targets > 0), Spearman, count, of flattened arrays; targets that are NaN
    (missing: a padded rank) are left out."""
    pred = np.ravel(np.asarray(pred, dtype=np.float64))
    true = np.ravel(np.asarray(true, dtype=np.float64))
    known = np.isfinite(true)
    pred, true = pred[known], true[known]
    mse = float(np.mean((pred - true) ** 2)) if len(true) else float("nan")
    return {"mse": mse, "mape": mape(pred, true), "spearman": spearman(pred, true), "n": int(len(true))}


def ratio_interval(errors, floor_values, level: float = 0.95, draws: int = 2000, seed: int = 0) -> dict:
    """A model's MAPE over the noise floor (mean of `errors` over mean of `floor_values`, each a model's or a
    re-measurement's per-entry relative error) with a percentile bootstrap interval: both sides resampled
    independently, as both are samples. {"ratio", "low", "high", "level"}; raises ValueError when either side
    is empty or the floor is 0."""
    e = np.asarray(errors, dtype=np.float64).ravel()
    f = np.asarray(floor_values, dtype=np.float64).ravel()
    if not len(e) or not len(f) or f.mean() <= 0:
        raise ValueError(f"ratio_interval: need errors and a positive floor (got {len(e)} errors, {len(f)} floor "
                         "values)")
    rng = np.random.default_rng(seed)

    def resampled_means(x: np.ndarray) -> np.ndarray:
        # in chunks of draws, so that a test split of 100,000 samples stays small in memory
        return np.concatenate([x[rng.integers(0, len(x), (min(100, draws - i), len(x)))].mean(1)
                               for i in range(0, draws, 100)])

    ratios = resampled_means(e) / np.maximum(resampled_means(f), 1e-12)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return {"ratio": float(e.mean() / f.mean()), "low": float(low), "high": float(high), "level": level}


def format_metrics(metrics: dict) -> str:
    """One line per split: MSE, MAPE %, Spearman."""
    lines = []
    for split in ("train", "val", "test"):
        m = metrics.get(split)
        if m:
            lines.append(f"{split:>5}: MSE {m['mse']:.4f} ms^2  MAPE {100 * m['mape']:.2f}%  "
                         f"Spearman {m['spearman']:.4f}  (n={m['n']})")
    return "\n".join(lines)


def scatter_plot(pred, true, path, title: str) -> None:
    """Predicted-vs-measured scatter (log-log when all values are positive) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pred, true = np.ravel(pred), np.ravel(true)
    fig, ax = plt.subplots(figsize=(4.5, 4.5), dpi=120)
    ax.scatter(true, pred, s=6, alpha=0.5)
    if len(true):
        lo = float(min(true.min(), pred.min()))
        hi = float(max(true.max(), pred.max()))
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8)
        if lo > 0:
            ax.set_xscale("log")
            ax.set_yscale("log")
    m = regression_metrics(pred, true)
    ax.set_title(f"{title}\nMAPE {100 * m['mape']:.1f}%  Spearman {m['spearman']:.3f}", fontsize=9)
    ax.set_xlabel("measured (ms)")
    ax.set_ylabel("predicted (ms)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
