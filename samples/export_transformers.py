#!/usr/bin/env python3
"""Export a Hugging Face transformers model (randomly initialised from its config,
no download) as TorchScript for gpipe-compile. Needs torch 2.x and transformers
(scripts/setup_torch2.sh installs both into .venv-torch2).

    .venv-torch2/bin/python samples/export_transformers.py --model gpt2 --out gpt2.pt
    build-torch2/cli/gpipe-compile gpt2.pt -o gpt2.gpipe --stages 4 --chunks 2 --verify \
        --sample-input input_ids=2x16:int64:256

Models: gpt2 (GPT-2, the head tied to the token embedding), llama (a Llama
decoder: rotary embeddings, grouped-query attention, RMSNorm, SwiGLU; --tie ties
its head), bert (a BERT encoder; returns last_hidden_state and pooler_output).

The result is forward(input_ids, attention_mask: Optional[Tensor] = None) ->
Dict[str, Tensor], as the model is called in Python: an omitted mask means no
padding (all ones). Why traced: transformers' models cannot be scripted
(torch.jit.script fails on their configs: "Failed to get source for
GPT2Config.__init__"); torch.jit.trace(strict=False) records them with the mask
as an input and a dict as the output, and the mask default is a small scripted
wrapper around the trace. The trace keeps the sequence length and the mask's
values as inputs (checked here against the eager model at another length with
padding before anything is written).
"""
import argparse
import os
import sys
import warnings
from typing import Dict, Optional

import torch
from torch import nn


def build(name: str, vocab: int, hidden: int, layers: int, heads: int, context: int, tie: bool) -> nn.Module:
    try:
        import transformers
    except ImportError:
        raise SystemExit("export_transformers.py: this Python has no transformers; use .venv-torch2/bin/python "
                         "(scripts/setup_torch2.sh installs it)")
    transformers.logging.set_verbosity_error()
    if name == "gpt2":
        config = transformers.GPT2Config(vocab_size=vocab, n_positions=context, n_embd=hidden, n_layer=layers,
                                         n_head=heads, use_cache=False, bos_token_id=0, eos_token_id=0)
        return transformers.GPT2LMHeadModel(config)
    if name == "llama":
        config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                          num_hidden_layers=layers, num_attention_heads=heads,
                                          num_key_value_heads=max(1, heads // 2), max_position_embeddings=context,
                                          use_cache=False, tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0)
        return transformers.LlamaForCausalLM(config)
    if name == "bert":
        config = transformers.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                         num_attention_heads=heads, intermediate_size=2 * hidden,
                                         max_position_embeddings=context, pad_token_id=0)
        return transformers.BertModel(config)
    raise SystemExit(f"export_transformers.py: unknown model '{name}'; use gpt2, llama or bert")


class OptionalMask(nn.Module):
    """forward(input_ids, attention_mask=None) around a trace that needs both."""

    def __init__(self, traced: nn.Module):
        super().__init__()
        self.model = traced

    def forward(self, input_ids: torch.Tensor,
                attention_mask: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        return self.model(input_ids=input_ids, attention_mask=attention_mask)


def export(name: str, out: str, vocab: int = 256, hidden: int = 64, layers: int = 4, heads: int = 4,
           context: int = 64, tie: bool = False, seed: int = 0) -> str:
    torch.manual_seed(seed)
    model = build(name, vocab, hidden, layers, heads, context, tie).eval()
    ids = torch.randint(0, vocab, (2, 16))
    with warnings.catch_warnings():  # TorchScript's deprecation and tracer warnings
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(model, example_kwarg_inputs={"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                 strict=False)
        scripted = torch.jit.script(OptionalMask(traced))
    # Another length, padding in one row: the trace must not have frozen either.
    ids = torch.randint(0, vocab, (3, 24))
    mask = torch.ones_like(ids)
    mask[0, 20:] = 0
    for given in ({"attention_mask": mask}, {}):
        want, got = model(input_ids=ids, **given), scripted(ids, **given)
        for key, value in got.items():
            diff = (want[key] - value).abs().max().item()
            if diff > 1e-5:
                raise SystemExit(f"export_transformers.py: the trace of {name} differs from the model by {diff} "
                                 f"in '{key}' at another length; this transformers version cannot be traced")
    scripted.save(out)
    n_params = sum(p.numel() for p in model.parameters())
    return f"{name}: {n_params} parameters, forward(input_ids, attention_mask=None) -> {sorted(got)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, choices=["gpt2", "llama", "bert"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--tie", action="store_true", help="llama: tie the head to the token embedding")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    summary = export(args.model, args.out, args.vocab, args.hidden, args.layers, args.heads, args.context,
                     args.tie, args.seed)
    print(f"wrote {os.path.relpath(args.out)}: {summary}")


if __name__ == "__main__":
    sys.exit(main())
