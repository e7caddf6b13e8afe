#!/usr/bin/env python3
"""Script every torchvision model (randomly initialised) for the zoo sweep.

    /usr/bin/python3 bench/zoo_export.py --out out/zoo [--only resnet18,vit_b_16] [--list]

Classification (torchvision.models), segmentation (torchvision.models.segmentation,
with aux_loss=True for fcn/deeplabv3 so the output dict has "out" and "aux") and
detection (torchvision.models.detection) models are built with weights=None (and
weights_backbone=None: nothing is downloaded), put in eval mode, scripted and
saved as OUT/<name>.pt. For classification and segmentation models the smallest
square input (batch 2) on which the scripted model runs forward is found by
trying 64, 75, 96, 128, 160, 224, 299 in turn; detection models take
List[Tensor] images and are only scripted, their forward signature is recorded.

OUT/models.tsv gets one row per model (tab-separated, with a header):
    name  kind  status  sample_input  params  note
status is ok, script-failed or forward-failed; note is the first line of the
error or the forward return type. With --only, the listed models are exported
again and their rows replace those already in models.tsv (others are kept).
Progress (one line per model, with seconds) goes to stderr.
"""
import argparse
import gc
import os
import re
import sys
import time
import warnings

import torch
import torchvision
import torchvision.models as tvm

# Square input sizes tried in turn (batch 2) until the scripted model runs.
# 75 is Inception v3's documented minimum; ViT and MaxViT need exactly 224.
SIZES = [64, 75, 96, 128, 160, 224, 299]
BATCH = 2
HEADER = ["name", "kind", "status", "sample_input", "params", "note"]

# torchvision 0.14 has list_models; older versions get the 0.14 lists.
FALLBACK = {
    "classification": """alexnet convnext_base convnext_large convnext_small convnext_tiny densenet121
        densenet161 densenet169 densenet201 efficientnet_b0 efficientnet_b1 efficientnet_b2 efficientnet_b3
        efficientnet_b4 efficientnet_b5 efficientnet_b6 efficientnet_b7 efficientnet_v2_l efficientnet_v2_m
        efficientnet_v2_s googlenet inception_v3 maxvit_t mnasnet0_5 mnasnet0_75 mnasnet1_0 mnasnet1_3
        mobilenet_v2 mobilenet_v3_large mobilenet_v3_small regnet_x_16gf regnet_x_1_6gf regnet_x_32gf
        regnet_x_3_2gf regnet_x_400mf regnet_x_800mf regnet_x_8gf regnet_y_128gf regnet_y_16gf regnet_y_1_6gf
        regnet_y_32gf regnet_y_3_2gf regnet_y_400mf regnet_y_800mf regnet_y_8gf resnet101 resnet152 resnet18
        resnet34 resnet50 resnext101_32x8d resnext101_64x4d resnext50_32x4d shufflenet_v2_x0_5
        shufflenet_v2_x1_0 shufflenet_v2_x1_5 shufflenet_v2_x2_0 squeezenet1_0 squeezenet1_1 swin_b swin_s
        swin_t swin_v2_b swin_v2_s swin_v2_t vgg11 vgg11_bn vgg13 vgg13_bn vgg16 vgg16_bn vgg19 vgg19_bn
        vit_b_16 vit_b_32 vit_h_14 vit_l_16 vit_l_32 wide_resnet101_2 wide_resnet50_2""".split(),
    "segmentation": """deeplabv3_mobilenet_v3_large deeplabv3_resnet101 deeplabv3_resnet50 fcn_resnet101
        fcn_resnet50 lraspp_mobilenet_v3_large""".split(),
    "detection": """fasterrcnn_mobilenet_v3_large_320_fpn fasterrcnn_mobilenet_v3_large_fpn
        fasterrcnn_resnet50_fpn fasterrcnn_resnet50_fpn_v2 fcos_resnet50_fpn keypointrcnn_resnet50_fpn
        maskrcnn_resnet50_fpn maskrcnn_resnet50_fpn_v2 retinanet_resnet50_fpn retinanet_resnet50_fpn_v2
        ssd300_vgg16 ssdlite320_mobilenet_v3_large""".split(),
}
MODULES = {"classification": tvm, "segmentation": tvm.segmentation, "detection": tvm.detection}


def catalogue():
    """[(name, kind)] in the order they are exported: classification, segmentation, detection."""
    models = []
    for kind, module in MODULES.items():
        if hasattr(tvm, "list_models"):
            names = sorted(tvm.list_models(module=module))
        else:
            names = FALLBACK[kind]
        models += [(name, kind) for name in names]
    return models


def build(name, kind):
    module = MODULES[kind]
    builder = tvm.get_model_builder(name) if hasattr(tvm, "get_model_builder") else getattr(module, name)
    kwargs = {"weights": None}
    if kind != "classification":
        kwargs["weights_backbone"] = None
    if name.startswith(("fcn_", "deeplabv3_")):
        kwargs["aux_loss"] = True  # dict output with "out" and "aux"
    return builder(**kwargs)


