#!/usr/bin/env python3
"""PyTorch's own torch.distributed.pipelining on the MLP of bench/schedules.sh,
split into the same stages, for bench/schedules_peer.sh.

One schedule per invocation, one process per rank (Gloo, CPU), started by
torchrun from the virtualenv whose torch is the LibTorch our binaries use:

    .venv-torch2/bin/python -m torch.distributed.run --nproc-per-node 4 \\
        bench/pipelining_peer.py --schedule 1f1b --batch 256 --micro-batches 8 --steps 5

The model is samples/export_mlp.py's build_mlp() with the same seed (so the
same weights as the exported .pt): Linear/ReLU/Dropout/LayerNorm blocks and a
last Linear, 33 layers for --blocks 8. --split gives the layers of each stage
(bench/schedules_peer.sh passes what gpipe-inspect printed for our artifact);
by default whole blocks are spread evenly and the last stage also takes the
last Linear. Stage s runs on rank s % world (with 2 stages per rank: stages
0..3 on ranks 0..3, then 4..7 again on ranks 0..3, as gpipe-run --ranks
0,1,2,3,0,1,2,3). Schedules, named as gpipe-run names them:

    gpipe             ScheduleGPipe                   1 stage per rank
    1f1b              Schedule1F1B                    1 stage per rank
    interleaved-1f1b  ScheduleInterleaved1F1B         --virtual-stages per rank (default 2)
    zb-h1             ScheduleInterleavedZeroBubble   1 stage per rank (ZB1P, i.e. ZB-H1 at V=1)

The loss is gpipe-run --loss mse's on random inputs: the mean squared error
against a random target drawn after the input from the same seed (so the same
values as gpipe-run's), each micro-batch contributing its share of the
mini-batch's mean (scale_grads=False); then SGD (--lr) on each rank's stages.
The values stay finite (each step's loss is printed, as gpipe-run prints its). Intra-op threads: --threads (default 1) per process.

Measured per rank: each step's wall time from a barrier to the end of the
optimizer step; samples/s = batch / step time; the median over steps 2..N
(the upper median, as gpipe-run takes it), reported for rank 0 as gpipe-run
reports its rank 0. Memory (no CPU allocator statistics exist in PyTorch):
ru_maxrss, the process's peak resident set: "peak RSS" after the last step;
"above runtime" = that minus ru_maxrss right after `import torch` (weights,
gradients, Gloo buffers, the pipelining machinery and activations); "growth
in training" = that minus ru_maxrss just before step 1 (how far the training
steps raised the high-water mark). Rank 0 prints one line per rank and then

    summary: <steps> steps, median <X> samples/s (rank 0, steps 2..N); peak RSS max <Y> MiB; \\
        RSS above runtime max <A> MiB; RSS growth in training max <Z> MiB

or, on a failure on any rank, `FAILED: <exception>` (and exits 1).
"""
import argparse
import datetime
import gc
import os
import resource
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples"))
from export_mlp import build_mlp  # noqa: E402  (the exported model's exact layers)

