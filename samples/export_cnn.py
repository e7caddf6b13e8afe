#!/usr/bin/env python3
"""Export a small convolutional classifier for 8x8 grey images (scikit-learn's digits).

    /usr/bin/python3 samples/export_cnn.py --out cnn.pt
    gpipe-compile cnn.pt -o cnn.gpipe --stages 4 --chunks 4 --verify --sample-input 64x1x8x8

Batch norm in training mode sees each micro-batch alone unless compiled with
--defer-batch-norm (torchgpipe's deferred statistics over the mini-batch).
"""
import argparse

import torch
from torch import nn


def cnn(classes: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(128 * 2 * 2, 128), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(128, classes),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = cnn(args.classes)
    torch.jit.script(model).save(args.out)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out}: CNN, {n_params} parameters, input [B, 1, 8, 8] float32, {args.classes} classes")


if __name__ == "__main__":
    main()
