"""TorchRec's analytic cost model fitted to this machine's measurements, and a scorer that prices plans with it.

TorchRec's `EmbeddingPerfEstimator` (`torchrec.distributed.planner.estimator`) costs a table-wise or
column-wise shard of width d, `rows` rows and pooling factor p at global batch B as

    fwd compute = (a * IR + b * LU + c * OW + h * rows) * penalty(d) / device_bw
    bwd compute = fwd compute * bwd_multiplier (2)
    fwd comms = bwd comms = OW / a2a_bw

with IR = ceil(8 B p) (the int64 indices read), LU = 4 B p max(d, 32) (the rows looked up), OW = 4 B d
(the pooled output written and sent: every sample's, as the measured exchange sends it; TorchRec scales
it by min(1, p) for sparse features), penalty 1 from d >= 128, 1.15 from 64, else 1.75 (FBGEMM's partly
used blocks); a rank's cost is the sum over its shards, a plan's the largest rank's.
TorchRec ships a = b = c = 1, h = 0 and bandwidths of its own hardware. `fit_analytic` fits a, b, c, h
by non-negative least squares to the same compute cost data the neural compute model trains on (each
measured shard, forward and backward, the sum of its tables' terms) and `a2a_bw` by least squares
through the origin to the comm data's per-rank exchange times (the forward's wait for the last rank,
which TorchRec's model has no term for, taken out). Input distribution is left out, as in the suite's
measured plan cost. `AnalyticScorer` prices placements with the fitted model in the scorer interface
the searches use (`get_scorer` returns it for `CostModels(analytic=...)`), so NeuroShard's search runs
on these costs; `torchrec.fitted` hands the same coefficients to TorchRec's own planner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar, Sequence

import numpy as np

from neuroshard.planner.costs.features import ACC_DTYPE
from neuroshard.settings import Settings, setting
from neuroshard.types.codec import Record
from neuroshard.types.errors import ConfigError, InputError
from neuroshard.types.tables import TableConfig

FORMAT = "neuroshard.torchrec_estimator.v1"
DEVICE_BW = 1.0e6  # bytes per ms the coefficients are relative to (TorchRec divides by the device bandwidth)
BWD_MULTIPLIER = 2.0  # TorchRec's BWD_COMPUTE_MULTIPLIER
TERMS = ("input_read", "lookup", "output", "hash_size")


def block_penalty(dims: np.ndarray) -> np.ndarray:
    """TorchRec's block usage penalty of table-wise and column-wise shards by width."""
    dims = np.asarray(dims)
    return np.where(dims >= 128, 1.0, np.where(dims >= 64, 1.15, 1.75))


def table_terms(configs: Sequence[TableConfig], batch: int) -> np.ndarray:
    """[N, 4] per table: the compute terms (IR, LU, OW, rows) times penalty x (1 + bwd multiplier) /
    device_bw, so that a shard's forward + backward ms is `terms @ (a, b, c, h)` (module doc)."""
    if not configs:
        return np.zeros((0, len(TERMS)))
    d = np.array([c.dim for c in configs], dtype=np.float64)
    p = np.array([c.pooling_factor for c in configs], dtype=np.float64)
    rows = np.array([c.row for c in configs], dtype=np.float64)
    ir = np.ceil(8.0 * batch * p)
    lu = 4.0 * batch * p * np.maximum(d, 32.0)
    ow = 4.0 * batch * d
    x = np.stack([ir, lu, ow, rows], axis=1)
    return x * (block_penalty(d) * (1.0 + BWD_MULTIPLIER) / DEVICE_BW)[:, None]


