"""Run the whole pipeline at a preset, then write the report.

    python -m neuroshard.pipeline --preset quick          # what `make demo` runs
    python -m neuroshard.pipeline --preset quick --force  # redo every step
    python -m neuroshard.pipeline --preset quick --seed 1  # fresh measurements -> results/quick-seed1
    python -m neuroshard.pipeline --preset quick --only 5c,6b   # these steps of every task set (or a phase: 5)
    python -m neuroshard.pipeline --preset quick --only 6b:oversize   # one step of one task set (or a set: oversize)
    python -m neuroshard.pipeline --preset study --only 3f@8   # one step of one world count (3f: of every count)
    python -m neuroshard.pipeline --preset quick --list   # the steps x task sets, what each reads and writes
    python -m neuroshard.pipeline --preset quick --torchrec_train  # also phase 7: the plans trained in TorchRec
    python -m neuroshard.pipeline --preset paper --data fbgemm_t856_bs65536.pt.gz --gpu_devices 0,1,2,3

The steps are the rows of `pipeline.steps.STEPS`, each a script at the
repository root, some run once per task set of the preset (`6b:paper`,
`6b:oversize`); the driver prints each command before it runs it, so any
step can be rerun by hand. A step is skipped when its outputs exist and were
made by the same command (a stamp in `<out>/steps/`); a changed upstream step
invalidates everything after it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

from neuroshard.checks import check_gpu_ids, check_int
from neuroshard.formats.io import write_json_atomic
from neuroshard.pipeline.layout import Layout, Run
from neuroshard.pipeline.presets import PRESETS, Preset
from neuroshard.pipeline.processes import StepLauncher
from neuroshard.pipeline.steps import Step, build_steps
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags
from neuroshard.types.errors import ConfigError, InputError, NeuroShardError

ROOT = Path(__file__).resolve().parents[2]


def _stamp_path(out: Path, step: Step) -> Path:
    return out / "steps" / f"{step.name.replace(':', '-')}.json"


def _up_to_date(out: Path, step: Step, argv: list[str], upstream: list[dict]) -> dict | None:
    """The step's stamp if its outputs exist and were made by the same command, else None."""
    path = _stamp_path(out, step)
    if not path.exists() or not all(o.exists() for o in step.outputs):
        return None
    try:
        stamp = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return stamp if stamp.get("argv") == argv and stamp.get("upstream") == upstream else None


