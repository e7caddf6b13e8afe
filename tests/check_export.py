#!/usr/bin/env python3
"""Checks gpipe-export's files from Python (run by tests/e2e/test_export.cpp).

    python3 tests/check_export.py MODEL.pt WEIGHTS.pt WEIGHTS.safetensors

torch.jit.load opens the exported model; the state dicts (torch.load with
weights_only, safetensors) load strictly into the nn.Module the test model
was built from (samples/export_mlp.py's MLP), which then computes what the
exported TorchScript module computes. Prints "OK" last.
"""
import json
import os
import struct
import sys
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples"))
from export_mlp import build_mlp  # noqa: E402

warnings.simplefilter("ignore", FutureWarning)  # torch.jit.load is deprecated from 2.14 on

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}


def read_safetensors(path):
    """safetensors.torch.load_file where installed (Debian's python3 has none): the format read by hand."""
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        flat = torch.frombuffer(bytearray(body[begin:end]), dtype=DTYPES[entry["dtype"]])
        tensors[name] = flat.reshape(entry["shape"])
    return tensors


def main():
    model_path, pt_path, safetensors_path = sys.argv[1:4]
    exported = torch.jit.load(model_path).eval()
    state = torch.load(pt_path, weights_only=True)
    assert isinstance(state, dict), type(state)
    from_safetensors = read_safetensors(safetensors_path)
    assert sorted(state) == sorted(from_safetensors), (sorted(state), sorted(from_safetensors))
    for name, value in exported.state_dict().items():
        assert torch.equal(state[name], value), name
        assert torch.equal(from_safetensors[name], value), name
    module = build_mlp(16, 32, 8, blocks=2, dropout=0.25).eval()  # as tests/export_test_models.py
    module.load_state_dict(state, strict=True)
    x = torch.randn(5, 16)
    diff = (module(x) - exported(x)).abs().max().item()
    assert diff <= 1e-6, diff
    print("OK torch", torch.__version__, len(state), "tensors, max|diff|", diff)


if __name__ == "__main__":
    main()