@dataclass(frozen=True)
class AnalyticModel(Record):
    """TorchRec's estimator with fitted coefficients (module doc): forward coefficients of the input read,
    lookup, output and table-size terms (`TERMS`, relative to `DEVICE_BW`), the all-to-all bandwidth in
    bytes per ms, for `ndevices` ranks; `batch`: the global batch plans are costed at unless told
    otherwise (the compute data's); `fit`: its errors on the data it was fitted to and on held-out
    samples; `source`: the data."""

    ndevices: int
    coef: tuple[float, ...]
    a2a_bw: float
    batch: int
    fit: dict = field(default_factory=dict)
    source: dict = field(default_factory=dict)

    def __post_init__(self):
        if len(self.coef) != len(TERMS) or not all(math.isfinite(c) and c >= 0 for c in self.coef):
            raise ValueError(f"expected {len(TERMS)} finite non-negative coefficients ({', '.join(TERMS)}), got "
                             f"{list(self.coef)}")
        if not any(self.coef):
            raise ValueError("every coefficient is 0: the model would cost every shard 0 ms")
        if not (math.isfinite(self.a2a_bw) and self.a2a_bw > 0):
            raise ValueError(f"a2a_bw must be a finite number > 0 (bytes per ms), got {self.a2a_bw!r}")
        if int(self.ndevices) < 1 or int(self.batch) < 1:
            raise ValueError(f"ndevices and batch must be >= 1, got {self.ndevices}, {self.batch}")

    def table_compute(self, configs: Sequence[TableConfig], batch: int | None = None) -> np.ndarray:
        """Forward + backward ms of each table as a shard of its own at global `batch` (default `batch`)."""
        return table_terms(configs, batch or self.batch) @ np.asarray(self.coef)

    def comm_per_dim(self, batch: int | None = None) -> float:
        """ms of one exchange (forward or backward) per unit of a rank's dim sum at global `batch`."""
        return 4.0 * (batch or self.batch) / self.a2a_bw

    def scaled(self, compute: float = 1.0, comm: float = 1.0) -> "AnalyticModel":
        """The model with its compute times `compute` and its exchanges' times `comm` (a machine's drift)."""
        return replace(self, coef=tuple(c * compute for c in self.coef), a2a_bw=self.a2a_bw / comm)

    def json_extra(self) -> dict:
        return {"format": FORMAT, "terms": list(TERMS), "device_bw": DEVICE_BW, "bwd_multiplier": BWD_MULTIPLIER}

    @classmethod
    def from_json(cls, d: dict) -> "AnalyticModel":
        if d.get("format") != FORMAT:
            raise ValueError(f"format {d.get('format')!r}, expected {FORMAT!r}")
        return super().from_json(d)

    def save(self, path) -> None:
        from neuroshard.formats.io import write_model_file

        write_model_file(path, self)

    @classmethod
    def load(cls, path, ndevices: int | None = None) -> "AnalyticModel":
        """A saved model; InputError naming the file when it is missing, malformed or for other ranks."""
        from neuroshard.formats.io import read_model_file

        return read_model_file(path, cls, "fitted TorchRec estimator", "fit_torchrec_estimator.py fits one",
                               ndevices)


# --------------------------------------------------------------------------- fitting


def _mape(pred: np.ndarray, y: np.ndarray) -> float:
    keep = y > 0
    return float(np.mean(np.abs(pred[keep] - y[keep]) / y[keep])) if keep.any() else float("nan")


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2:
        return float("nan")
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def compute_design(configs: Sequence[TableConfig], samples, ref_batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(X [S, 4], y [S]) of compute samples (`formats.cost_data.ComputeSample`, indices into `configs`; a sample
    without a batch at `ref_batch`): each shard's summed table terms and its measured ms."""
    by_batch: dict[int, np.ndarray] = {}
    x = np.zeros((len(samples), len(TERMS)))
    for k, s in enumerate(samples):
        b = s.batch or ref_batch
        if b not in by_batch:
            by_batch[b] = table_terms(configs, b)
        x[k] = by_batch[b][list(s.ids)].sum(axis=0)
    return x, np.array([s.cost for s in samples], dtype=np.float64)


def comm_design(groups) -> tuple[np.ndarray, np.ndarray]:
    """(bytes [R], ms [R]) of comm samples' per-rank exchanges, forward (its wait for the last rank taken out)
    and backward: the pooled bytes a rank sends, 4 x batch x its dim sum. `groups`: (samples, the global
    batch they were measured at) pairs."""
    x, y = [], []
    for samples, batch in groups:
        for s in samples:
            _exchanges(s, batch, x, y)
    if not x:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(x), np.concatenate(y)


def _exchanges(s, batch: int, x: list, y: list) -> None:
    """Append one comm sample's per-rank (bytes, ms) of both exchanges to x and y."""
    dims = np.asarray(s.dims, dtype=np.float64)
    sleeps = np.asarray(s.sleeps, dtype=np.float64)
    wait = sleeps.max() - sleeps
    for times, minus in ((np.asarray(s.fw), wait), (np.asarray(s.bw), 0.0)):
        x.append(4.0 * batch * dims)
        y.append(np.maximum(times - minus, 0.0))


def fit_analytic(configs: Sequence[TableConfig], compute_samples, ref_batch: int, comm_groups, ndevices: int,
                 test_share: float = 0.2, seed: int = 0, source: dict | None = None) -> AnalyticModel:
    """Fit TorchRec's estimator to compute and comm cost data (module doc): the coefficients by
    non-negative least squares on all but a seeded `test_share` of the compute samples (their MAPE and
    rank correlation reported), then on all of them; the all-to-all bandwidth through the origin on the
    comm samples of `comm_groups` ((samples, their global batch) pairs). ValueError when there is nothing
    to fit."""
    from neuroshard.torchrec.runtime_model import nnls

    n_comm = sum(len(samples) for samples, _ in comm_groups)
    if len(compute_samples) < 5 or not n_comm:
        raise ValueError(f"need at least 5 compute and 1 comm samples, got {len(compute_samples)} and {n_comm}")
    x, y = compute_design(configs, compute_samples, ref_batch)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(test_share * len(y)))
    test, train = order[:n_test], order[n_test:]
    scale = x[train].max(axis=0)
    scale[scale == 0] = 1.0
    held = nnls(x[train] / scale, y[train]) / scale
    coef = nnls(x / scale, y) / scale
    cx, cy = comm_design(comm_groups)
    slope = float(cx @ cy / (cx @ cx)) if (cx @ cx) > 0 else 0.0
    if slope <= 0:
        raise ValueError("the comm samples give no positive time per byte")
    fit = {"compute": {"train_mape": _mape(x[train] @ held, y[train]), "test_mape": _mape(x[test] @ held, y[test]),
                       "test_spearman": _spearman(x[test] @ held, y[test]), "test_samples": int(n_test),
                       "mape_all": _mape(x @ coef, y)},
           "comm": {"mape": _mape(cx * slope, cy), "exchanges": int(len(cy))}}
    return AnalyticModel(int(ndevices), tuple(float(c) for c in coef), 1.0 / slope, int(ref_batch), fit,
                         dict(source or {}))