def run_steps(steps: list[Step], out: Path, force: bool, only: set[str] | None = None,
              launch: StepLauncher | None = None) -> list[dict]:
    """Run (or skip) each step, by `launch` (default: a fork of this process per script step where the platform
    has one); returns one record per step with its wall time."""
    launch = launch or StepLauncher(ROOT)
    records, upstream = [], []
    for step in steps:
        if only and step.name not in only:
            continue
        argv = step.command()
        shown = "python " + " ".join(shlex.quote(a) for a in argv)
        stamp = None if force else _up_to_date(out, step, argv, upstream)
        if stamp is not None:
            print(f"[{step.name}] {step.title}: up to date, skipped\n      {shown}", flush=True)
            # keep the time the step took when it ran, for the report
            records.append({"step": step.name, "title": step.title, "command": shown, "skipped": True,
                            "seconds": stamp.get("seconds", 0.0)})
        else:
            print(f"[{step.name}] {step.title}\n  $ {shown}", flush=True)
            launch.preload()  # the driver's one-off imports are not the step's time
            t0 = time.perf_counter()
            rc = launch(argv)
            seconds = time.perf_counter() - t0
            if rc != 0:
                raise NeuroShardError(f"step {step.name} ({step.title}) failed with exit code {rc}; "
                                      f"rerun it by hand: {shown}")
            write_json_atomic(_stamp_path(out, step), {"argv": argv, "upstream": upstream,
                                                       "seconds": round(seconds, 2)})
            records.append({"step": step.name, "title": step.title, "command": shown, "skipped": False,
                            "seconds": round(seconds, 2)})
            print(f"[{step.name}] done in {seconds:.1f} s", flush=True)
        upstream = upstream + [{"step": step.name, "argv": argv}]
    return records


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="quick", help="sizes of the run (default: quick)")
    add_flag(ap, "out_dir", help="output folder (default: results/<preset>, results/<preset>-seed<N> for --seed N)")
    add_flag(ap, "data")
    add_flag(ap, "gpu_devices", help="GPUs to use, e.g. 0,1,2,3, one rank or worker each (default: CPU)")
    Problem.add_args(ap, defaults={"max_mem": None}, helps={
        "ndevices": "the preset's device count, overridden", "max_mem": "the preset's memory per device (GB), "
        "overridden", "seed": "seed of every measurement, training and evaluation step (the dataset and tasks keep "
                              "theirs), so fresh runs of a preset can be compared",
        "local_world_size": "ranks per host (default: one host): step 3e also times the collectives over each "
                            "host's group, and the planning, hardware and TorchRec training steps plan and run for "
                            "these hosts (table-row-wise searched)"})
    ap.add_argument("--task_seed", type=int, default=0,
                    help="added to the seed of every task set the run draws (evaluation, training, anchor and "
                         "unmeasured tasks; default 0: the preset's tasks), for runs on fresh tasks")
    add_flag(ap, "refine", None, help="the preset's hardware in the loop when planning, overridden: measure each "
                                      "task's K best candidates of NeuroShard+ on hardware and keep the measured "
                                      "best (0: off)")
    ap.add_argument("--force", action="store_true", default=os.environ.get("FORCE", "") not in ("", "0"),
                    help="redo every step even if its outputs are up to date (also FORCE=1)")
    ap.add_argument("--only", default=None, help="comma list of what to run: steps (of every task set: 5c,6b), "
                                                 "a step of one set (6b:oversize), phases (5,6) or task sets "
                                                 "(oversize)")
    ap.add_argument("--list", action="store_true", help="print the steps x task sets of the run (and what each "
                                                        "reads and writes) and stop")
    ap.add_argument("--torchrec_train", action="store_true",
                    help="also run phase 7: train the plans of the first tasks with TorchRec "
                         "(DistributedModelParallel) "
                         "and compare step times (opt-in: about 10 min more at the quick preset on 2 cores)")
    ap.add_argument("--fresh_interpreters", action="store_true",
                    help="start every step as a new Python interpreter, as its printed command does (default on "
                         "Linux: a fork of the driver, which imports torch, FBGEMM and TorchRec once)")
    return parse_flags(ap, argv, "neuroshard.pipeline")


def preset_from_args(args) -> Preset:
    """The preset named by --preset with the flags that override it (--gpu_devices, --ndevices, --max_mem,
    --local_world_size, --refine)."""
    preset = PRESETS[args.preset]
    problem = preset.problem
    if args.gpu_devices:
        problem = replace(problem, ndevices=len(check_gpu_ids("--gpu_devices", args.gpu_devices)))
    if args.ndevices is not None:
        problem = replace(problem, ndevices=args.ndevices)
    if args.max_mem is not None:
        problem = replace(problem, max_mem=args.max_mem)
    if args.local_world_size is not None:
        problem = replace(problem, local_world_size=args.local_world_size)
    preset = replace(preset, problem=problem)
    if args.refine is not None:
        preset = replace(preset, refine=check_int("--refine", args.refine, 0))
    if preset.gpu and not args.gpu_devices:
        raise NeuroShardError(f"preset {preset.name!r} is meant for GPUs: pass --gpu_devices (e.g. 0,1,2,3)")
    return preset


def run_of(args, out: Path) -> Run:
    """The run the flags describe, its outputs under `out`."""
    preset = preset_from_args(args)
    problem = replace(preset.problem, seed=check_int("--seed", args.seed, 0))
    data = os.path.abspath(args.data) if args.data else None
    return Run(preset, problem, Layout(out), args.gpu_devices, data, args.torchrec_train,
               check_int("--task_seed", args.task_seed, 0))


def phase_of(key: str) -> str:
    """A step key's phase: its leading digits ("7" of "7a")."""
    return key[:len(key) - len(key.lstrip("0123456789"))]


# the keys of the steps before the task sets became a dimension of the pipeline (the second set's steps had keys
# of their own), and the steps they name now; --only takes them with a warning. Five old keys name other steps now
# (2d, 5e, 7c, 7d, 7e): they take their new meaning, with a note of the old one.
RENUMBERED = {"1b": "1:oversize", "2d": "2a:oversize", "2e": "2d:oversize", "2f": "2d:paper", "2g": "2c:oversize",
              "3f": "3a:oversize", "4d2": "4d:oversize", "5e": "5e:oversize", "5f": "5e:paper", "6g": "5c:oversize",
              "6h": "6b:oversize", "7a2": "7a:oversize", "7b2": "7c:oversize", "7b3": "7d", "7c": "7e:paper",
              "7d": "7f:paper", "7e": "7g:paper", "7f": "7e:oversize", "7g": "7f:oversize", "7h": "7g:oversize"}