SCHEDULES = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved-1f1b": "ScheduleInterleaved1F1B",
    "zb-h1": "ScheduleInterleavedZeroBubble",
}
SINGLE_STAGE = {"gpipe", "1f1b"}  # PipelineScheduleSingle: exactly one stage per rank


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def default_split(layers: int, stages: int):
    # Whole 4-layer blocks spread evenly; the last stage also takes the last Linear.
    blocks = (layers - 1) // 4
    per = [blocks // stages + (1 if s < blocks % stages else 0) for s in range(stages)]
    split = [4 * b for b in per]
    split[-1] += 1
    return split


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schedule", required=True, choices=sorted(SCHEDULES))
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--micro-batches", type=int, default=8)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--virtual-stages", type=int, default=0,
                   help="stages per rank (default: 2 for interleaved-1f1b, else 1)")
    p.add_argument("--split", default="", help="layers per stage, e.g. 8,8,8,9 (default: even blocks)")
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--in-features", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--out-features", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--timeout-s", type=int, default=120, help="Gloo timeout, so that a failed peer ends the run")
    args = p.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    runtime_rss = max_rss_mib()  # Python and torch loaded, nothing built yet
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    try:
        code = run(args, rank, world, runtime_rss)
    except Exception as e:  # report it in one line on stdout; the traceback goes to stderr
        traceback.print_exc()
        print(f"[rank {rank}] FAILED: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
        return 1
    # Every rank done and the schedule's pending work freed before any rank tears
    # Gloo down: without this a rank has died at exit ("terminate called without
    # an active exception", SIGABRT) after a complete run. It still happens now
    # and then (Gloo's teardown); bench/schedules_peer.sh keeps the measurement
    # and reports it.
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return code


def run(args, rank: int, world: int, runtime_rss: float) -> int:
    from torch.distributed import pipelining

    virtual = args.virtual_stages or (2 if args.schedule == "interleaved-1f1b" else 1)
    if args.schedule in SINGLE_STAGE and virtual != 1:
        raise ValueError(f"{args.schedule} runs one stage per rank")
    num_stages = world * virtual

    torch.manual_seed(args.seed)  # export_mlp.py's seed: the same weights as the exported model
    model = build_mlp(args.in_features, args.hidden, args.out_features, args.blocks, args.dropout)
    layers = list(model.children())
    split = [int(n) for n in args.split.split(",")] if args.split else default_split(len(layers), num_stages)
    if len(split) != num_stages or sum(split) != len(layers):
        raise ValueError(f"--split {split} must give {num_stages} stages summing to {len(layers)} layers")
    bounds = [sum(split[:s]) for s in range(num_stages + 1)]
    local = [s for s in range(num_stages) if s % world == rank]
    device = torch.device("cpu")
    stages = []
    for s in local:
        sub = nn.Sequential(*layers[bounds[s]:bounds[s + 1]])
        sub.train()
        stages.append(pipelining.PipelineStage(sub, s, num_stages, device))
    del model, layers

    count = args.batch * args.out_features

    def loss_fn(output, target):
        # gpipe-run --loss mse on random inputs: each micro-batch's share of the
        # mini-batch's mean squared error against a fixed random target
        # (summed over its rows, divided by the whole batch's elements); the
        # shares add up to the mean, so gradients are not scaled again.
        return nn.functional.mse_loss(output, target, reduction="sum") / count

    cls = getattr(pipelining, SCHEDULES[args.schedule])
    if args.schedule in SINGLE_STAGE:
        schedule = cls(stages[0], args.micro_batches, loss_fn=loss_fn, scale_grads=False)
    else:
        schedule = cls(stages, args.micro_batches, loss_fn=loss_fn, scale_grads=False)
    params = [q for st in stages for q in st.submod.parameters()]
    optimizer = torch.optim.SGD(params, lr=args.lr)

    torch.manual_seed(args.seed)  # gpipe-run draws its input, then its target, after this seed
    x = torch.randn(args.batch, args.in_features)
    target = torch.randn(args.batch, args.out_features)
    has_first, has_last = 0 in local, num_stages - 1 in local

    if rank == 0:
        print(f"torch {torch.__version__} pipelining {cls.__name__}: {num_stages} stages "
              f"(layers {split}) on {world} ranks, {virtual} per rank, batch {args.batch}, "
              f"micro-batches {args.micro_batches}, threads {torch.get_num_threads()}/process, gloo", flush=True)
    dist.barrier()
    rss_before = max_rss_mib()
    seconds = []
    for step in range(1, args.steps + 1):
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        losses = []
        step_args = (x,) if has_first else ()
        kwargs = {"target": target, "losses": losses} if has_last else {}
        schedule.step(*step_args, **kwargs)
        optimizer.step()
        seconds.append(time.perf_counter() - start)
        if has_last:  # the values stay finite: both sides print their losses
            print(f"[loss] step {step}/{args.steps}  loss {sum(float(l) for l in losses):.6f}", flush=True)
        if rank == 0:
            print(f"step {step}/{args.steps}  {args.batch / seconds[-1]:.1f} samples/s (rank 0)", flush=True)
    rss_after = max_rss_mib()

    rates = sorted(args.batch / t for t in (seconds[1:] if len(seconds) > 1 else seconds))
    mine = {"rank": rank, "median": rates[len(rates) // 2], "peak": rss_after, "growth": rss_after - rss_before,
            "above": rss_after - runtime_rss,
            "mean": statistics.mean(rates)}
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        for g in gathered:
            print(f"rank {g['rank']}: median {g['median']:.1f} samples/s, peak RSS {g['peak']:.1f} MiB, "
                  f"above runtime {g['above']:.1f} MiB, growth in training {g['growth']:.1f} MiB", flush=True)
        print(f"summary: {args.steps} steps, median {gathered[0]['median']:.1f} samples/s (rank 0, steps "
              f"{'2..' if args.steps > 1 else '1'}); peak RSS max {max(g['peak'] for g in gathered):.1f} MiB; "
              f"RSS above runtime max {max(g['above'] for g in gathered):.1f} MiB; "
              f"RSS growth in training max {max(g['growth'] for g in gathered):.1f} MiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
