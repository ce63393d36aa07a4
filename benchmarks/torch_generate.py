#!/usr/bin/python3
"""The PyTorch side of benchmarks/generate.cpp: tokens per second of sampling from the GPT of
torch_train_step.py (random initialisation) with a key/value cache written the way a nanoGPT user
adds one (each layer keeps its keys and values and torch.cat's the new token's onto them), the
same rule as attn::nn::generate when the context would pass the block size (restart from the
most recent half block), temperature 0.8, float32 on the CPU.

    /usr/bin/python3 benchmarks/torch_generate.py --config B --threads 2 --prompt 16 \
        --tokens 256

Prints tokens/s of the median of --reps timed calls (default 5) after one untimed warm-up call.
Needs python3-torch (Debian); attn does not depend on it.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_train_step  # noqa: E402
from torch_train_step import CONFIGS, GPT, HAS_SDPA  # noqa: E402


def attend(attn, x, cache):
    """attn (torch_train_step.Attention) on the new rows x [1, T, D], its keys and values appended
    to cache (a dict, empty at first)."""
    B, T, D = x.shape
    split = lambda t: t.view(B, T, attn.h, D // attn.h).transpose(1, 2)
    q, k, v = split(attn.q_proj(x)), split(attn.k_proj(x)), split(attn.v_proj(x))
    if cache:
        k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
    cache["k"], cache["v"] = k, v
    L = k.shape[2]
    if torch_train_step.ATTENTION == "sdpa":
        # The new rows see every cached key and the new keys up to their own: a bottom-right
        # causal mask, given explicitly (is_causal would align it top-left).
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn.mask[L - T:L, :L])
    else:
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D // attn.h)
        s = s.masked_fill(~attn.mask[L - T:L, :L], float("-inf"))
        y = F.softmax(s, dim=-1) @ v
    return attn.out_proj(y.transpose(1, 2).reshape(B, T, D))


def decode(model, idx, caches):
    """Logits of the last new token; idx [1, T] continues what the caches hold."""
    start = caches[0]["k"].shape[2] if caches[0] else 0
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(start, start + idx.shape[1]))
    for block, cache in zip(model.blocks, caches):
        x = x + attend(block.attn, block.ln1(x), cache)
        x = x + block.mlp(block.ln2(x))
    return model.head(model.ln_f(x[:, -1, :]))


@torch.no_grad()
def generate(model, prompt, tokens, block, temperature, seed):
    gen = torch.Generator().manual_seed(seed)
    seq = list(prompt)
    caches = [dict() for _ in model.blocks]
    fed = 0
    for _ in range(tokens):
        held = caches[0]["k"].shape[2] if caches[0] else 0
        if held + len(seq) - fed > block:  # restart from the recent half block
            caches = [dict() for _ in model.blocks]
            fed = max(len(seq) - max(block // 2, 1), 0)
        logits = decode(model, torch.tensor([seq[fed:]]), caches)
        fed = len(seq)
        probs = F.softmax(logits[0] / temperature, dim=-1)
        seq.append(int(torch.multinomial(probs, 1, generator=gen)))
    return seq[len(prompt):]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", choices=CONFIGS, default="B")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=16, help="prompt length in tokens")
    ap.add_argument("--tokens", type=int, default=256, help="new tokens")
    ap.add_argument("--reps", type=int, default=5, help="timed calls (the median is printed)")
    ap.add_argument("--attention", choices=("manual", "sdpa"), default=None,
                    help="manual (masked_fill + softmax) or sdpa (F.scaled_dot_product_attention, "
                         "torch >= 2.0); default sdpa where torch has it")
    ap.add_argument("--json", action="store_true", help="one JSON object (for vs_torch.py)")
    args = ap.parse_args()
    torch_train_step.ATTENTION = args.attention or ("sdpa" if HAS_SDPA else "manual")
    if torch_train_step.ATTENTION == "sdpa" and not HAS_SDPA:
        ap.error(f"--attention sdpa needs torch >= 2.0; this is {torch.__version__}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    c = CONFIGS[args.config]
    model = GPT(c["vocab"], c["layers"], c["heads"], c["embd"], c["block"], 0.0).eval()
    prompt = [(i + 1) % c["vocab"] for i in range(args.prompt)]
    generate(model, prompt, args.tokens, c["block"], 0.8, 7)  # warm-up
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        out = generate(model, prompt, args.tokens, c["block"], 0.8, 7)
        times.append(time.perf_counter() - t0)
    secs = statistics.median(times)
    if args.json:
        print(json.dumps({"torch": torch.__version__, "config": args.config,
                          "attention": torch_train_step.ATTENTION, "threads": args.threads, "prompt": args.prompt, "tokens": len(out),
                          "tokens_per_s": len(out) / secs}))
    else:
        print(f"torch {torch.__version__} config {args.config}, {args.threads} threads, prompt "
              f"{args.prompt}, {len(out)} new tokens with the cache: "
              f"{len(out) / secs:.0f} tokens/s ({secs:.3f} s)")


if __name__ == "__main__":
    main()
