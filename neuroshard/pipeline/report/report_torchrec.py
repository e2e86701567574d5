"""The report on phase 7: the plans trained with TorchRec (DistributedModelParallel), their step times and
ratios, and the TorchRec runtime model's error on them."""

from __future__ import annotations

from pathlib import Path

from neuroshard.pipeline.report.report_common import load_json
from neuroshard.pipeline.report.report_drift import resampled_phrase


def torchrec_table(folder: Path) -> tuple[str | None, dict | None, dict]:
    """eval_torchrec.py's results in `folder`: the markdown of its step times and ratios, its summary and the
    training settings (None, None, {} when it did not run)."""
    from neuroshard.torchrec.training_eval import flat_settings, summary_markdown

    summary, config = load_json(folder / "summary.json"), load_json(folder / "config.json")
    if not summary:
        return None, None, {}
    config = config or {}
    training = {**flat_settings(config.get("training", {})), "batch_size": config.get("batch_size")}
    return summary_markdown(summary, training), summary, training


def torchrec_lines(out: Path) -> tuple[list[str], dict | None]:
    """Markdown on phase 7 (the plans trained with TorchRec, `torchrec.training_eval`): the table of step times
    and ratios, and how noisy it is on this machine (None when the step did not run)."""
    import os

    table, summary, training = torchrec_table(out / "torchrec")
    if not summary:
        return [], None
    lines = ["Every algorithm's plan for the first tasks, exported as a TorchRec ShardingPlan (fused kernel; "
             "dense for data-parallel tables; torchrec_full is TorchRec's planner with every sharding type) and "
             "trained with DistributedModelParallel: a DLRM (torchrec's dense and over archs, the task's tables in "
             "an EmbeddingBagCollection; the interaction concatenates, as torchrec's DLRM class needs one "
             "embedding dim for all tables), each rank fed its slice of the dataset's real lookups, BCE loss, "
             "fused exact SGD. Plans are trained in rounds, each round in a shuffled order (`eval_torchrec.py`).",
             "", table]
    ranks, cores = training.get("ndevices"), os.cpu_count()
    if training.get("device") == "cpu" and ranks and cores:
        share = (f"{ranks} ranks shared {cores} cores, so at most {cores} of them ran at any moment"
                 if ranks > cores else f"{ranks} ranks ran on {cores} cores, one core each at most")
        lines.append(f"On this machine {share}; every all-to-all of a step waits for the rank the scheduler ran "
                     "last, so the scheduling and the machine's other load are part of each step time. Read a "
                     "verdict only from its interval, and compare the ratios with the noise floor above.")
    lines += runtime_check_lines(out / "torchrec" / "runtime_model_error.json")
    lines.append("")
    lines.append("A plan that mixes table-wise and column-split tables runs two sharding groups in TorchRec, "
                 "each with its own input distribution, kernels and all-to-alls; the cost models price one kernel "
                 "and two all-to-alls per device, so they do not see that overhead.")
    return lines, summary


def runtime_check_lines(path: Path, step: str = "7g") -> list[str]:
    """Markdown on the TorchRec runtime model's error on trained evaluation plans (step 7g of each task set),
    per algorithm where there are several, and, where step 7f trained anchors in every round, the
    same error with each round's speed taken out; nothing without it."""
    check = (load_json(path) or {}).get("check")
    if not check:
        return []
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    line = (f"The TorchRec runtime model (`--runtime torchrec`, fitted on training tasks' plans) on these "
            f"{check['plans']} trained plans: step-time MAPE {check['mape']:.1f}%, predicted / measured "
            f"{check['ratio']:.3f} (step {step}).")
    algs = check.get("by_alg") or {}
    if len(algs) > 1:  # a search's plans priced lower than the others' flatter it by the difference
        line += " By algorithm, predicted / measured: " + ", ".join(
            f"{alg} {row['ratio']:.3f}" for alg, row in algs.items()) + "."
    cal = check.get("rounds")
    if cal and cal.get("mape") is not None:
        times = lambda v, f: f" (a perfect model: {pct(f)}, {v / f:.2f}x)" if f else ""  # noqa: E731
        speeds = ", ".join(f"{f['cost']:.3f}x" for f in cal["factors"])
        line += (f" Per-round calibration: {cal['anchors']} of the plans the runtime model was fitted to (step "
                 f"7a's), trained again in every round, ran at {speeds} the model's steps; each measurement "
                 f"against the model times its round's factor: MAPE **{pct(cal['mape'])}** per measurement"
                 f"{times(cal['mape'], cal.get('floor'))}{resampled_phrase(cal.get('ratio_spread'))}, "
                 f"{pct(cal['raw_mape'])} unmoved; **{pct(cal['mape_mean'])}** for the plans' means"
                 f"{times(cal['mape_mean'], cal.get('floor_mean'))}.")
    return ["", line]
