"""The cost of the collectives of row-wise and data-parallel tables on the paper's runtime, fitted to measurements.

A row-wise table's ranks reduce-scatter its B x dim partial sums forward and
all-gather the gradient's slices backward; a data-parallel table's gradient,
rows x dim, is all-reduced backward (`measure.collectives`). A table-row-wise
table does what a row-wise one does within one host, its group the host's
ranks, while the other hosts' groups run theirs. Each collective's time over
a group of k ranks (every one of the `ndevices`, or one host's) is a function
of the full tensor's element count N, fitted per collective and group size
(the key `op`, or `op@k` for host groups: `fit_key`), one of three forms,
whichever predicts held-out samples better (`fit_collectives`, chosen by
measurement, k-fold: every sample is held out once):

* "linear": ms = a + b N (a latency and a bandwidth);
* "power":  ms = exp(c) N^p (a straight line in log-log);
* "hinge":  ms = a + b N + c max(0, N - k) (the bandwidth drops past a size
  k, where the tensors outgrow the caches: gloo's all-reduce on CPU does).

The samples come from `collect_collective_cost_data.py` (sizes drawn over
what the plans of the problem can send), each the ranks' mean ms; the fit
reports each form's MAPE on held-out samples beside the noise floor, the
MAPE of the same samples measured again. Costs in ms; this module imports
without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from neuroshard.numerics import mape, nnls
from neuroshard.types.codec import Record
from neuroshard.types.errors import ConfigError
from neuroshard.types.plan import COLLECTIVES, fit_key

FORMAT = "neuroshard.collectives/1"
FORMS = ("linear", "power", "hinge")  # simplest first: a tie (within TIE points) goes to the simpler
NCOEF = {"linear": 2, "power": 2, "hinge": 4}
TIE = 0.1  # percentage points of held-out MAPE
KNEES = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)  # the quantiles of the samples' sizes a hinge's knee is tried at
SCALE = 1e6  # N in millions of elements, so both coefficients of a linear fit are of order 1


def default_path(models_dir, ndevices: int) -> Path:
    """Where the pipeline keeps the collective model for `ndevices` ranks."""
    return Path(models_dir) / f"collectives_{ndevices}.json"


@dataclass
class CollectiveFit(Record):
    """One collective's fit: its `form`, coefficients ((a, b) of linear, (c, p) of power, (a, b, c, k) of
    hinge; N in millions), the samples it was fitted on, each form's MAPE (%) on the held-out samples and the
    noise floor (%, None without re-measured samples)."""

    form: str
    coef: list[float]
    samples: int
    test_mape: dict[str, float] = field(default_factory=dict)
    noise_floor: float | None = None

    def predict(self, numel) -> np.ndarray:
        return _predict(self.form, self.coef, np.asarray(numel, dtype=np.float64))


@dataclass
class CollectiveModel(Record):
    """Per collective (`measure.collectives.COLLECTIVES`) and group size its `CollectiveFit` (`fit_key`), on
    `ndevices` ranks."""

    ndevices: int
    fits: dict[str, CollectiveFit]

    def predict(self, op: str, numel, k: int | None = None) -> np.ndarray:
        """ms of `op` on N = `numel` elements over a group of k ranks (None: every one of the model's
        `ndevices`), 0 for N = 0."""
        fit = self.fit_of(op, k)
        n = np.asarray(numel, dtype=np.float64)
        return np.where(n > 0, fit.predict(np.maximum(n, 1.0)), 0.0)

    def has(self, op: str, k: int | None = None) -> bool:
        """The model has a fit of `op` over groups of k ranks (None: every rank)."""
        return fit_key(op, k, self.ndevices) in self.fits

    def fit_of(self, op: str, k: int | None = None) -> CollectiveFit:
        key = fit_key(op, k, self.ndevices)
        if key not in self.fits:
            raise ConfigError("--collective_model", f"has no fit of {key} (it has {', '.join(self.fits)})")
        return self.fits[key]

    def json_extra(self) -> dict:
        return {"format": FORMAT}  # what a reader checks first

    @classmethod
    def from_json(cls, d: dict) -> "CollectiveModel":
        """The codec's record, once the file says it is this format and each fit is one of `FORMS` with its
        number of finite coefficients; ValueError / KeyError / TypeError on a malformed record."""
        if d.get("format") != FORMAT:
            raise ValueError(f"format {d.get('format')!r}, expected {FORMAT!r}")
        model = super().from_json(d)
        for key, f in model.fits.items():
            op, _, k = key.partition("@")
            if op not in COLLECTIVES or (k and not (k.isdigit() and 2 <= int(k) < model.ndevices
                                                    and model.ndevices % int(k) == 0)):
                raise ValueError(f"fit {key!r}: not a collective ({', '.join(COLLECTIVES)}), optionally @ a group "
                                 f"size that divides the {model.ndevices} ranks")
            if f.form not in FORMS or len(f.coef) != NCOEF[f.form] or not all(np.isfinite(f.coef)):
                raise ValueError(f"{key}: form {f.form!r}, coefficients {f.coef}")
        return model

    def save(self, path) -> None:
        from neuroshard.formats.io import write_model_file

        write_model_file(path, self)

    @classmethod
    def load(cls, path, ndevices: int) -> "CollectiveModel":
        """The model at `path` (`formats.io.read_model_file`): InputError naming it when missing, malformed or
        fitted for other ranks than `ndevices`."""
        from neuroshard.formats.io import read_model_file

        return read_model_file(path, cls, "collective model", "collect_collective_cost_data.py fits one", ndevices)


def _predict(form: str, coef: Sequence[float], numel: np.ndarray) -> np.ndarray:
    x = numel / SCALE
    if form == "linear":
        return coef[0] + coef[1] * x
    if form == "hinge":
        return coef[0] + coef[1] * x + coef[2] * np.maximum(0.0, x - coef[3])
    return np.exp(coef[0]) * x ** coef[1]


def _fit(form: str, x: np.ndarray, y: np.ndarray) -> list[float]:
    """Coefficients of `form` on N = x (millions) and ms y: linear and hinge by non-negative least squares of
    the relative error (the hinge's knee the best of `KNEES`), power by least squares in log-log."""
    if form == "linear":
        a = np.stack([np.ones_like(x), x], axis=1) / y[:, None]
        return [float(c) for c in nnls(a, np.ones(len(y)))]
    if form == "hinge":
        best = None
        for k in np.unique(np.quantile(x, KNEES)):
            a = np.stack([np.ones_like(x), x, np.maximum(0.0, x - k)], axis=1) / y[:, None]
            coef = nnls(a, np.ones(len(y)))
            err = float(np.sum((a @ coef - 1.0) ** 2))
            if best is None or err < best[0]:
                best = (err, [float(c) for c in coef] + [float(k)])
        return best[1]
    p, c = np.polyfit(np.log(x), np.log(y), 1)
    return [float(c), float(p)]


def fit_collectives(samples: Sequence[dict], ndevices: int, folds: int = 4, seed: int = 0,
                    noise: Sequence[tuple[str, float, float]] = ()) -> CollectiveModel:
    """Fit each collective and group size of `samples` ({"op", "numel", "ms": the ranks' mean ms, and "k" for a
    host group's}; `fit_key`): its samples cut into `folds` seeded folds, each form fitted without each fold
    and judged on it (the MAPE over every sample, each predicted by a fit that never saw it); the best form (a
    tie within TIE points to the simpler) refitted on all. `noise`: (key, ms, ms measured again) of re-measured
    samples, the noise floor. ValueError for a fit with fewer than 4 samples or a non-positive time."""
    rng = np.random.default_rng(seed)
    fits = {}
    for key in dict.fromkeys(fit_key(s["op"], s.get("k"), ndevices) for s in samples):
        mine = [s for s in samples if fit_key(s["op"], s.get("k"), ndevices) == key]
        x = np.array([s["numel"] for s in mine], dtype=np.float64) / SCALE
        y = np.array([s["ms"] for s in mine], dtype=np.float64)
        if len(mine) < 4:
            raise ValueError(f"{key}: {len(mine)} samples, need at least 4")
        if (y <= 0).any() or (x <= 0).any():
            raise ValueError(f"{key}: every sample needs numel > 0 and ms > 0")
        fold = rng.permutation(len(y)) % min(folds, len(y))
        scores = {}
        for form in FORMS:
            pred = np.empty(len(y))
            for f in np.unique(fold):
                test = fold == f
                pred[test] = _predict(form, _fit(form, x[~test], y[~test]), x[test] * SCALE)
            scores[form] = 100 * mape(pred, y)
        best = min(scores.values())
        form = next(f for f in FORMS if scores[f] <= best + TIE)
        again = [(a, b) for o, a, b in noise if o == key and a > 0]
        floor = 100 * mape(np.array([b for _, b in again]), np.array([a for a, _ in again])) if again else None
        fits[key] = CollectiveFit(form, _fit(form, x, y), len(mine), scores, floor)
    return CollectiveModel(ndevices, fits)
