"""Communication cost data collection (DESIGN.md §5 "Comm data collection").

Samples are drawn in the parent, measured in chunks by :class:`AllToAllJob`
(one torchrun job per chunk, so process start-up is paid once per chunk) and
appended to ``out_dir/data.txt`` as ``dims sleeps fw bw`` lines (DESIGN.md §3),
one flushed and fsynced line per sample; only the parent writes the file.

On several nodes (a multi-node `LaunchConfig`) the same command runs on
every node: node 0 draws, measures in ONE job (samples drawn `chunk` ahead of
the results; the nodes would otherwise have to start every chunk's job
together) and writes; the other nodes only lend their ranks (:func:`follow`)
and never write the output directory. The node layout joins the run config,
so a resumed run uses the same one.

A killed run resumes: the sample count already on disk is kept, a torn last
line is dropped, and the random stream is seeded with (seed, count) so a
resumed run draws new samples instead of replaying the old ones.

Only one collection may write a data dir at a time (a lock on `data.txt`).
The noise floor re-measures a random subset of recorded samples (in the
schema of `measure.noise`), the number to put next to a cost model's test MAPE.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import ClassVar, Sequence

import numpy as np

from neuroshard.checks import (
    check_choice,
    check_float,
    check_int,
    check_max_dim,
    check_range,
)
from neuroshard.formats.cost_data import (
    DATA_TXT,
    CommSample,
    format_comm_sample,
    read_comm_data,
)
from neuroshard.formats.io import append_line, check_run_config, open_append
from neuroshard.measure.alltoall_job import AllToAllJob, SampleResult
from neuroshard.measure.launch import DEFAULT_TIMEOUT_S, LaunchConfig
from neuroshard.measure.noise import noise_report
from neuroshard.settings import Settings, common, setting
from neuroshard.types.errors import ConfigError, InputError
from neuroshard.types.tables import dim_set

JOBS_DIR = ".jobs"  # per-job scratch (sample list, results, torchrun log) inside out_dir
SPREADS = ("uniform", "log")  # how the straggler spread is drawn in sleep_range (`draw_sample`)
LOG_SPREAD_FLOOR_MS = 0.1  # "log": the smallest spread when sleep_range starts lower (log 0 is -inf)


@dataclass(frozen=True)
class CommCollectConfig(Settings):
    """Settings that shape the measurements (written to ``out_dir/config.json``; its fields are the
    collection's flags, but for the ranks and device, which the script resolves).

    `T_range`: inclusive range of the number of tables per sample;
    `sleep_range`: range (ms) of the straggler spread, drawn as `spread_dist`
    says (`draw_sample`); `batch_size`: global
    batch B (B % ndevices == 0); `warmup`/`iters`: untimed/timed iterations
    per sample and direction; `seed`: the sample stream.
    """

    TITLE: ClassVar[str] = "what is measured"

    ndevices: int = setting(4, "", cli=False)
    device: str = setting("cpu", "", cli=False)
    batch_size: int = common("batch_size", 4096, help="global batch B, divisible by the rank count (default: 4096 on "
                                                      "CPU, 65536 on GPU as upstream)", show_default=False,
                             flag_default=None)
    T_range: tuple[int, int] = common("T_range", (10, 60), help="inclusive range of tables per sample")
    sleep_range: tuple[float, float] = setting((1.0, 20.0), "range of the straggler spread, ms")
    spread_dist: str = setting("uniform", "how the spread is drawn in --sleep_range: uniform (DESIGN §5) or log "
                                          "(log-uniform, from 0.1 ms where the range starts lower): as many "
                                          "near-simultaneous starts, where balanced plans' exchanges run, as long "
                                          "waits", choices=SPREADS,
                           omit=lambda v: v == "uniform")  # data dirs made before the option stay resumable
    max_dim: int = common("max_dim")
    warmup: int = common("warmup", help="untimed iterations per sample and direction")
    iters: int = common("iters", help="timed iterations per sample and direction (their median is kept)")
    seed: int = common("seed", help="the sample stream")

    def validate(self) -> None:
        check_int("--ndevices", self.ndevices, 1)
        check_choice("--device", self.device, ("cpu", "cuda"))
        check_int("--batch_size", self.batch_size, 1)
        if self.batch_size % self.ndevices:
            raise ConfigError("--batch_size", f"batch size {self.batch_size} must be a multiple of the "
                                              f"number of devices ({self.ndevices})")
        check_range("--T_range", self.T_range, 1, cast=int)
        check_range("--sleep_range", self.sleep_range, 0.0)
        check_choice("--spread_dist", self.spread_dist, SPREADS)
        check_max_dim("--max_dim", self.max_dim)
        check_int("--warmup", self.warmup, 0)
        check_int("--iters", self.iters, 1)
        check_int("--seed", self.seed)


# --------------------------------------------------------------------------- sampling


def random_greedy(dims: Sequence[int], p: float, ndevices: int, rng: np.random.Generator) -> list[int]:
    """Spread table dims over devices: largest first, each to a uniformly random
    device with probability `p`, else to the device with the smallest dim sum
    (lowest index on ties). Returns per-device dim sums."""
    sums = [0] * ndevices
    for d in sorted(dims, reverse=True):
        if rng.random() < p:
            r = int(rng.integers(ndevices))
        else:
            r = int(np.argmin(sums))
        sums[r] += int(d)
    return sums


def draw_sample(rng: np.random.Generator, cfg: CommCollectConfig) -> dict:
    """One sample ``{"dims": per-device dim sums, "sleeps": per-device ms}``.

    T uniform in `T_range` (inclusive), T dims uniform over the dim set, spread
    by :func:`random_greedy` with p ~ U(0, 1) per sample. Sleeps: spread ~
    U(sleep_range) (`spread_dist` "log": log-uniform in it, from
    `LOG_SPREAD_FLOOR_MS` at least), per-device U(0, spread), shifted so the
    smallest is 0.

    Why "log": a forward exchange whose ranks start together runs slower than
    one whose ranks arrive apart, and uniform spreads in 0-50 ms put few
    samples below 2 ms, where balanced plans live: a forward model trained on
    them under-estimates exactly the exchanges of the plans a search prefers.
    """
    choices = dim_set(cfg.max_dim)
    t = int(rng.integers(cfg.T_range[0], cfg.T_range[1] + 1))
    dims = [choices[i] for i in rng.integers(len(choices), size=t)]
    sums = random_greedy(dims, float(rng.random()), cfg.ndevices, rng)
    lo, hi = cfg.sleep_range
    if cfg.spread_dist == "log":
        lo = max(lo, LOG_SPREAD_FLOOR_MS)
        spread = float(np.exp(rng.uniform(np.log(lo), np.log(max(hi, lo)))))
    else:
        spread = float(rng.uniform(lo, hi))
    sleeps = rng.uniform(0.0, spread, size=cfg.ndevices)
    sleeps = sleeps - sleeps.min()
    return {"dims": sums, "sleeps": [round(float(s), 3) for s in sleeps]}


def to_comm_sample(sample: dict, res: SampleResult) -> CommSample:
    # 0.1 us resolution is far below the measurement noise; keeps data.txt readable.
    return CommSample(list(sample["dims"]), list(sample["sleeps"]),
                      [round(v, 4) for v in res.fw], [round(v, 4) for v in res.bw])


# --------------------------------------------------------------------------- collection


def _count_existing(out_dir: str, ndevices: int) -> int:
    if not os.path.exists(os.path.join(out_dir, DATA_TXT)):
        return 0
    return len(read_comm_data(out_dir, ndevices))


def collect(out_dir: str, cfg: CommCollectConfig, data_size: int, *, chunk: int = 250,
            gpu_devices: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, progress: bool = True,
            check: bool = False, launch: LaunchConfig | None = None) -> dict:
    """Append samples to ``out_dir/data.txt`` until it holds `data_size` of them.

    Returns a summary: samples added, elapsed s, samples per minute, median
    algorithm bandwidth (GB/s). Raises launch.JobError if a job fails
    (samples measured before the failure are kept; rerun to resume). `check`:
    before timing each sample, verify the exchanged values and gradients
    against the reference (a rank with a mismatch fails the job). `launch`:
    node 0 of a multi-node job (other nodes call :func:`follow`).
    """
    from tqdm import tqdm

    cfg.validate()
    check_int("--data_size", data_size, 0)
    check_int("--chunk", chunk, 1)
    check_float("--timeout", timeout, 0.0, lo_open=True)
    launch = (launch or LaunchConfig()).for_world(cfg.ndevices)
    if not launch.writes_outputs:
        raise ConfigError("--node_rank", "only node 0 collects into an output directory; the other nodes follow")
    os.makedirs(out_dir, exist_ok=True)
    fh = open_append(os.path.join(out_dir, DATA_TXT), exclusive=True)  # one writer; drops a torn last line
    try:
        check_run_config(out_dir, {**cfg.to_json(), **launch.layout()})
        existing = _count_existing(out_dir, cfg.ndevices)
        # A new stream per resume point: a resumed run never replays samples on disk.
        rng = np.random.default_rng([cfg.seed, existing])
        todo = max(0, data_size - existing)
        added, bandwidth = 0, []
        t0 = time.monotonic()
        bar = tqdm(total=data_size, initial=existing, unit="sample", disable=not progress,
                   desc="comm samples", dynamic_ncols=True)
        # One node: a job per chunk. Several: one job (started even with nothing to do, so the
        # other nodes, which cannot know that, are released).
        jobs = [min(chunk, todo - start) for start in range(0, todo, chunk)]
        if launch.multi_node:
            jobs = [todo]
        try:
            for n in jobs:
                draws = (draw_sample(rng, cfg) for _ in range(n))
                with AllToAllJob(draws, cfg.ndevices, cfg.batch_size, warmup=cfg.warmup, iters=cfg.iters,
                             device=cfg.device, gpu_devices=gpu_devices, timeout=timeout,
                             work_dir=os.path.join(out_dir, JOBS_DIR), check=check, num_samples=n,
                             lookahead=chunk, launch=launch) as job:
                    for res in job.results():
                        append_line(fh, format_comm_sample(to_comm_sample(job.sample(res.index), res)))
                        added += 1
                        bandwidth.append(res.algbw_bw)
                        bar.update(1)
                        bar.set_postfix(fw=f"{max(res.fw):.2f}ms", bw=f"{max(res.bw):.2f}ms",
                                        algbw=f"{res.algbw_bw:.2f}GB/s", refresh=False)
        finally:
            bar.close()
        _remove_empty_jobs_dir(out_dir)
        elapsed = time.monotonic() - t0
        return {"existing": existing, "added": added, "total": existing + added,
                "elapsed_s": round(elapsed, 2),
                "samples_per_min": round(added / elapsed * 60, 1) if added and elapsed > 0 else None,
                "median_algbw_bw_gbps": float(np.median(bandwidth)) if bandwidth else None}
    finally:
        fh.close()


def follow(cfg: CommCollectConfig, launch: LaunchConfig, *, gpu_devices: str | None = None,
           timeout: float = DEFAULT_TIMEOUT_S, progress: bool = True) -> dict:
    """A node other than node 0 of a multi-node collection (or noise floor): lend this node's
    ranks to node 0's job until it ends. Writes nothing but the job's scratch dir (in the system
    temp dir, removed after success). Returns {"node": k, "measured": samples seen}."""
    from tqdm import tqdm

    cfg.validate()
    launch = launch.for_world(cfg.ndevices)
    if launch.writes_outputs:
        raise ConfigError("--node_rank", "node 0 collects; follow() is for the other nodes")
    measured = 0
    with tqdm(unit="sample", disable=not progress, desc=f"node {launch.node_rank} (node 0 writes)",
              dynamic_ncols=True) as bar:
        with AllToAllJob((), cfg.ndevices, cfg.batch_size, warmup=cfg.warmup, iters=cfg.iters, device=cfg.device,
                     gpu_devices=gpu_devices, timeout=timeout, launch=launch) as job:
            for _ in job.results():
                measured += 1
                bar.update(1)
    return {"node": launch.node_rank, "measured": measured}


def _remove_empty_jobs_dir(out_dir: str) -> None:
    try:
        os.rmdir(os.path.join(out_dir, JOBS_DIR))
    except OSError:
        pass  # missing, or holds the logs of a failed job (kept for inspection)


# --------------------------------------------------------------------------- noise floor


def noise_floor(out_dir: str, cfg: CommCollectConfig, num: int, *, seed: int = 0, repeats: int = 2,
                gpu_devices: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                progress: bool = True, launch: LaunchConfig | None = None) -> dict:
    """Re-measure `num` random recorded samples `repeats` times (rounds interleaved, one job).

    Returns the noise-floor report (`measure.noise` schema, targets "fw" and
    "bw", over every (sample, rank) entry). data.txt is not modified.
    `launch`: node 0 of a multi-node job (the other nodes call :func:`follow`).
    """
    from tqdm import tqdm

    cfg.validate()
    check_int("--noise_floor", num, 1)
    check_int("--noise_repeats", repeats, 1)
    launch = (launch or LaunchConfig()).for_world(cfg.ndevices)
    recorded = read_comm_data(out_dir, cfg.ndevices)
    check_run_config(out_dir, {**cfg.to_json(), **launch.layout()})  # same settings as the recorded samples
    if not recorded:
        raise InputError(os.path.join(out_dir, DATA_TXT), "no samples to re-measure")
    rng = np.random.default_rng([seed, len(recorded), 7919])
    pick = rng.choice(len(recorded), size=min(num, len(recorded)), replace=False)
    samples = [{"dims": recorded[i].dims, "sleeps": recorded[i].sleeps} for i in pick]
    fresh = {"fw": np.full((repeats, len(pick), cfg.ndevices), np.nan), "bw": None}
    fresh["bw"] = fresh["fw"].copy()
    t0 = time.monotonic()
    with tqdm(total=repeats * len(samples), unit="sample", desc="re-measuring", disable=not progress) as bar:
        with AllToAllJob(samples * repeats, cfg.ndevices, cfg.batch_size, warmup=cfg.warmup, iters=cfg.iters,
                     device=cfg.device, gpu_devices=gpu_devices, timeout=timeout,
                     work_dir=os.path.join(out_dir, JOBS_DIR), launch=launch) as job:
            for res in job.results():
                r, j = divmod(res.index, len(samples))
                fresh["fw"][r, j], fresh["bw"][r, j] = res.fw, res.bw
                bar.update(1)
    _remove_empty_jobs_dir(out_dir)
    stored = {"fw": np.array([recorded[i].fw for i in pick]), "bw": np.array([recorded[i].bw for i in pick])}
    return noise_report("comm", stored, fresh, [{"line": int(i) + 1, **samples[k]} for k, i in enumerate(pick)],
                        data_dir=str(out_dir), **cfg.to_json(), noise_seed=seed,
                        elapsed_s=round(time.monotonic() - t0, 2))


def print_summary(summary: dict, file=sys.stdout) -> None:
    rate = summary.get("samples_per_min")
    bw = summary.get("median_algbw_bw_gbps")
    print(f"{summary['added']} samples added ({summary['total']} in total) in "
          f"{summary['elapsed_s']:.1f} s" + (f", {rate:.0f} samples/min" if rate else "")
          + (f", median backward algbw {bw:.3f} GB/s" if bw else ""), file=file)
