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

A model for any world size (`fit_world_collectives`, `ndevices` None) fits
each collective over collections of several sizes at once, the group's size
k an input: a ring moves (k - 1) / k of the tensor through each rank in
k - 1 steps, so

* "world_linear": ms = a + c (k - 1) + b N (k - 1) / k;
* "world_hinge":  the same plus d max(0, N (k - 1) / k - m) (the drop past a
  size, in what each rank moves);

one fit prices every group size, those its data had and those between them;
`for_world(n)` binds it to a problem of n ranks (its every-rank group).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from neuroshard.numerics import mape, nnls
from neuroshard.types.codec import Record, json_field
from neuroshard.types.errors import ConfigError
from neuroshard.types.plan import COLLECTIVES, fit_key

FORMAT = "neuroshard.collectives/1"
FORMS = ("linear", "power", "hinge")  # simplest first: a tie (within TIE points) goes to the simpler
WORLD_FORMS = ("world_linear", "world_hinge")  # over groups of any size (the model for any world size)
NCOEF = {"linear": 2, "power": 2, "hinge": 4, "world_linear": 3, "world_hinge": 5}
TIE = 0.1  # percentage points of held-out MAPE
KNEES = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)  # the quantiles of the samples' sizes a hinge's knee is tried at
SCALE = 1e6  # N in millions of elements, so both coefficients of a linear fit are of order 1


def default_path(models_dir, ndevices: int | None) -> Path:
    """Where the pipeline keeps the collective model for `ndevices` ranks (None: for any world size)."""
    return Path(models_dir) / ("collectives.json" if ndevices is None else f"collectives_{ndevices}.json")


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

    def predict(self, numel, k: int | None = None) -> np.ndarray:
        """ms on N = `numel` elements (over groups of k ranks: a world form needs k)."""
        if self.form in WORLD_FORMS:
            if k is None:
                raise ValueError(f"a {self.form} fit prices a group of a given size: pass k")
            return _predict_world(self.form, self.coef, np.asarray(numel, dtype=np.float64), k)
        return _predict(self.form, self.coef, np.asarray(numel, dtype=np.float64))


@dataclass
class CollectiveModel(Record):
    """Per collective (`measure.collectives.COLLECTIVES`) and group size its `CollectiveFit` (`fit_key`), on
    `ndevices` ranks; or, `ndevices` None, one fit per collective for groups of any size (`sizes`: the group
    sizes its data had), bound to a world of n ranks by `for_world(n)`."""

    ndevices: int | None
    fits: dict[str, CollectiveFit]
    sizes: list[int] = json_field(default_factory=list, omit=lambda v: not v)
    world: int | None = json_field(None, omit=lambda v: True)  # the world size it is bound to (not in the file)

    @property
    def any_world(self) -> bool:
        """One fit per collective for groups of any size."""
        return self.ndevices is None

    def for_world(self, n: int) -> "CollectiveModel":
        """This model for a problem of n ranks: a model for any world size bound to n (its every-rank group), a
        per-size one as it is."""
        from dataclasses import replace

        return replace(self, world=int(n)) if self.any_world else self

    def predict(self, op: str, numel, k: int | None = None) -> np.ndarray:
        """ms of `op` on N = `numel` elements over a group of k ranks (None: every one of the model's
        `ndevices`, or of the world it is bound to), 0 for N = 0."""
        fit = self.fit_of(op, k)
        n = np.asarray(numel, dtype=np.float64)
        size = (k or self.world) if self.any_world else None
        return np.where(n > 0, fit.predict(np.maximum(n, 1.0), size), 0.0)

    def has(self, op: str, k: int | None = None) -> bool:
        """The model has a fit of `op` over groups of k ranks (None: every rank)."""
        if self.any_world:
            return op in self.fits and (k is not None or self.world is not None)
        return fit_key(op, k, self.ndevices) in self.fits

    def fit_of(self, op: str, k: int | None = None) -> CollectiveFit:
        if self.any_world:
            if op not in self.fits:
                raise ConfigError("--collective_model", f"has no fit of {op} (it has {', '.join(self.fits)})")
            if k is None and self.world is None:
                raise ConfigError("--collective_model", "is for any world size: bind it to the problem's ranks "
                                                        "(for_world) or name the group's size")
            return self.fits[op]
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
        forms = WORLD_FORMS if model.any_world else FORMS
        for key, f in model.fits.items():
            op, _, k = key.partition("@")
            if model.any_world and (op not in COLLECTIVES or k):
                raise ValueError(f"fit {key!r}: not a collective ({', '.join(COLLECTIVES)}); a model for any world "
                                 "size has one fit per collective")
            if not model.any_world and (op not in COLLECTIVES or (k and not (
                    k.isdigit() and 2 <= int(k) < model.ndevices and model.ndevices % int(k) == 0))):
                raise ValueError(f"fit {key!r}: not a collective ({', '.join(COLLECTIVES)}), optionally @ a group "
                                 f"size that divides the {model.ndevices} ranks")
            if f.form not in forms or len(f.coef) != NCOEF[f.form] or not all(np.isfinite(f.coef)):
                raise ValueError(f"{key}: form {f.form!r}, coefficients {f.coef}")
        return model

    def save(self, path) -> None:
        from neuroshard.formats.io import write_model_file

        write_model_file(path, self)

    @classmethod
    def load(cls, path, ndevices: int | None) -> "CollectiveModel":
        """The model at `path` (`formats.io.read_model_file`) for `ndevices` ranks (a model for any world size
        bound to them; None: any model, as it is): InputError naming it when missing, malformed or fitted for
        other ranks."""
        from neuroshard.formats.io import read_model_file

        model = read_model_file(path, cls, "collective model", "collect_collective_cost_data.py fits one", ndevices)
        return model if ndevices is None else model.for_world(ndevices)


