#!/usr/bin/env python3
"""PyTorch's own Pipe (torchgpipe upstreamed as torch.distributed.pipeline.sync.Pipe)
on the same scripted model, split the same way, for bench/compare.sh.

    pipe_baseline.py MODEL.pt --batch 256 --features 512 --stages 4 --chunks 8 --checkpoint never

Pipe makes each child of its nn.Sequential one partition, so the model's
children are grouped into one inner nn.Sequential per stage (as evenly as
gpipe-compile --stages does). On CPU every partition runs on the CPU device,
so Pipe uses one worker thread for all of them. Prints one line:
`pipe: <samples/s> samples/s`.
"""
import argparse
import os
import statistics
import tempfile
import time

import torch
from torch import nn
from torch.distributed import rpc
from torch.distributed.pipeline.sync import Pipe


def even_balance(units: int, stages: int):
    return [units // stages + (1 if s < units % stages else 0) for s in range(stages)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--features", type=int, required=True)
    p.add_argument("--stages", type=int, required=True)
    p.add_argument("--chunks", type=int, required=True)
    p.add_argument("--checkpoint", default="never", choices=["always", "except_last", "never"])
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    with tempfile.NamedTemporaryFile() as f:
        rpc.init_rpc("worker", rank=0, world_size=1,
                     rpc_backend_options=rpc.TensorPipeRpcBackendOptions(init_method=f"file://{f.name}"))
        scripted = torch.jit.load(args.model)
        children = [m for _, m in scripted.named_children()]
        stages, start = [], 0
        for count in even_balance(len(children), args.stages):
            stages.append(nn.Sequential(*children[start:start + count]))
            start += count
        pipe = Pipe(nn.Sequential(*stages), chunks=args.chunks, checkpoint=args.checkpoint)
        pipe.train()
        opt = torch.optim.SGD(pipe.parameters(), lr=1e-4)
        torch.manual_seed(0)
        x = torch.randn(args.batch, args.features)
        times = []
        for step in range(args.steps + 1):
            t0 = time.perf_counter()
            opt.zero_grad()
            pipe(x).local_value().sum().backward()
            opt.step()
            if step:
                times.append(time.perf_counter() - t0)
        print(f"pipe: {args.batch / statistics.median(times):.1f} samples/s")
        rpc.shutdown()


if __name__ == "__main__":
    main()
