"""Small generic numerics the layers share: non-negative least squares and the relative error of a prediction.

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
