#!/usr/bin/env python3
"""Export a timm model (randomly initialised, no download) as TorchScript for
gpipe-compile. Needs torch 2.x and timm (scripts/setup_torch2.sh installs both
into .venv-torch2).

    .venv-torch2/bin/python samples/export_timm.py --model convnext_atto --out convnext.pt
    build-torch2/cli/gpipe-compile convnext.pt -o convnext.gpipe --stages 4 --chunks 2 --verify \
        --sample-input 2x3x64x64

Any timm model name (timm.list_models()); keyword arguments of the model's
constructor as --kw name=value (e.g. --kw img_size=64 --kw depth=4 for a small
ViT). Scripted with torch.jit.script, as timm's models are written to be.
"""
import argparse
import ast
import os
import warnings

import torch


def export(name: str, out: str, num_classes: int = 10, seed: int = 0, **kwargs) -> str:
    try:
        import timm
    except ImportError:
        raise SystemExit("export_timm.py: this Python has no timm; use .venv-torch2/bin/python "
                         "(scripts/setup_torch2.sh installs it)")
    if name not in timm.list_models():
        raise SystemExit(f"export_timm.py: timm has no model '{name}'; see timm.list_models()")
    torch.manual_seed(seed)
    model = timm.create_model(name, pretrained=False, num_classes=num_classes, **kwargs).eval()
    with warnings.catch_warnings():  # TorchScript's deprecation warning
        warnings.simplefilter("ignore")
        torch.jit.script(model).save(out)
    n_params = sum(p.numel() for p in model.parameters())
    return f"{name}: {n_params} parameters, input [B, 3, H, W]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="timm model name, e.g. vit_small_patch16_224")
    parser.add_argument("--out", required=True)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--kw", action="append", default=[], metavar="NAME=VALUE",
                        help="a constructor argument, e.g. img_size=64 (a Python literal or a string)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    kwargs = {}
    for item in args.kw:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"export_timm.py: --kw '{item}' should be NAME=VALUE, e.g. img_size=64")
        try:
            kwargs[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            kwargs[key] = text
    summary = export(args.model, args.out, args.num_classes, args.seed, **kwargs)
    print(f"wrote {os.path.relpath(args.out)}: {summary}")


if __name__ == "__main__":
    main()
