"""Small generic numerics the layers share: non-negative least squares, the relative error of a prediction, and
sums in a given order.

NumPy only; imports nothing else of the package, so every layer may use it.
"""

from __future__ import annotations

import numpy as np


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """argmin ||a x - b|| subject to x >= 0 (Lawson and Hanson's active-set method)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    m, n = a.shape
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(float).eps * np.linalg.norm(a, 1) * max(m, n)
    for _ in range(max_iter or 3 * n + 10):
        w = a.T @ (b - a @ x)
        if passive.all() or w[~passive].max(initial=-np.inf) <= tol:
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > tol).all():
                x = z
                break
            neg = passive & (z <= tol)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
    return x


def rel_errors(pred, true) -> np.ndarray:
    """|pred - true| / |true| of flattened arrays, over the targets other than 0 (|true| > 1e-9): the entries
    `mape` averages."""
    pred = np.ravel(np.asarray(pred, dtype=np.float64))
    true = np.ravel(np.asarray(true, dtype=np.float64))
    pos = np.abs(true) > 1e-9
    return np.abs(pred[pos] - true[pos]) / np.abs(true[pos])


def mape(pred, true) -> float:
    """Mean absolute percentage error of `pred` against `true` as a fraction (0.1: 10%): the mean of
    `rel_errors`; nan when every target is 0."""
    errors = rel_errors(pred, true)
    return float(np.mean(errors)) if len(errors) else float("nan")


def ordered_sums(target, values: np.ndarray, ntargets: int, start) -> np.ndarray:
    """Per target t (0..ntargets-1): `start` plus the rows of `values` whose `target` is t, added one at a time
    in their order, as the loop `out[target[i]] += values[i]` adds them (a float sum's bits depend on its
    order). Vectorised: one step adds each target's k-th row, so the steps are as many as the most rows one
    target gets."""
    target = np.asarray(target, dtype=np.int64)
    out = np.empty((ntargets,) + values.shape[1:], dtype=values.dtype)
    out[...] = start
    if not len(target):
        return out
    order = np.argsort(target, kind="stable")
    counts = np.bincount(target, minlength=ntargets)
    rank = np.empty(len(target), dtype=np.int64)
    rank[order] = np.arange(len(target)) - (np.cumsum(counts) - counts)[target[order]]  # k: the target's k-th row
    by_rank = np.argsort(rank, kind="stable")
    lo = 0
    for k in np.bincount(rank).tolist():  # each target has at most one row of each rank
        rows = by_rank[lo:lo + k]
        out[target[rows]] += values[rows]
        lo += k
    return out
