#!/usr/bin/env python3
"""Write the small TorchScript models the C++ tests load (a CTest fixture).

    /usr/bin/python3 tests/export_test_models.py --dir build/test_models
"""
import argparse
import os
import sys

from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples"))
from export_mlp import build_mlp  # noqa: E402
from export_transformer import GPT  # noqa: E402
from export_unet import UNet  # noqa: E402
from export_cnn import cnn  # noqa: E402
from make_dataset import load_digits_arrays  # noqa: E402


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


class OptionalArgs(nn.Module):
    """Hugging Face style: an optional mask and a scalar with defaults, a dict output."""

    def __init__(self):
        super().__init__()
        self.embed = Half(6, 8)
        self.body = Half(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x, mask: Optional[torch.Tensor] = None, scale: float = 1.0) -> Dict[str, torch.Tensor]:
        h = self.embed(x) * scale
        if mask is not None:
            h = h * mask.unsqueeze(-1)
        h = self.body(h)
        return {"logits": self.head(h), "hidden": h}


class FeatureMask(nn.Module):
    """An optional mask shared by every sample (one value per feature, no batch dim)."""

    def __init__(self):
        super().__init__()
        self.a = Half(6, 8)
        self.b = Half(8, 3)

    def forward(self, x, mask: Optional[torch.Tensor] = None):
        h = self.a(x)
        if mask is not None:
            h = h * mask
        return self.b(h)


class BranchAroundBlocks(nn.Module):
    """timm's VisionTransformer: every block inside a branch on two optional arguments."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(4)])
        self.head = nn.Linear(8, 3)

    def forward(self, x, mask: Optional[torch.Tensor] = None, is_causal: bool = False):
        if mask is not None or is_causal:
            for blk in self.blocks:
                x = blk(x)
                if mask is not None:
                    x = x * mask
        else:
            x = self.blocks(x)
        return self.head(x)


class NestedOut(nn.Module):
    """Nested tuples and lists with a None and a constant among them."""

    def __init__(self):
        super().__init__()
        self.a = Half(4, 5)
        self.b = Half(5, 5)
        self.c = Half(5, 2)

    def forward(self, x) -> Tuple[torch.Tensor, Tuple[torch.Tensor, Optional[torch.Tensor]], List[torch.Tensor], int]:
        h1 = self.a(x)
        h2 = self.b(h1)
        out = self.c(h2)
        aux: Optional[torch.Tensor] = None
        if self.training:
            aux = h2 * 2.0
        return out, (h1, aux), [h2, out + 1.0], 7


class DenseLayer(nn.Module):
    def __init__(self, channels: int, growth: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(channels)
        self.conv = nn.Conv2d(channels, growth, 3, padding=1)

    def forward(self, features: List[torch.Tensor]) -> torch.Tensor:
        return self.conv(torch.relu(self.norm(torch.cat(features, 1))))


class DenseBlock(nn.ModuleDict):
    """DenseNet's concatenation: every layer reads and appends to one list."""

    def __init__(self, layers: int, channels: int, growth: int):
        super().__init__()
        for i in range(layers):
            self.add_module("layer%d" % (i + 1), DenseLayer(channels + i * growth, growth))

    def forward(self, x):
        features = [x]
        for name, layer in self.items():
            features.append(layer(features))
        return torch.cat(features, 1)


def dense_concat() -> nn.Module:
    """A small dense block with batch norm: cut inside the block at --unit-depth 3, its
    layers once got each other's batch-norm buffers (the list crossed a stage boundary)."""
    features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), DenseBlock(4, 4, 2))
    return nn.Sequential(features, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(12, 5))


