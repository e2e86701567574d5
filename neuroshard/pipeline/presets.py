"""The sizes of a pipeline run: one `Preset` per named run (`--preset`), and the task sets it names.

A preset fixes the planning problem (`problem`: devices and their memory),
how much of everything the steps make and measure, and its task sets
(`TaskSet`): families of tasks, each over a dataset of its own, that every
step that plans, measures or trains runs once per set (`pipeline.steps`).
The first set is the paper's (its dataset is the public file with `--data`,
its data trains the models first); the quick and study presets add the
tasks with a table larger than a device and a hot one. `--ndevices`,
`--max_mem` and `--seed` change a preset's problem, `--refine` its hardware
in the loop (`pipeline.run.preset_from_args`). The measured results of the
presets are in docs/EXPERIMENTS.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from neuroshard.problem import Problem

# the algorithm that plans with every sharding type TorchRec has (torchrec/full_planner.py's FULL_ALG, named here
# so that presets import no TorchRec code)
TORCHREC_FULL = "torchrec_full"


@dataclass(frozen=True)
class TaskSet:
    """One family of tasks a run plans, measures and trains on: its own dataset, evaluation, training and anchor
    tasks, and the steps' outputs for it under `folder` of the run (the first set's at the run's top)."""

    name: str  # the step instances' suffix (`6b:oversize`) and how --only names the set
    title: str  # what its tasks are, for --list and the README
    folder: str  # its outputs, under the run folder ("" for the first set)
    # 1: its dataset, synthetic: `tables` regular tables, then `large_tables` of up to `large_rows` rows and
    # `hot_tables` small hot ones (gen_dlrm_data.py); a set beyond the first runs on synthetic data only
    tables: int
    # 2: its evaluation tasks drawn and the first `eval_tasks` of them planned and measured; its training tasks
    # (the learned baselines', the on-policy data's and TorchRec's runtime data's); tasks planned but not
    # measured (prediction-powered verdicts, 0: none)
    tasks: int
    eval_tasks: int
    train_tasks: int
    large_tables: int = 0
    large_rows: int = 0
    hot_tables: int = 0
    # gen_tasks.py's flags that make the set's kind of task: ("oversize", "hot") draws tasks with at least one
    # table larger than a device and one hot table
    kind: tuple[str, ...] = ()
    unmeasured_tasks: int = 0
    # 3: random compute shards timed over its tables (0: none; the first set's are the compute model's data, the
    # others' are trained on beside them)
    compute_samples: int = 0
    # 4: on-policy data: the plans of this many of its training tasks by `onpolicy_algs` measured (0: none;
    # another set's only where the first set has some)
    onpolicy_tasks: int = 0
    onpolicy_algs: str = "neuroshard,neuroshard_plus,size_lookup_greedy,random"
    # its tasks need row-wise and data-parallel tables (a table larger than any device): the plans its training
    # tasks are measured with (on-policy and TorchRec runtime data) are searched with the collective model too,
    # and its hot tables are made data-parallel in the runtime data's sharder plans (`torchrec_dp_min_pooling`)
    spread: bool = False
    # 5-6: algorithms compared on it whatever the preset's (TorchRec's full planner where the collective model
    # prices its plans)
    baselines: tuple[str, ...] = ()
    # 7: the algorithm TorchRec training judges the others against (None: eval_torchrec.py's default); its
    # runtime data's plans trained again in every round of its TorchRec training (per-round calibration); the
    # runtime model fitted again with NeuroShard's plans for its first fit over this set's training tasks
    torchrec_reference: str | None = None
    torchrec_anchors: bool = False
    torchrec_onpolicy: bool = False

    @property
    def task_kind(self) -> dict:
        """`kind` as gen_tasks.py's flags."""
        return {k: 1 for k in self.kind}