# --------------------------------------------------------------------------- the scorer


class AnalyticScorer:
    """The scorer interface of `scorer.PlanScorer` over an `AnalyticModel`: a table's embedding is its own
    forward + backward ms, a device's accumulator their sum, its exchanges its dim sum x `comm_per_dim`
    (no term for the forward's wait, as in TorchRec's model). One member."""

    members = 1
    embed_dim = 1
    uses_numpy = True

    def __init__(self, model: AnalyticModel, batch: int | None = None):
        self.model, self.batch = model, batch or model.batch
        self.ndevices = model.ndevices
        self._per_dim = model.comm_per_dim(self.batch)

    def embed(self, configs: Sequence[TableConfig]) -> np.ndarray:
        return self.model.table_compute(configs, self.batch)[:, None]

    def project(self, emb: np.ndarray) -> np.ndarray:
        return np.asarray(emb, dtype=np.float64).astype(ACC_DTYPE)

    @property
    def acc0(self) -> np.ndarray:
        return np.zeros(1, dtype=ACC_DTYPE)

    def cost_from_acc(self, acc: np.ndarray, overwrite: bool = False) -> np.ndarray:
        return np.asarray(acc)[:, 0].copy()

    def shard_costs(self, emb: np.ndarray, shards: Sequence[Sequence[int]]) -> np.ndarray:
        emb = np.asarray(emb, dtype=np.float64)
        return np.array([float(emb[list(s), 0].sum()) if len(s) else 0.0 for s in shards])

    def comm(self, dims: np.ndarray, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = np.asarray(dims, dtype=np.float64) * self._per_dim
        return x, x.copy()

    def member_costs_from_acc(self, acc: np.ndarray, overwrite: bool = False) -> np.ndarray:
        return self.cost_from_acc(acc)[:, None]

    def member_shard_costs(self, emb: np.ndarray, shards: Sequence[Sequence[int]]) -> np.ndarray:
        return self.shard_costs(emb, shards)[None]

    def comm_members(self, dims: np.ndarray, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        bw, fw = self.comm(dims, None)
        return bw[None], fw[None]


# --------------------------------------------------------------------------- the option of the fitted algorithms

OPTION = "torchrec_estimator"


@dataclass(frozen=True)
class FittedEstimatorOptions(Settings):
    """The fitted TorchRec estimator the `*_fitted` algorithms price plans with."""

    TITLE: ClassVar[str] = "the fitted TorchRec estimator (--alg torchrec_fitted, neuroshard_fitted)"

    torchrec_estimator: str | None = setting(None, "TorchRec's estimator fitted to the cost data "
                                                   "(fit_torchrec_estimator.py; torchrec_estimator_<n>.json); "
                                                   "--alg all includes the *_fitted algorithms only when given",
                                             show_default=False)


_LOADED: dict[tuple[str, float], AnalyticModel] = {}


def load_option(options: dict | None, ndevices: int, alg: str) -> AnalyticModel:
    """The fitted estimator named by the options' `torchrec_estimator` (loaded once per file version);
    ConfigError when it is not given."""
    path = (options or {}).get(OPTION)
    if not path:
        raise ConfigError(f"--{OPTION}", f"{alg} prices plans with TorchRec's estimator fitted to the cost data: "
                                         f"give --{OPTION} (fit_torchrec_estimator.py writes one)")
    key = (str(Path(path).resolve()), Path(path).stat().st_mtime if Path(path).exists() else 0.0)
    if key not in _LOADED:
        _LOADED[key] = AnalyticModel.load(path)
    model = _LOADED[key]
    if model.ndevices != ndevices:
        raise InputError(path, f"fitted for {model.ndevices} ranks, the plans are for {ndevices}")
    return model