def short_error(e, limit=150):
    """One line naming the error: the interpreter's own message, not TorchScript's preamble."""
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    if not lines:
        return type(e).__name__
    line = lines[0]
    if "The following operation failed in the TorchScript interpreter" in line:
        line = lines[-1]  # e.g. "RuntimeError: ..." or "builtins.AssertionError: Wrong image height!"
    elif not line.startswith(type(e).__name__):
        line = f"{type(e).__name__}: {line}"
    line = line.replace("\t", " ")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def type_name(t):
    """A scripted type without TorchScript's module prefixes (__torch__.torchvision.models.x.Y -> Y)."""
    return re.sub(r"__torch__\.(?:\w+\.)*(\w+)", r"\1", str(t))


def describe(output):
    """Keys of a dict output (segmentation: out, aux), fields of a named tuple."""
    if isinstance(output, dict):
        return " keys=" + ",".join(output.keys())
    if isinstance(output, tuple) and hasattr(output, "_fields"):
        return " fields=" + ",".join(output._fields)
    return ""


def export(name, kind, out_dir):
    """Exports one model; returns its models.tsv row (dict)."""
    row = {"name": name, "kind": kind, "status": "ok", "sample_input": "-", "params": "-", "note": ""}
    torch.manual_seed(0)
    try:
        model = build(name, kind).eval()
    except Exception as e:  # noqa: BLE001 - any failure is a row in the report
        row.update(status="script-failed", note="build: " + short_error(e))
        return row
    row["params"] = str(sum(p.numel() for p in model.parameters()))
    try:
        scripted = torch.jit.script(model)
    except Exception as e:  # noqa: BLE001
        row.update(status="script-failed", note=short_error(e))
        return row
    del model
    schema = scripted.forward.schema
    returns = type_name(schema.returns[0].type) if len(schema.returns) == 1 else "(" + ", ".join(
        type_name(r.type) for r in schema.returns) + ")"
    scripted.save(os.path.join(out_dir, name + ".pt"))
    if kind == "detection":
        # List[Tensor] images in, (losses, detections) out: no single sample shape.
        inputs = ", ".join(f"{a.name}: {type_name(a.type)}" for a in schema.arguments[1:])
        row["note"] = f"forward({inputs}) -> {returns}"
        return row
    error = ""
    with torch.no_grad():
        for size in SIZES:
            try:
                output = scripted(torch.randn(BATCH, 3, size, size))
            except Exception as e:  # noqa: BLE001 - too small: try the next size
                error = f"{size}: {short_error(e)}"
                continue
            row.update(sample_input=f"{BATCH}x3x{size}x{size}", note=returns + describe(output))
            return row
    row.update(status="forward-failed", note=error)
    return row


def read_rows(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = f.read().splitlines()
    return [dict(zip(HEADER, l.split("\t"))) for l in lines[1:] if l.strip()]


def write_rows(path, rows):
    """models.tsv, written to a temporary name and renamed into place."""
    with open(path + ".tmp", "w") as f:
        f.write("\t".join(HEADER) + "\n")
        for r in rows:
            f.write("\t".join(str(r[h]) for h in HEADER) + "\n")
    os.replace(path + ".tmp", path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="directory for <name>.pt and models.tsv")
    parser.add_argument("--only", help="comma-separated model names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the names it would export and exit")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # init_weights, deprecated-argument and scripting warnings

    models = catalogue()
    if args.only:
        wanted = [n for n in args.only.split(",") if n]
        known = dict(models)
        unknown = [n for n in wanted if n not in known]
        if unknown:
            parser.error("unknown model(s): " + ",".join(unknown) + " (see --list)")
        models = [(n, k) for n, k in models if n in wanted]
    if args.list:
        for name, kind in models:
            print(f"{name}\t{kind}")
        return
    if not args.out:
        parser.error("--out is required (or --list)")
    os.makedirs(args.out, exist_ok=True)
    tsv = os.path.join(args.out, "models.tsv")

    # With --only, rows of models not exported now are kept (in catalogue order).
    order = {n: i for i, (n, _) in enumerate(catalogue())}
    rows = {r["name"]: r for r in read_rows(tsv)} if args.only else {}
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}: exporting {len(models)} models "
          f"to {args.out}", file=sys.stderr)
    start = time.monotonic()
    slowest = ("-", 0.0)
    for i, (name, kind) in enumerate(models, 1):
        t0 = time.monotonic()
        row = export(name, kind, args.out)
        gc.collect()
        seconds = time.monotonic() - t0
        slowest = max(slowest, (name, seconds), key=lambda x: x[1])
        rows[name] = row
        write_rows(tsv, sorted(rows.values(), key=lambda r: order.get(r["name"], len(order))))
        print(f"[{i}/{len(models)}] {name:<38} {kind:<14} {row['status']:<14} {row['sample_input']:<12} "
              f"{row['params']:>10}  {seconds:6.1f}s  {row['note'][:90]}", file=sys.stderr, flush=True)
    total = time.monotonic() - start
    counts = {}
    for r in rows.values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(f"done in {total:.0f}s (slowest {slowest[0]} {slowest[1]:.1f}s); models.tsv: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f"; wrote {tsv}", file=sys.stderr)


if __name__ == "__main__":
    main()
