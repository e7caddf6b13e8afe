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
from export_transformer import GPT  # noqa: E402
from export_unet import UNet  # noqa: E402


class FailOnMarker(nn.Module):
    """Raises when a row of its input holds a huge value: a stage that fails on one micro-batch."""

    def forward(self, x):
        if bool((x.abs() > 1.0e4).any()):
            raise RuntimeError("FailOnMarker saw the marker row")
        return x


class Branchy(nn.Module):
    """A prim::If with real work in both branches, as its own unit."""

    def forward(self, x):
        if bool(x.mean() > 0):
            y = torch.tanh(x) * 2.0
        else:
            y = torch.sigmoid(x) - 1.0
        return y


class Half(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.fc = nn.Linear(cin, cout)

    def forward(self, x):
        return torch.relu(self.fc(x))


class MultiIO(nn.Module):
    """Two tensor inputs and an int, a tuple output, an int crossing a cut."""

    def __init__(self):
        super().__init__()
        self.a = Half(6, 8)
        self.b = Half(5, 8)
        self.c = Half(8, 3)

    def forward(self, x, y, repeat: int):
        h1 = self.a(x)
        width = h1.size(1)
        h2 = self.b(y)
        out = self.c(h1 * repeat + h2[:, :width])
        return out, h1


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
    seq = nn.Sequential(nn.Linear(4, 6), Branchy(), nn.Linear(6, 3))
    torch.jit.script(seq).save(os.path.join(args.dir, "branchy.pt"))
    torch.jit.script(MultiIO()).save(os.path.join(args.dir, "multi_io.pt"))
    # The first layer holds ~91% of the parameters.
    big_first = nn.Sequential(nn.Linear(100, 400), nn.ReLU(), nn.Linear(400, 10), nn.ReLU(),
                              nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 10))
    torch.jit.script(big_first).save(os.path.join(args.dir, "big_first.pt"))
    conv_bn = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                            nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    torch.jit.script(conv_bn).save(os.path.join(args.dir, "conv_bn.pt"))
    torch.jit.script(UNet(base=4)).save(os.path.join(args.dir, "unet.pt"))
    torch.jit.script(GPT(vocab=50, dim=16, heads=2, layers=3, context=16, dropout=0.1)).save(
        os.path.join(args.dir, "gpt.pt"))
    import torchvision
    torch.jit.script(torchvision.models.resnet50(weights=None, num_classes=10)).save(
        os.path.join(args.dir, "resnet50.pt"))
    with open(os.path.join(args.dir, "not_a_model.pt"), "w") as f:
        f.write("this is not a TorchScript archive\n")
    with open(os.path.join(args.dir, "mlp9.pt"), "rb") as f:
        data = f.read()
    with open(os.path.join(args.dir, "truncated.pt"), "wb") as f:
        f.write(data[: len(data) // 2])
    print(f"wrote test models to {args.dir}")


if __name__ == "__main__":
    main()
