"""The sizes of a pipeline run: one `Preset` per named run (`--preset`).

A preset fixes the planning problem (`problem`: devices and their memory) and
how much of everything the steps make and measure. `--ndevices`, `--max_mem`
and `--seed` change its problem, `--refine` its hardware in the loop
(`pipeline.run.preset_from_args`). The measured results of the presets are
in docs/EXPERIMENTS.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from neuroshard.problem import Problem


@dataclass(frozen=True)
class Preset:
    """Sizes of one pipeline run, by the phase that uses them (the step keys of `pipeline.steps`)."""

    name: str
    problem: Problem  # the devices, their memory; the run's seed comes from --seed
    max_dim: int
    # 1: the dataset (synthetic unless --data is given)
    num_tables: int
    batch_size: int
    max_rows: int
    # 2: tasks
    num_tasks: int
    t_range: str
    # 3: cost data
    compute_samples: int
    max_tables: int
    comm_samples: int
    comm_t_range: str
    sleep_range: str
    comm_batch_size: int
    warmup: int
    iters: int
    noise_samples: int  # shards / all-to-alls re-measured for the noise floors
    # 4: training
    epochs: int
    # the learned baselines, trained on their own tasks (same sizes, another seed)
    policy_tasks: int
    dreamshard_args: tuple[str, ...]
    autoshard_args: tuple[str, ...]
    # 5-6: evaluation
    eval_tasks: int
    eval_warmup: int
    eval_iters: int
    eval_repeats: int = 1  # measurements of every plan (interleaved rounds), for intervals
    half_share: float = 0.67  # compute shards from one half of the tables, for the held-out-table check
    # after the evaluation: collected shards / all-to-alls re-measured to see how far the machine drifted
    drift_samples: int = 50
    gpu: bool = False
    # how the comm data's straggler spread is drawn in sleep_range (collect_comm_cost_data.py --spread_dist):
    # "log" samples near-simultaneous starts, where balanced plans' forward exchanges run, as often as long waits;
    # a forward model trained on uniform spreads under-estimates exactly those exchanges
    spread_dist: str = "uniform"
    # cost-model ensembles (members per model, 1: one model), and on-policy cost data: the plans of
    # `onpolicy_tasks` training tasks (0: off) by `onpolicy_algs`, NeuroShard+ once per value of `plus_lambdas`,
    # measured; the models retrained on both; NeuroShard+'s lambda chosen there
    ensemble: int = 1
    algs: str = "all"  # the algorithms of phases 5 and 6 (a learned baseline's policy is trained only if named)
    onpolicy_tasks: int = 0
    onpolicy_algs: str = "neuroshard,neuroshard_plus,size_lookup_greedy,random"
    plus_lambdas: str = "0,0.5,1"
    # each on-policy plan measured twice: the repeats tell how much of a rank's noise the plan's ranks share
    # (eval.power.rank_noise), which the predicted spread needs (planner.costs.uncertainty)
    onpolicy_repeats: int = 2
    # hardware in the loop when planning (eval/refine.py): the `refine` best candidates of `refine_algs`' plans by
    # the models measured `refine_repeats` times each, the measured best kept (0: off)
    refine: int = 0
    refine_algs: str = "neuroshard_plus"
    refine_repeats: int = 2
    # prediction-powered verdicts (eval/intervals.py powered_difference): the simulator's estimates of the
    # algorithms' plans on this many more tasks of the same generator (another seed), not measured (0: off; off
    # with --refine too: refined plans are chosen by measurement, the unmeasured are not)
    unmeasured_tasks: int = 0
    # the cost-model ablation: TorchRec's estimator fitted to the same cost data (step 4j), and search x cost
    # model planned and measured: NeuroShard's search on it (neuroshard_fitted), TorchRec's planner on it
    # (torchrec_fitted) and on the neural models (torchrec_neural), beside neuroshard and torchrec
    ablation: bool = False
    # this many tasks that nothing trains on (step 2f), one plan of each measured in every round of step 6b
    # (and of 2e's in 6h), each round's speed against the models (eval/round_calibration.py; 0: off); with
    # --torchrec_train the same plans trained in every round of step 7d, against the runtime model
    round_anchors: int = 4
    # phase 7 (opt-in, --torchrec_train): the plans of the first tasks trained with TorchRec. Rounds rather than
    # iterations: on 2 shared cores two rounds of a plan differ more than the median of its iterations is uncertain
    torchrec_tasks: int = 3
    torchrec_warmup: int = 3
    torchrec_iters: int = 10
    torchrec_repeats: int = 4
    # and the TorchRec runtime model: random and sharders' plans of this many training tasks trained in TorchRec,
    # the model fitted to them, NeuroShard planned for TorchRec's runtime with it
    torchrec_data_tasks: int = 16
    torchrec_random_plans: int = 3
    # the share of a random plan's tables made row-wise or data-parallel, so the runtime model learns their terms
    torchrec_spread_share: float = 0.15
    # over the second dataset (step 7a2) each sharder's plan is trained again with its tables of at least this
    # pooling factor data-parallel: that dataset's hot tables (pooling factors from about 50 up; its regular
    # tables' stay below 40), whose data-parallel trade the random plans rarely show (docs/EXPERIMENTS.md, the
    # entry on hot tables data-parallel in the runtime data)
    torchrec_dp_min_pooling: float = 40.0
    # then (steps 7b2 and 7b3, over the second dataset) NeuroShard planned with that first fit and the greedy's
    # plans beside them, each trained this many rounds, and the model fitted again with them as a collection of
    # their own: a search picks the plans whose costs the model underestimates most (it made cold tables
    # data-parallel on savings the first fit overstated; docs/EXPERIMENTS.md, the entry on on-policy runtime data).
    # 0: off, the first fit is the model
    torchrec_onpolicy_rounds: int = 2
    # tasks beyond the paper's plan space (0: off; synthetic data only): a second dataset, `oversize_tables` regular
    # tables plus `oversize_large` tables of up to `large_rows` rows (at dim 128 larger than one device) and
    # `oversize_hot` small hot ones, and `oversize_tasks` tasks over it, each with a table larger than a device and a
    # hot one; every algorithm planned in the simulator and measured on the paper runtime (and with
    # --torchrec_train, NeuroShard over every sharding type trained with TorchRec beside TorchRec's full planner)
    oversize_tasks: int = 0
    oversize_tables: int = 100
    oversize_large: int = 8
    oversize_hot: int = 8
    large_rows: int = 4_000_000
    # compute samples timed on the second dataset's tables (step 3f), trained on beside the first's: without
    # them the compute model never sees a table of more rows than `max_rows` or a hot one, and prices the new
    # set's shards by extrapolation
    oversize_compute_samples: int = 0
    # on-policy compute data of the second dataset (step 4d2): the plans of this many of its training tasks by
    # `oversize_onpolicy_algs`, measured in the plan job, each rank's kernel with its shares of the plan's row-wise
    # and data-parallel tables; the retrained compute model (4e) learns from them what a rank of row blocks costs
    # in the plan job, which shards timed on their own do not teach it (docs/EXPERIMENTS.md, the entry on the new
    # set's on-policy data). 0: off
    oversize_onpolicy_tasks: int = 0
    oversize_onpolicy_algs: str = "torchrec_full,size_lookup_greedy,neuroshard"
    # the collectives of row-wise and data-parallel tables on the paper's runtime (step 3e): samples timed (the
    # three collectives in turn) and re-timed for the noise floor; their model lets NeuroShard choose those types
    # there and prices the plans that have them (0: off, table-wise and column-wise only)
    collective_samples: int = 0
    collective_noise: int = 0


PRESETS = {
    # For the end-to-end smoke test: every step, seconds each.
    "tiny": Preset("tiny", Problem(ndevices=2, max_mem=1.0), max_dim=32, num_tables=16, batch_size=256,
                   max_rows=20000, num_tasks=3, t_range="4,8", compute_samples=100, max_tables=4, comm_samples=16,
                   comm_t_range="4,8", sleep_range="0,2", comm_batch_size=256, warmup=1, iters=2, noise_samples=4,
                   epochs=20, policy_tasks=4,
                   dreamshard_args=("--num_iterations", "2", "--bench_steps", "3", "--bench_training_steps", "20",
                                    "--rl_num_batches", "2", "--rl_batch_size", "4"),
                   autoshard_args=("--total_steps", "400", "--batch_size", "4", "--unroll_length", "50",
                                   "--num_cost_updates", "2", "--cost_batch_size", "32"),
                   eval_tasks=2, eval_warmup=1, eval_iters=2, eval_repeats=2, drift_samples=4, ensemble=2,
                   onpolicy_tasks=2, plus_lambdas="0,1", torchrec_tasks=2, torchrec_warmup=1, torchrec_iters=3,
                   torchrec_repeats=2, refine=2, refine_repeats=1, ablation=True, collective_samples=12,
                   collective_noise=3),
    # `make demo`: the whole pipeline on CPU within 15 minutes, install included, on the default synthetic
    # dataset of gen_dlrm_data.py. The comm batch equals the dataset's, as eval.py uses it. 600 tables, not
    # fewer: the compute model generalises to unseen tables with the number of distinct tables it trains on,
    # not with the number of shards. The strongest baselines only (`--preset paper` and `--alg all` keep the
    # others, which lose to NeuroShard by far on hardware). The tasks, the noise samples, the collectives' samples
    # and the warm-up iterations are as few as keep the demo inside its 15 minutes on a slow day; the study
    # preset has the power.
    "quick": Preset("quick", Problem(ndevices=4, max_mem=1.0), max_dim=128, num_tables=600, batch_size=4096,
                    max_rows=1_000_000, num_tasks=20, t_range="10,30", compute_samples=650, max_tables=10,
                    comm_samples=300, comm_t_range="10,30", sleep_range="0,50", comm_batch_size=4096, warmup=3,
                    iters=7, noise_samples=30, epochs=1000, policy_tasks=50, dreamshard_args=(),
                    autoshard_args=(), eval_tasks=8, eval_warmup=2, eval_iters=5, eval_repeats=2, drift_samples=20,
                    ensemble=3, onpolicy_tasks=2, spread_dist="log", unmeasured_tasks=20,
                    algs="neuroshard,neuroshard_plus,size_lookup_greedy,torchrec,dreamshard,autoshard", ablation=True,
                    oversize_tasks=4, oversize_compute_samples=150, oversize_onpolicy_tasks=4, collective_samples=60,
                    collective_noise=10),
    # The paper's setting on the public dataset and GPUs (DESIGN §2 defaults: 4 GB per GPU, T from 10 to 60,
    # 100 tasks, batch 65536); run once with 4 and once with 8 GPUs.
    "paper": Preset("paper", Problem(ndevices=4, max_mem=4.0), max_dim=128, num_tables=856, batch_size=65536,
                    max_rows=0, num_tasks=100, t_range="10,60", compute_samples=100_000, max_tables=15,
                    comm_samples=20_000, comm_t_range="10,60", sleep_range="0,30", comm_batch_size=65536,
                    warmup=5, iters=10, noise_samples=500, epochs=1000, policy_tasks=100, dreamshard_args=(),
                    autoshard_args=(), eval_tasks=100, eval_warmup=5, eval_iters=10, eval_repeats=3, drift_samples=200,
                    gpu=True, ensemble=5, onpolicy_tasks=30),
}
# Hardware verdicts with power: the quick preset's data and models, four algorithms (NeuroShard, NeuroShard+,
# the strongest baselines), sized by eval/power.py so that one run detects a 3% difference on this machine.
# With prediction-powered verdicts (the unmeasured tasks) the repeat noise, not the task spread, bounds the
# power, so more tasks in fewer rounds detect smaller differences at a fixed number of measurements; two rounds
# are the fewest the intervals, the repeat noise and the cross-fitted headroom need. 6,000 compute samples: at
# 3,000 the compute model's held-out MAPE still fell with more data; 6,000 collected in one go took it a fifth
# lower. Data added from another hour did not help: the machine's speed had moved between the two. 24 anchor
# tasks: a round's factors are medians over its anchors, so each anchor's own model error reaches every plan of
# the round through them; 24 rather than 12 halve that variance for about 2% more measurements.
PRESETS["study"] = replace(PRESETS["quick"], name="study", num_tasks=220, eval_tasks=220, eval_repeats=2,
                           eval_warmup=3, eval_iters=7, compute_samples=6000, comm_samples=500, noise_samples=100,
                           drift_samples=50, onpolicy_tasks=6, algs="neuroshard,neuroshard_plus,torchrec,autoshard",
                           unmeasured_tasks=440, collective_samples=240, collective_noise=30, round_anchors=24,
                           oversize_tasks=6, oversize_compute_samples=600)
