#!/usr/bin/env python3
"""Export torchvision's ResNet (randomly initialised, scripted) for gpipe-compile.

    /usr/bin/python3 samples/export_resnet.py --out resnet50.pt
    gpipe-compile resnet50.pt -o resnet50.gpipe --split-before layer2.0,layer3.0,layer4.0 \
        --chunks 4 --verify --sample-input 8x3x224x224
"""
import argparse

import torch
import torchvision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--arch", default="resnet50", choices=["resnet18", "resnet34", "resnet50", "resnet101"])
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = getattr(torchvision.models, args.arch)(weights=None, num_classes=args.num_classes)
    torch.jit.script(model).save(args.out)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out}: {args.arch}, {n_params} parameters, input [B, 3, H, W]")


if __name__ == "__main__":
    main()
