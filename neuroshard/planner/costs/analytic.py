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
TorchRec ships a = b = c = 1, h = 0 and bandwidths of its own hardware. `train.torchrec_estimator` fits a, b, c, h
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
from neuroshard.planner.costs.runtime_model import check_coefficients
from neuroshard.settings import Settings, setting
from neuroshard.types.codec import Record
from neuroshard.types.errors import ConfigError, InputError
from neuroshard.types.tables import TableConfig

FORMAT = "neuroshard.torchrec_estimator.v1"
DEVICE_BW = 1.0e6  # bytes per ms the coefficients are relative to (TorchRec divides by the device bandwidth)
BWD_MULTIPLIER = 2.0  # TorchRec's BWD_COMPUTE_MULTIPLIER
TERMS = ("input_read", "lookup", "output", "hash_size")
# TorchRec 1.8's own figures (`torchrec.distributed.planner.constants`, bytes per ms): the HBM bandwidth its compute
# terms are divided by and the intra-host bandwidth of its all-to-alls; `AnalyticModel.torchrec_default` holds them
# (tests/torchrec/test_estimators.py compares them with TorchRec's)
TORCHREC_HBM_MEM_BW = 897 * 1024 ** 3 / 1000
TORCHREC_INTRA_NODE_BANDWIDTH = 600 * 1024 ** 3 / 1000


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
        check_coefficients(self.coef, TERMS, "shard")
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

    @classmethod
    def torchrec_default(cls, ndevices: int, batch: int) -> "AnalyticModel":
        """TorchRec's estimator as it ships: coefficients 1, 1, 1, 0 over a GPU's HBM bandwidth, its intra-host
        all-to-all bandwidth (TorchRec's default topology), for `ndevices` ranks at global `batch`."""
        scale = DEVICE_BW / TORCHREC_HBM_MEM_BW
        return cls(ndevices, (scale, scale, scale, 0.0), TORCHREC_INTRA_NODE_BANDWIDTH, batch,
                   source={"torchrec_default": True})

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
