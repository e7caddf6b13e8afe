#!/usr/bin/env python3
"""Export a small U-Net with long skip connections for gpipe-compile.

Each encoder output is concatenated into the decoder at the same depth, so
splitting it into stages creates skip routes ("portals") that gpipe-cpp
sends straight from the encoder stage to the decoder stage.

    /usr/bin/python3 samples/export_unet.py --out unet.pt
    gpipe-compile unet.pt -o unet.gpipe --stages 3 --verify --sample-input 4x3x64x64
"""
import argparse

import torch
from torch import nn


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, channels: int = 3, base: int = 16, classes: int = 2):
        super().__init__()
        self.enc1 = block(channels, base)
        self.enc2 = block(base, base * 2)
        self.enc3 = block(base * 2, base * 4)
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = block(base * 4, base * 8)
        self.up3 = nn.ConvTranspose2d(base * 8, base * 4, 2, stride=2)
        self.dec3 = block(base * 8, base * 4)
        self.up2 = nn.ConvTranspose2d(base * 4, base * 2, 2, stride=2)
        self.dec2 = block(base * 4, base * 2)
        self.up1 = nn.ConvTranspose2d(base * 2, base, 2, stride=2)
        self.dec1 = block(base * 2, base)
        self.head = nn.Conv2d(base, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        e3 = self.enc3(self.pool(e2))
        b = self.bottleneck(self.pool(e3))
        d3 = self.dec3(torch.cat([self.up3(b), e3], 1))
        d2 = self.dec2(torch.cat([self.up2(d3), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
        return self.head(d1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--base", type=int, default=16, help="channels of the first level")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = UNet(base=args.base)
    torch.jit.script(model).save(args.out)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out}: U-Net, {n_params} parameters, input [B, 3, H, W] (H, W divisible by 8)")


if __name__ == "__main__":
    main()