@dataclass(frozen=True)
class Preset:
    """Sizes of one pipeline run, by the phase that uses them (the step keys of `pipeline.steps`); the sizes of
    each task set's own tasks and data are its `TaskSet`'s."""

    name: str
    problem: Problem  # the devices, their memory; the run's seed comes from --seed
    task_sets: tuple[TaskSet, ...]  # the first is the paper's plan space
    max_dim: int
    # 1: the datasets (synthetic unless --data is given: the first set's)
    batch_size: int
    max_rows: int
    # 2: tasks
    t_range: str
    # 3: cost data
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
    # the learned baselines, trained on the first set's training tasks
    dreamshard_args: tuple[str, ...]
    autoshard_args: tuple[str, ...]
    # 5-6: evaluation
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
    # cost-model ensembles (members per model, 1: one model); NeuroShard+ planned once per value of
    # `plus_lambdas` in the first set's on-policy data (its lambda chosen there), each on-policy plan measured
    # `onpolicy_repeats` times: the repeats tell how much of a rank's noise the plan's ranks share
    # (eval.power.rank_noise), which the predicted spread needs (planner.costs.uncertainty)
    ensemble: int = 1
    algs: str = "all"  # the algorithms of phases 5 and 6 (a learned baseline's policy is trained only if named)
    plus_lambdas: str = "0,0.5,1"
    onpolicy_repeats: int = 2
    # hardware in the loop when planning (eval/refine.py): the `refine` best candidates of `refine_algs`' plans by
    # the models measured `refine_repeats` times each, the measured best kept (0: off)
    refine: int = 0
    refine_algs: str = "neuroshard_plus"
    refine_repeats: int = 2
    # the cost-model ablation: TorchRec's estimator fitted to the same cost data (step 4j), and search x cost
    # model planned and measured: NeuroShard's search on it (neuroshard_fitted), TorchRec's planner on it
    # (torchrec_fitted) and on the neural models (torchrec_neural), beside neuroshard and torchrec
    ablation: bool = False
    # this many tasks of each set that nothing trains on (step 2d), one plan of each measured in every round of
    # the set's hardware evaluation (6b), each round's speed against the models (eval/round_calibration.py; 0:
    # off); with --torchrec_train, a set's runtime data plans trained in every round of its TorchRec training
    # (7f) where the set asks, against the runtime model
    round_anchors: int = 4
    # phase 7 (opt-in, --torchrec_train): the plans of the first tasks trained with TorchRec. Rounds rather than
    # iterations: on 2 shared cores two rounds of a plan differ more than the median of its iterations is uncertain
    torchrec_tasks: int = 3
    torchrec_warmup: int = 3
    torchrec_iters: int = 10
    torchrec_repeats: int = 4
    # and the TorchRec runtime model: random and sharders' plans of this many training tasks of each set trained
    # in TorchRec, the model fitted to them, NeuroShard planned for TorchRec's runtime with it
    torchrec_data_tasks: int = 16
    torchrec_random_plans: int = 3
    # the share of a random plan's tables made row-wise or data-parallel, so the runtime model learns their terms
    torchrec_spread_share: float = 0.15
    # over a set with `spread` (7a) each sharder's plan is trained again with its tables of at least this pooling
    # factor data-parallel: the second dataset's hot tables (pooling factors from about 50 up; its regular
    # tables' stay below 40), whose data-parallel trade the random plans rarely show (docs/EXPERIMENTS.md, the
    # entry on hot tables data-parallel in the runtime data)
    torchrec_dp_min_pooling: float = 40.0
    # then (steps 7c and 7d, over the sets with `torchrec_onpolicy`) NeuroShard planned with that first fit and
    # the greedy's plans beside them, each trained this many rounds, and the model fitted again with them as a
    # collection of their own: a search picks the plans whose costs the model underestimates most (it made cold
    # tables data-parallel on savings the first fit overstated; docs/EXPERIMENTS.md, the entry on on-policy
    # runtime data). 0: off, the first fit is the model
    torchrec_onpolicy_rounds: int = 2
    # the collectives of row-wise and data-parallel tables on the paper's runtime (step 3e): samples timed (the
    # three collectives in turn) and re-timed for the noise floor; their model lets NeuroShard choose those types
    # there and prices the plans that have them (0: off, table-wise and column-wise only)
    collective_samples: int = 0
    collective_noise: int = 0
    # comm models for any world size (steps 3f-3h, 4k, 4l): comm data (and the collectives, where 3e runs) collected
    # at these device counts too, the problem's own count reusing 3c's and 3e's; one model pair trained on the
    # counts not in `world_held` and judged on those it never saw. An extra artifact (models/comm_fw.pt, comm_bw.pt,
    # collectives.json): the run plans with its own count's models. Each count's samples cost what 3c's would
    # spread over the counts (`world_samples`). Every count divides the comm batch: one model's collections share
    # one batch (a dim sum is bytes at one batch), and 3c's is the dataset's. () off
    world_counts: tuple[int, ...] = ()
    world_held: tuple[int, ...] = ()

    def __post_init__(self):
        counts, held = self.world_counts, set(self.world_held)
        if counts and (not held <= set(counts) or len(set(counts)) < len(counts) or min(counts) < 1
                       or len(set(counts) - held) < 2 or any(self.comm_batch_size % k for k in counts)):
            raise ValueError(f"preset {self.name!r}: world_counts {counts} must be distinct counts >= 1 that divide "
                             f"the comm batch {self.comm_batch_size}, at least two of them trained on, world_held "
                             f"{self.world_held} among them")

    @property
    def first(self) -> TaskSet:
        """The first task set: the paper's plan space, whose data trains the models first."""
        return self.task_sets[0]

    def with_set(self, name: str, **changes) -> Preset:
        """This preset with the task set `name` changed."""
        sets = tuple(replace(s, **changes) if s.name == name else s for s in self.task_sets)
        if sets == self.task_sets and name not in {s.name for s in self.task_sets}:
            raise KeyError(name)
        return replace(self, task_sets=sets)


