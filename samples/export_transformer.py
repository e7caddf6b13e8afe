#!/usr/bin/env python3
"""Export a small GPT-style decoder (LM head tied to the token embedding).

    /usr/bin/python3 samples/export_transformer.py --out gpt.pt
    gpipe-compile gpt.pt -o gpt.gpipe --stages 4 --verify --sample-input 8x64:int64:1000

The head reuses the embedding matrix, so after splitting, the first and the
last stage use one parameter: gpipe-cpp keeps it on the first stage, routes it
to the last and sums both gradients into it.
"""
import argparse
import math

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, context: int, dropout: float):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, ids):
        positions = torch.arange(ids.size(1), device=ids.device)
        x = self.tok(ids) + self.pos(positions)
        x = self.ln_f(self.blocks(x))
        return nn.functional.linear(x, self.tok.weight)  # tied LM head


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = GPT(args.vocab, args.dim, args.heads, args.layers, args.context, args.dropout)
    torch.jit.script(model).save(args.out)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out}: GPT, {args.layers} blocks, {n_params} parameters, input [B, T<={args.context}] int64 ids < {args.vocab}")


if __name__ == "__main__":
    main()
