#!/usr/bin/env python3
"""Write the small TorchScript models the C++ tests load (a CTest fixture).

    /usr/bin/python3 tests/export_test_models.py --dir build/test_models
"""
import argparse
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples"))
from export_mlp import build_mlp  # noqa: E402


class FailOnMarker(nn.Module):
    """Raises when a row of its input holds a huge value: a stage that fails on one micro-batch."""

    def forward(self, x):
        if bool((x.abs() > 1.0e4).any()):
            raise RuntimeError("FailOnMarker saw the marker row")
        return x


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    torch.manual_seed(0)
    # 9 layers: Linear/ReLU/Dropout/LayerNorm x2 + Linear, small enough for quick tests.
    torch.jit.script(build_mlp(16, 32, 8, blocks=2, dropout=0.25)).save(os.path.join(args.dir, "mlp9.pt"))
    failing = nn.Sequential(nn.Linear(4, 4), FailOnMarker(), nn.Linear(4, 4))
    torch.jit.script(failing).save(os.path.join(args.dir, "failing.pt"))
    with open(os.path.join(args.dir, "not_a_model.pt"), "w") as f:
        f.write("this is not a TorchScript archive\n")
    with open(os.path.join(args.dir, "mlp9.pt"), "rb") as f:
        data = f.read()
    with open(os.path.join(args.dir, "truncated.pt"), "wb") as f:
        f.write(data[: len(data) // 2])
    print(f"wrote test models to {args.dir}")


if __name__ == "__main__":
    main()
