#!/usr/bin/env python3
"""Export any torchvision model by name (randomly initialised, scripted) for gpipe-compile.

    /usr/bin/python3 samples/export_torchvision.py --model densenet121 --out densenet121.pt
    gpipe-compile densenet121.pt -o densenet121.gpipe --stages 4 --chunks 2 \
        --verify --sample-input 2x3x64x64

Classification models by their torchvision name (resnet50, vit_b_16, densenet121,
efficientnet_b0, ...), segmentation models too (fcn_resnet50, deeplabv3_resnet50,
lraspp_mobilenet_v3_large: they return a dict). bench/zoo.sh sweeps all of them.
"""
import argparse

import torch
import torchvision
from torchvision.models import segmentation


def build(name: str, num_classes: int) -> torch.nn.Module:
    if hasattr(segmentation, name):
        return getattr(segmentation, name)(weights=None, weights_backbone=None, num_classes=num_classes)
    if not hasattr(torchvision.models, name):
        raise SystemExit(f"export_torchvision.py: torchvision has no model '{name}'; "
                         f"see torchvision.models.list_models()")
    return getattr(torchvision.models, name)(weights=None, num_classes=num_classes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="torchvision model name, e.g. densenet121")
    parser.add_argument("--out", required=True)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = build(args.model, args.num_classes).eval()
    torch.jit.script(model).save(args.out)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out}: {args.model}, {n_params} parameters, input [B, 3, H, W]")


if __name__ == "__main__":
    main()
