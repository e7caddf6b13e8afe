#!/usr/bin/env python3
"""Export the sample MLP (a scripted nn.Sequential) for gpipe-compile.

Run with the interpreter that has torch (Debian: /usr/bin/python3):
    /usr/bin/python3 samples/export_mlp.py --out mlp.pt
"""
import argparse

import torch
from torch import nn


def build_mlp(in_features: int, hidden: int, out_features: int, blocks: int, dropout: float) -> nn.Sequential:
    layers = []
    width = in_features
    for _ in range(blocks):
        layers += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout), nn.LayerNorm(hidden)]
        width = hidden
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="where to write the TorchScript model")
    parser.add_argument("--in-features", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--out-features", type=int, default=512)
    parser.add_argument("--blocks", type=int, default=3, help="Linear/ReLU/Dropout/LayerNorm blocks (4 layers each)")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.blocks < 1:
        parser.error("--blocks must be at least 1")

    torch.manual_seed(args.seed)
    model = build_mlp(args.in_features, args.hidden, args.out_features, args.blocks, args.dropout)
    scripted = torch.jit.script(model)
    scripted.save(args.out)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out}: nn.Sequential with {len(model)} layers, {n_params} parameters, "
          f"input [B, {args.in_features}]")


if __name__ == "__main__":
    main()