# a comm sample's cost on CPU ranks in units of one rank's share: a sample at k ranks costs about k + RANK_FIXED
# (the straggler sleeps and each sample's set-up do not grow with the ranks: docs/EXPERIMENTS.md, the entry on the
# pipeline's several world sizes)
RANK_FIXED = 8


def world_samples(samples: int, ndevices: int, count: int, others: int, least: int) -> int:
    """The samples collected at `count` ranks beside a collection of `samples` at the problem's `ndevices`, so
    that the `others` counts collected together cost about what that one does: samples x (ndevices + RANK_FIXED)
    / (others x (count + RANK_FIXED)); at least `least` (a script's minimum), none where `samples` is none."""
    if samples <= 0:
        return 0
    return max(least, round(samples * (ndevices + RANK_FIXED) / (others * (count + RANK_FIXED))))


def paper_set(tables: int, tasks: int, eval_tasks: int, train_tasks: int, compute_samples: int,
              onpolicy_tasks: int = 0, unmeasured_tasks: int = 0) -> TaskSet:
    """The paper's plan space: tasks of T tables drawn from the dataset (public or synthetic), each fitting a
    device (DESIGN §2)."""
    return TaskSet("paper", "tasks of the paper's plan space", "", tables=tables, tasks=tasks, eval_tasks=eval_tasks,
                   train_tasks=train_tasks, unmeasured_tasks=unmeasured_tasks, compute_samples=compute_samples,
                   onpolicy_tasks=onpolicy_tasks, torchrec_anchors=True)


def oversize_set(tasks: int, compute_samples: int, onpolicy_tasks: int, train_tasks: int = 16) -> TaskSet:
    """Tasks beyond the paper's plan space (synthetic data only): a second dataset of 100 regular tables, 8 of up
    to 4 M rows (at dim 128 larger than one device) and 8 small hot ones, each task with at least one table
    larger than a device and one hot table; its compute shards timed (without them the compute model never sees a
    table of more rows than the first dataset's or a hot one) and its training tasks' plans by the planners that
    make row-wise and data-parallel tables measured in the plan job: the retrained compute model learns from them
    what a rank of row blocks costs there, which shards timed on their own do not teach it (docs/EXPERIMENTS.md,
    the entry on the new set's on-policy data). With --torchrec_train NeuroShard over every sharding type is the
    algorithm judged, trained beside TorchRec's full planner."""
    return TaskSet("oversize", "tasks with a table larger than a device and a hot one", "oversize", tables=100,
                   large_tables=8, large_rows=4_000_000, hot_tables=8, kind=("oversize", "hot"), tasks=tasks,
                   eval_tasks=tasks, train_tasks=train_tasks, compute_samples=compute_samples,
                   onpolicy_tasks=onpolicy_tasks, onpolicy_algs=f"{TORCHREC_FULL},size_lookup_greedy,neuroshard",
                   spread=True, baselines=("size_lookup_greedy", TORCHREC_FULL),
                   torchrec_reference="neuroshard[torchrec]", torchrec_onpolicy=True)