def _moved(x: np.ndarray, k) -> np.ndarray:
    """What each of k ranks moves of a ring collective on x (millions of) elements: x (k - 1) / k."""
    k = np.asarray(k, dtype=np.float64)
    return x * (k - 1) / k


def _predict_world(form: str, coef: Sequence[float], numel: np.ndarray, k) -> np.ndarray:
    v = _moved(numel / SCALE, k)
    out = coef[0] + coef[1] * (np.asarray(k, dtype=np.float64) - 1) + coef[2] * v
    if form == "world_hinge":
        out = out + coef[3] * np.maximum(0.0, v - coef[4])
    return out


def _fit_world(form: str, x: np.ndarray, k: np.ndarray, y: np.ndarray) -> list[float]:
    """Coefficients of a world form on N = x (millions), group sizes k and ms y, by non-negative least squares of
    the relative error (the hinge's knee the best of `KNEES`' quantiles of what each rank moves)."""
    v = _moved(x, k)
    cols = [np.ones_like(x), k - 1.0, v]
    if form == "world_linear":
        return [float(c) for c in nnls(np.stack(cols, axis=1) / y[:, None], np.ones(len(y)))]
    best = None
    for m in np.unique(np.quantile(v, KNEES)):
        a = np.stack([*cols, np.maximum(0.0, v - m)], axis=1) / y[:, None]
        coef = nnls(a, np.ones(len(y)))
        err = float(np.sum((a @ coef - 1.0) ** 2))
        if best is None or err < best[0]:
            best = (err, [float(c) for c in coef] + [float(m)])
    return best[1]


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
        form, scores = _choose_form(key, FORMS, lambda form, t: _predict(form, _fit(form, x[~t], y[~t]), x[t] * SCALE),
                                    x, y, folds, rng)
        again = [(a, b) for o, a, b in noise if o == key and a > 0]
        fits[key] = CollectiveFit(form, _fit(form, x, y), len(mine), scores, _floor(again))
    return CollectiveModel(ndevices, fits)


