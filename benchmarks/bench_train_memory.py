"""Memory that holds in training: each rank's memory while a plan trains under DistributedModelParallel, against
the counts a planner makes of it.

    python benchmarks/bench_train_memory.py --out_json results/train_memory.json        # the grid (~10 min)
    python benchmarks/bench_train_memory.py --cases quick                                # four cases
    python benchmarks/bench_train_memory.py --cases heldout --out_json results/train_memory_heldout.json
    python benchmarks/bench_train_memory.py --measured results/train_memory.json        # recount, no training

Trains 4 tables of 50,000 x 64 (12.8 MB each in fp32) on 2 gloo CPU ranks (one torchrun job,
`neuroshard.torchrec.memory`), each case sharded one way (table-wise, column-wise, row-wise, data-parallel),
with SGD or row-wise Adagrad through the sharder's fused_params, row-wise Adagrad through
apply_optimizer_in_backward, Adam (FBGEMM's CPU kernel refuses it on fused tables: data-parallel only), fp32
weights at a global batch of 512 and 8192 and fp16 weights at 8192 (not Adam), 20 ids per table and sample. Per rank it
reads the resident size (RSS) over the rank's baseline (the interpreter, torch, FBGEMM, TorchRec imported and the
process group up, measured before each case and subtracted): after the model is built, the high-water mark of
the steps, and the tensors held (tables, optimizer state, gradients). RSS, not torch's allocator counters: on
CPU torch has none that count (see the module). Then per rank the counts of the same plan: NeuroShardPlanner's
(memory="torchrec" and memory="weights"), TorchRec's storage estimator's (its estimate of the plan's shards)
and fp32 weights. Prints a table (MB per rank, the larger of the two ranks) and the ratio of each count to the
measured step peak; --out_json writes every number.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuroshard.settings import add_flag, parse_flags  # noqa: E402

WORLD, ROWS, DIM, TABLES, POOLING = 2, 50_000, 64, 4, 20
COUNTS = ("neuroshard", "weights", "torchrec", "fp32")


def grid(cases: str = "grid"):
    from neuroshard.torchrec.memory import FUSED, IN_BACKWARD, SHARDING_TYPES, MemoryCase

    tables = [[f"t{k}", ROWS, DIM] for k in range(TABLES)]
    if cases == "heldout":  # other shapes, pooling factors and batch than the grid the step buffers were read from
        mixed = [["a", 80_000, 128], ["b", 40_000, 32], ["c", 120_000, 32], ["d", 20_000, 128]]
        return [MemoryCase(kind, opt, FUSED, "fp32", 4096, pooling, mixed) for pooling in (5, 50)
                for kind in SHARDING_TYPES for opt in ("sgd", "row_wise_adagrad")]
    if cases == "quick":
        return [MemoryCase(t, o, v, d, 8192, POOLING, tables) for t, o, v, d in (
            ("table_wise", "sgd", FUSED, "fp32"), ("row_wise", "row_wise_adagrad", IN_BACKWARD, "fp32"),
            ("column_wise", "sgd", FUSED, "fp16"), ("data_parallel", "adam", FUSED, "fp32"))]
    cases = []
    for batch in (512, 8192):
        for kind in SHARDING_TYPES:
            for opt, via in (("sgd", FUSED), ("row_wise_adagrad", FUSED), ("row_wise_adagrad", IN_BACKWARD)):
                cases.append(MemoryCase(kind, opt, via, "fp32", batch, POOLING, tables))
        cases.append(MemoryCase("data_parallel", "adam", FUSED, "fp32", batch, POOLING, tables))
    for kind in SHARDING_TYPES:
        for opt, via in (("sgd", FUSED), ("row_wise_adagrad", FUSED), ("row_wise_adagrad", IN_BACKWARD)):
            cases.append(MemoryCase(kind, opt, via, "fp16", 8192, POOLING, tables))
    cases.append(MemoryCase("table_wise", "adam", FUSED, "fp32", 8192, POOLING, tables))  # refused on CPU: said so
    return cases


def row(result, counts) -> dict:
    """One case's numbers: per count its bytes per rank; the measured ones per rank."""
    ranks = result["ranks"]
    out = {"case": result["case"], "error": result.get("error"), "ranks": ranks, "counts": counts}
    if ranks:
        out["measured"] = {k: [r[k] for r in ranks] for k in ("baseline", "built", "build_peak", "step_peak", "after")}
        out["tensors_after"] = [r["tensors_after"] for r in ranks]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", choices=("grid", "quick", "heldout"), default="grid",
                   help="grid (default), quick (four cases), or heldout (16 cases of other tables, pooling factors "
                        "5 and 50 and batch 4096)")
    p.add_argument("--measured", help="a JSON this script wrote: count its cases again without training")
    p.add_argument("--steps", type=int, default=3, help="training steps per case (default: 3)")
    add_flag(p, "out_json")
    args = parse_flags(p, argv, __file__)
    import logging
    import warnings

    from neuroshard.torchrec.memory import MemoryCase, counted, measure_cases

    logging.getLogger("neuroshard").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    if args.steps < 1:
        p.error(f"--steps: must be >= 1, got {args.steps}")
    if args.measured:
        try:
            results = json.loads(Path(args.measured).read_text())["cases"]
            [MemoryCase.from_json(r["case"]) for r in results]
        except (OSError, ValueError, KeyError, TypeError) as e:
            p.error(f"--measured {args.measured}: not a file this script wrote ({type(e).__name__}: {e})")
    else:
        t0 = time.time()

        def note(r):
            print(f"  {time.time() - t0:5.0f} s  {r.case.label}: {r.error or 'measured'}", file=sys.stderr, flush=True)

        results = [r.to_json() for r in measure_cases(grid(args.cases), WORLD, args.steps, note)]
        if args.out_json:  # the measurements, before anything else can fail
            Path(args.out_json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out_json).write_text(json.dumps({"world": WORLD, "steps": args.steps, "cases": results}))
    rows = [row(r, counted(MemoryCase.from_json(r["case"]), WORLD)) for r in results]
    mb = 1e6
    print(f"{'case':64s} {'base':>5s} {'built':>6s} {'peak':>6s} | {'NS':>6s} {'weights':>7s} {'TorchRec':>8s} "
          f"{'fp32':>6s} | peak / NS  (MB per rank, the larger rank; base: the baseline RSS)")
    for r in rows:
        label = MemoryCase.from_json(r["case"]).label
        if r["error"]:
            print(f"{label:64s} not trained: {r['error']}")
            continue
        m, c = r["measured"], r["counts"]
        peak = max(m["step_peak"])
        print(f"{label:64s} {max(m['baseline']) / mb:5.0f} {max(m['built']) / mb:6.1f} {peak / mb:6.1f} | "
              + " ".join(f"{max(c[k]) / mb:{w}.1f}" for k, w in zip(COUNTS, (6, 7, 8, 6)))
              + f" | {peak / max(c['neuroshard']):5.2f}")
    if args.out_json:
        Path(args.out_json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out_json).write_text(json.dumps({"world": WORLD, "steps": args.steps, "cases": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