PRESETS = {
    # For the end-to-end smoke test: every step, seconds each, but the world-count steps (three 4-rank torchrun
    # jobs would add 40 s to the suite's longest test; their commands are checked in tests/pipeline/test_steps.py).
    "tiny": Preset("tiny", Problem(ndevices=2, max_mem=1.0),
                   (paper_set(tables=16, tasks=3, eval_tasks=2, train_tasks=4, compute_samples=100,
                              onpolicy_tasks=2),),
                   max_dim=32, batch_size=256, max_rows=20000, t_range="4,8", max_tables=4, comm_samples=16,
                   comm_t_range="4,8", sleep_range="0,2", comm_batch_size=256, warmup=1, iters=2, noise_samples=4,
                   epochs=20,
                   dreamshard_args=("--num_iterations", "2", "--bench_steps", "3", "--bench_training_steps", "20",
                                    "--rl_num_batches", "2", "--rl_batch_size", "4"),
                   autoshard_args=("--total_steps", "400", "--batch_size", "4", "--unroll_length", "50",
                                   "--num_cost_updates", "2", "--cost_batch_size", "32"),
                   eval_warmup=1, eval_iters=2, eval_repeats=2, drift_samples=4, ensemble=2,
                   plus_lambdas="0,1", torchrec_tasks=2, torchrec_warmup=1, torchrec_iters=3,
                   torchrec_repeats=2, refine=2, refine_repeats=1, ablation=True, collective_samples=12,
                   collective_noise=3),
    # `make demo`: the whole pipeline on CPU within 15 minutes, install included, on the default synthetic
    # dataset of gen_dlrm_data.py. The comm batch equals the dataset's, as eval.py uses it. 600 tables, not
    # fewer: the compute model generalises to unseen tables with the number of distinct tables it trains on,
    # not with the number of shards. The strongest baselines only (`--preset paper` and `--alg all` keep the
    # others, which lose to NeuroShard by far on hardware). The tasks, the noise samples, the collectives' samples
    # and the warm-up iterations are as few as keep the demo inside its 15 minutes on a slow day; the study
    # preset has the power.
    "quick": Preset("quick", Problem(ndevices=4, max_mem=1.0),
                    (paper_set(tables=600, tasks=20, eval_tasks=8, train_tasks=50, compute_samples=650,
                               onpolicy_tasks=2, unmeasured_tasks=20),
                     oversize_set(tasks=4, compute_samples=150, onpolicy_tasks=4)),
                    max_dim=128, batch_size=4096, max_rows=1_000_000, t_range="10,30", max_tables=10,
                    comm_samples=300, comm_t_range="10,30", sleep_range="0,50", comm_batch_size=4096, warmup=3,
                    iters=7, noise_samples=30, epochs=1000, dreamshard_args=(), autoshard_args=(), eval_warmup=2,
                    eval_iters=5, eval_repeats=2, drift_samples=20, ensemble=3, spread_dist="log",
                    algs="neuroshard,neuroshard_plus,size_lookup_greedy,torchrec,dreamshard,autoshard", ablation=True,
                    collective_samples=60, collective_noise=10),
    # The paper's setting on the public dataset and GPUs (DESIGN §2 defaults: 4 GB per GPU, T from 10 to 60,
    # 100 tasks, batch 65536); run once with 4 and once with 8 GPUs.
    "paper": Preset("paper", Problem(ndevices=4, max_mem=4.0),
                    (paper_set(tables=856, tasks=100, eval_tasks=100, train_tasks=100, compute_samples=100_000,
                               onpolicy_tasks=30),),
                    max_dim=128, batch_size=65536, max_rows=0, t_range="10,60", max_tables=15,
                    comm_samples=20_000, comm_t_range="10,60", sleep_range="0,30", comm_batch_size=65536,
                    warmup=5, iters=10, noise_samples=500, epochs=1000, dreamshard_args=(), autoshard_args=(),
                    eval_warmup=5, eval_iters=10, eval_repeats=3, drift_samples=200, gpu=True, ensemble=5),
}
# Hardware verdicts with power: the quick preset's data and models, four algorithms (NeuroShard, NeuroShard+,
# the strongest baselines), sized by eval/power.py so that one run detects a 3% difference on this machine.
# With prediction-powered verdicts (the unmeasured tasks) the repeat noise, not the task spread, bounds the
# power, so more tasks in fewer rounds detect smaller differences at a fixed number of measurements; two rounds
# are the fewest the intervals, the repeat noise and the cross-fitted headroom need. 6,000 compute samples: at
# 3,000 the compute model's held-out MAPE still fell with more data; 6,000 collected in one go took it a fifth
# lower. Data added from another hour did not help: the machine's speed had moved between the two. 24 anchor
# tasks: a round's factors are medians over its anchors, so each anchor's own model error reaches every plan of
# the round through them; 24 rather than 12 halve that variance for about 2% more measurements. World counts 2 and
# 8, with 4 held out: its 3c collection, the largest and the most re-measured, judges the models for any world size
# on a count they never saw (3 and 6 do not divide the comm batch).
PRESETS["study"] = replace(PRESETS["quick"], name="study", eval_repeats=2, eval_warmup=3, eval_iters=7,
                           comm_samples=500, noise_samples=100, drift_samples=50,
                           algs="neuroshard,neuroshard_plus,torchrec,autoshard", collective_samples=240,
                           collective_noise=30, round_anchors=24, world_counts=(2, 4, 8), world_held=(4,),
                           task_sets=(paper_set(tables=600, tasks=220, eval_tasks=220, train_tasks=50,
                                                compute_samples=6000, onpolicy_tasks=6, unmeasured_tasks=440),
                                      oversize_set(tasks=6, compute_samples=600, onpolicy_tasks=4)))