def _choose_form(key: str, forms: Sequence[str], held_out, x: np.ndarray, y: np.ndarray, folds: int,
                 rng) -> tuple[str, dict[str, float]]:
    """The form of `forms` whose fits predict held-out samples best (`folds` folds drawn from `rng`; a tie within
    TIE points to the earlier, simpler one) and every form's held-out MAPE (%). `held_out(form, test)`: the
    predictions for the samples of boolean mask `test` of a fit of `form` on the others. ValueError for fewer
    than 4 samples or a non-positive size or time."""
    if len(y) < 4:
        raise ValueError(f"{key}: {len(y)} samples, need at least 4")
    if (y <= 0).any() or (x <= 0).any():
        raise ValueError(f"{key}: every sample needs numel > 0 and ms > 0")
    fold = rng.permutation(len(y)) % min(folds, len(y))
    scores = {}
    for form in forms:
        pred = np.empty(len(y))
        for f in np.unique(fold):
            test = fold == f
            pred[test] = held_out(form, test)
        scores[form] = 100 * mape(pred, y)
    best = min(scores.values())
    return next(f for f in forms if scores[f] <= best + TIE), scores


def _floor(again: Sequence[tuple[float, float]]) -> float | None:
    """The noise floor (%) of re-measured samples (recorded ms, ms measured again); None without any."""
    return 100 * mape(np.array([b for _, b in again]), np.array([a for a, _ in again])) if again else None


def fit_world_collectives(collections: Sequence[tuple[int, Sequence[dict], Sequence[tuple[str, float, float]]]],
                          folds: int = 4, seed: int = 0) -> CollectiveModel:
    """One fit per collective over collections of several world sizes (each (ndevices, samples, noise) as
    `fit_collectives` takes them; a sample's group is its host's, k, or every rank): the world form that predicts
    held-out samples better (`folds` seeded folds over all the samples; a tie within TIE points to the simpler),
    refitted on all. Its held-out MAPE per form, and the noise floor over every collection's re-measured samples.
    ValueError for a collective with fewer than 4 samples or a non-positive time."""
    rng = np.random.default_rng(seed)
    rows = [(s["op"], s["numel"] / SCALE, s.get("k") or n, s["ms"]) for n, samples, _ in collections for s in samples]
    sizes = sorted({k for _, _, k, _ in rows})
    fits = {}
    for op in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == op]
        x, k, y = (np.array([r[i] for r in mine], dtype=np.float64) for i in (1, 2, 3))
        form, scores = _choose_form(
            op, WORLD_FORMS,
            lambda form, t: _predict_world(form, _fit_world(form, x[~t], k[~t], y[~t]), x[t] * SCALE, k[t]),
            x, y, folds, rng)
        again = [(a, b) for n, _, noise in collections for key, a, b in noise
                 if key.partition("@")[0] == op and a > 0]
        fits[op] = CollectiveFit(form, _fit_world(form, x, k, y), len(mine), scores, _floor(again))
    return CollectiveModel(None, fits, sizes)


def check_collectives(model: CollectiveModel, ndevices: int, samples: Sequence[dict],
                      noise: Sequence[tuple[str, float, float]] = ()) -> dict[str, dict]:
    """A model's error on a collection of `ndevices` ranks (a world size it may never have seen), per fit key
    (`fit_key`): {"samples", "mape" (%), "floor" (%, the collection's re-measured samples), "over_floor"}."""
    bound = model.for_world(ndevices)
    out = {}
    for key in dict.fromkeys(fit_key(s["op"], s.get("k"), ndevices) for s in samples):
        mine = [s for s in samples if fit_key(s["op"], s.get("k"), ndevices) == key]
        pred = np.array([float(bound.predict(s["op"], s["numel"], s.get("k"))) for s in mine])
        error = 100 * mape(pred, np.array([s["ms"] for s in mine]))
        again = [(a, b) for o, a, b in noise if o == key and a > 0]
        floor = 100 * mape(np.array([b for _, b in again]), np.array([a for a, _ in again])) if again else None
        out[key] = {"samples": len(mine), "mape": error, "floor": floor,
                    "over_floor": error / floor if floor else None}
    return out
