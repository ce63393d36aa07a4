#!/usr/bin/python3
"""The PyTorch side of benchmarks/train_step.cpp: the same GPT (pre-LN blocks, learned positions,
separate q/k/v/out projections with biases, exact-GELU MLP of width 4D, final LayerNorm, bias-free
head), the same configurations, full training steps (forward, backward, clip_grad_norm_, AdamW
with decay on matrices only), float32 on the CPU. Attention is nanoGPT's: on torch >= 2.0
F.scaled_dot_product_attention (its fused CPU kernel), on older torch written out (masked_fill +
softmax); --attention chooses, and --compile runs the model through torch.compile; --autocast bf16
runs the forward under torch.autocast on the CPU in bfloat16 (PyTorch's mixed precision: matrix
products in bf16, the weights, the optimizer and reductions in float). --dropout P drops
where attn's GPT does (and nanoGPT): the embeddings, the attention weights, and each residual
branch before it is added.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 benchmarks/torch_train_step.py \
        --config A --threads 2 --steps 10

(OPENBLAS_CORETYPE is preset on this machine for older OpenBLAS builds and slows PyTorch's GEMM;
the command unsets it for this process only.) One configuration per process, so the peak RSS it
prints belongs to that configuration. Needs python3-torch (Debian); attn does not depend on it.
"""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The shapes of benchmarks/gpt_configs.hpp: A and B are the compared ones; demo (char_gpt's
# demo model) is small enough for the smoke test of these scripts (tests/scripts).
CONFIGS = {"A": dict(vocab=256, layers=4, heads=8, embd=256, block=128, batch=32),
           "B": dict(vocab=65, layers=6, heads=6, embd=384, block=256, batch=16),
           "demo": dict(vocab=65, layers=4, heads=4, embd=128, block=64, batch=32)}


# How attention is computed: "manual" (masked_fill + softmax, nanoGPT on torch < 2.0) or "sdpa"
# (F.scaled_dot_product_attention with is_causal, nanoGPT's path on torch >= 2.0, which picks a
# fused flash-attention kernel on the CPU). main() sets it from --attention.
ATTENTION = "manual"
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class Attention(nn.Module):
    def __init__(self, d, h, block, dropout):
        super().__init__()
        self.h = h
        self.p = dropout
        self.drop = nn.Dropout(dropout)
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))
        self.register_buffer("mask", torch.tril(torch.ones(block, block, dtype=torch.bool)))

    def forward(self, x):
        B, T, D = x.shape
        split = lambda t: t.view(B, T, self.h, D // self.h).transpose(1, 2)  # [B, H, T, Dh]
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        if ATTENTION == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=self.p if self.training else 0.0)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(D // self.h)
            s = s.masked_fill(~self.mask[:T, :T], float("-inf"))
            y = self.drop(F.softmax(s, dim=-1)) @ v
        return self.out_proj(y.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, d, h, block, dropout):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, h, block, dropout)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop1(self.attn(self.ln1(x)))
        return x + self.drop2(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    def __init__(self, vocab, layers, heads, embd, block, dropout):
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(vocab, embd), nn.Embedding(block, embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(embd, heads, block, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(embd)
        self.head = nn.Linear(embd, vocab, bias=False)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.drop(self.tok_emb(idx) + self.pos_emb(torch.arange(T)))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", choices=CONFIGS, default="A")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="dropout while training (default 0, as the configurations)")
    ap.add_argument("--attention", choices=("manual", "sdpa"), default=None,
                    help="manual (masked_fill + softmax) or sdpa (F.scaled_dot_product_attention, "
                         "torch >= 2.0); default sdpa where torch has it")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model (torch >= 2.0; compiled before the timing)")
    ap.add_argument("--autocast", choices=("none", "bf16"), default="none",
                    help="bf16: the forward (and so its backward) under torch.autocast('cpu', "
                         "dtype=torch.bfloat16); torch >= 1.10")
    ap.add_argument("--json", action="store_true",
                    help="one JSON object instead of the text lines (for vs_torch.py)")
    args = ap.parse_args()
    if not 0.0 <= args.dropout < 1.0:
        ap.error(f"--dropout must be in [0, 1), got {args.dropout}")
    global ATTENTION
    ATTENTION = args.attention or ("sdpa" if HAS_SDPA else "manual")
    if ATTENTION == "sdpa" and not HAS_SDPA:
        ap.error(f"--attention sdpa needs torch >= 2.0; this is {torch.__version__}")
    if args.compile and not hasattr(torch, "compile"):
        ap.error(f"--compile needs torch >= 2.0; this is {torch.__version__}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    c = CONFIGS[args.config]
    model = GPT(c["vocab"], c["layers"], c["heads"], c["embd"], c["block"], args.dropout)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-4)
    x = torch.randint(c["vocab"], (c["batch"], c["block"]))
    y = torch.randint(c["vocab"], (c["batch"], c["block"]))
    forward = torch.compile(model) if args.compile else model

    def step():
        if args.autocast == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = forward(x, y)
        else:
            loss = forward(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    step()
    step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    secs = time.perf_counter() - t0
    tokens = c["batch"] * c["block"] * args.steps
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    if args.json:
        print(json.dumps({"torch": torch.__version__, "config": args.config,
                          "attention": ATTENTION, "compile": args.compile,
                          "autocast": args.autocast,
                          "dropout": args.dropout, "threads": args.threads, "steps": args.steps,
                          "tokens_per_s": tokens / secs,
                          "ms_per_step": 1e3 * secs / args.steps,
                          "loss": loss, "peak_rss_gib": peak}))
        return
    print(f"torch {torch.__version__} config {args.config} {c}, attention {ATTENTION}"
          f"{' compiled' if args.compile else ''}"
          f"{', autocast bf16' if args.autocast == 'bf16' else ''}, dropout {args.dropout:g}, "
          f"{args.threads} threads, "
          f"{args.steps} steps\n  tokens/s {tokens / secs:.0f} | {1e3 * secs / args.steps:.1f} ms/step"
          f" | loss {loss:.4f} | peak RSS {peak:.2f} GiB")


if __name__ == "__main__":
    main()