def export_zoo_subset(directory: str) -> None:
    """Small torchvision models of different families, for the ctest zoo subset."""
    import torchvision
    from torchvision.models import segmentation

    models = {
        "tv_mobilenet_v3_small": torchvision.models.mobilenet_v3_small(weights=None, num_classes=10),
        "tv_squeezenet1_1": torchvision.models.squeezenet1_1(weights=None, num_classes=10),
        "tv_densenet_small": torchvision.models.DenseNet(growth_rate=8, block_config=(2, 3, 2),
                                                         num_init_features=16, bn_size=2, num_classes=10),
        "tv_vit_tiny": torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=4,
                                                            num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=10),
        "tv_googlenet": torchvision.models.googlenet(weights=None, aux_logits=True, init_weights=False,
                                                     num_classes=10),
        "tv_lraspp": segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=3),
        "transformer_encoder": nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 4),
    }
    for name, model in models.items():
        torch.manual_seed(0)
        torch.jit.script(model.eval()).save(os.path.join(directory, name + ".pt"))


def export_torch2_models(directory: str) -> None:
    """Models people train today, from Hugging Face transformers and timm (small
    configs, random weights). Only where this Python has both (torch 2.x from
    scripts/setup_torch2.sh); the C++ tests skip, saying so, when they are absent."""
    try:
        import timm  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        print("no transformers/timm in this Python: skipping the hf_* and timm_* test models")
        return
    from export_timm import export as export_timm
    from export_transformers import export as export_transformers

    export_transformers("gpt2", os.path.join(directory, "hf_gpt2.pt"))  # head tied to the embedding
    export_transformers("llama", os.path.join(directory, "hf_llama.pt"))  # untied head, GQA, rotary
    export_transformers("bert", os.path.join(directory, "hf_bert.pt"))
    export_timm("vit_small_patch16_224", os.path.join(directory, "timm_vit.pt"), img_size=32, patch_size=8,
                depth=4, embed_dim=64, num_heads=2)
    export_timm("convnext_atto", os.path.join(directory, "timm_convnext.pt"))
    export_timm("resnet18", os.path.join(directory, "timm_resnet.pt"))


def export_data(directory: str) -> None:
    """Data files for the training tests: 50 examples of 100 features with 10
    classes (for big_first.pt) as .npy files and as a torch.save'd .pt, a
    uint16 token stream over a vocabulary of 50 (for gpt.pt), and the digits
    with the CNN sample."""
    import numpy as np

    g = torch.Generator().manual_seed(0)
    inputs = torch.randn(50, 100, generator=g)
    targets = torch.randint(0, 10, (50,), generator=g)
    os.makedirs(os.path.join(directory, "data_cls"), exist_ok=True)
    np.save(os.path.join(directory, "data_cls", "inputs.npy"), inputs.numpy())
    np.save(os.path.join(directory, "data_cls", "targets.npy"), targets.numpy())
    torch.save({"inputs": inputs, "targets": targets}, os.path.join(directory, "data_cls.pt"))
    tokens = torch.randint(0, 50, (1000,), generator=g).numpy().astype(np.uint16)
    tokens.tofile(os.path.join(directory, "tokens.bin"))
    # A real data set: scikit-learn's digits, for the CNN sample.
    inputs, targets = load_digits_arrays(seed=0)
    os.makedirs(os.path.join(directory, "data_digits"), exist_ok=True)
    np.save(os.path.join(directory, "data_digits", "inputs.npy"), inputs)
    np.save(os.path.join(directory, "data_digits", "targets.npy"), targets)
    torch.manual_seed(0)
    torch.jit.script(cnn(10)).save(os.path.join(directory, "cnn.pt"))


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
    torch.jit.script(OptionalArgs()).save(os.path.join(args.dir, "optional_args.pt"))
    torch.jit.script(NestedOut()).save(os.path.join(args.dir, "nested_out.pt"))
    torch.jit.script(BranchAroundBlocks()).save(os.path.join(args.dir, "branch_args.pt"))
    torch.jit.script(FeatureMask()).save(os.path.join(args.dir, "feature_mask.pt"))
    torch.jit.script(dense_concat()).save(os.path.join(args.dir, "dense_concat.pt"))
    export_zoo_subset(args.dir)
    export_torch2_models(args.dir)
    export_data(args.dir)
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