def _matches(step: Step, name: str) -> bool:
    """`name` (of --only) names `step`: its key (of every set), its key and set, its phase or its set."""
    return name in (step.key, step.name, step.task_set) or (name.isdigit() and phase_of(step.key) == name)


def select(steps: list[Step], only: str | None) -> set[str] | None:
    """The step names (`Step.name`) `--only` names; None: every step."""
    if only is None:
        return None
    names = [k.strip() for k in only.split(",") if k.strip()]
    resolved = []
    for n in names:
        if n in RENUMBERED:
            now = RENUMBERED[n]
            if any(_matches(st, n) for st in steps):
                print(f"note: --only {n} is step {n} of the current numbering ({_title(steps, n)}); before the "
                      f"task sets, {n} was what is now {now}", file=sys.stderr)
            else:
                print(f"warning: --only {n} is deprecated; use {now}", file=sys.stderr)
                n = now
        resolved.append(n)
    chosen = {st.name for st in steps for n in resolved if _matches(st, n)}
    unknown = sorted(n for n in resolved if not any(_matches(st, n) for st in steps))
    if unknown or not names:
        raise ConfigError("--only", f"unknown step {', '.join(unknown) or repr(only)}; the steps are "
                                    f"{', '.join(st.name for st in steps)}")
    return chosen


def _title(steps: list[Step], key: str) -> str:
    return next((st.title for st in steps if _matches(st, key)), "")


def list_steps(steps: list[Step]) -> str:
    """The steps as a table of steps x task sets (x: the step runs for the set; a step run once has no set; a
    step of each world count: its counts, `@2,8`), then each step with its script and what it reads and writes."""
    sets = list(dict.fromkeys(st.task_set for st in steps if st.task_set is not None))
    keys = list(dict.fromkeys(st.key for st in steps))
    width = max(len(st.title) for st in steps)
    lines = [f"{'step':<5} {'':<{width}}  " + "  ".join(sets)]
    for key in keys:
        of_key = [st for st in steps if st.key == key]
        once = "once" if of_key[0].world is None else "@" + ",".join(str(st.world) for st in of_key)
        marks = ["x" if any(st.task_set == ts for st in of_key) else "-" for ts in sets] \
            if of_key[0].task_set is not None else [once if i == 0 else "" for i in range(len(sets))]
        lines.append(f"{key:<5} {of_key[0].title:<{width}}  " + "  ".join(f"{m:<{len(ts)}}" for m, ts in
                                                                          zip(marks, sets)).rstrip())
    lines.append("")
    for st in steps:
        ins = ", ".join(str(p) for p in st.inputs) or "-"
        outs = ", ".join(str(p) for p in st.outputs)
        lines.append(f"{st.name:>3}  {st.title}\n     {st.argv[0]}: {ins} -> {outs}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    # Commands run from the repository root with paths relative to it, so the printed commands can be pasted
    # as they are.
    seed = check_int("--seed", args.seed, 0)
    default = args.preset if seed == 0 else f"{args.preset}-seed{seed}"
    out = Path(args.out_dir or ROOT / "results" / default).resolve()
    out = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    run = run_of(args, out)
    if args.preset == "paper" and not args.data:
        raise NeuroShardError("preset 'paper' needs the public dataset: pass --data fbgemm_t856_bs65536.pt.gz")
    if args.data and not os.path.isfile(args.data):
        raise InputError(args.data, "file not found (--data)")
    if (ROOT / out).exists() and not (ROOT / out).is_dir():
        raise ConfigError("--out_dir", f"{out} is a file")
    steps = build_steps(run)
    only = select(steps, args.only)
    if args.list:
        print(list_steps(steps))
        return 0
    os.chdir(ROOT)
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    records = run_steps(steps, out, args.force, only, StepLauncher(ROOT, fork=not args.fresh_interpreters))
    from neuroshard.pipeline.report import write_report

    study = PRESETS["study"]
    report = write_report(out, run.preset, records, time.perf_counter() - t0,
                          (study.first.eval_tasks, study.eval_repeats))
    print(f"report: {report}")
    return 0
