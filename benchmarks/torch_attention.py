#!/usr/bin/python3
"""The PyTorch side of benchmarks/attention.cpp: softmax(Q Kᵀ/√d) V written out, forward and
forward+backward, nn.MultiheadAttention (which also runs the four projections) and, on torch >=
2.0, F.scaled_dot_product_attention (its fused flash-attention kernel on the CPU), float32, B = 1,
8 heads, d_h = 64, on the CPU. Where torch has FlexAttention (2.5 and later) it adds
flex_attention compiled with torch.compile, forward only (its CPU backend has no backward); its
compilation is part of the warm-up and not timed.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 benchmarks/torch_attention.py \
        --threads 2 --lengths 256,1024,2048,4096
    build/oracle-venv/bin/python benchmarks/torch_attention.py --score alibi --kv-heads 2

--score picks bench_attention's score: scaled_dot (default); alibi, the scaled dot product plus
−m_h |i − j| (the ALiBi paper's slopes m_h = 2^(−8(h+1)/8)): written out as a bias, SDPA with it as
a float mask, FlexAttention as a score_mod; rotary (adjacent pairs, base 10000): q and k rotated
inside every timed call. nn.MultiheadAttention runs the plain score only. --kv-heads N gives k and
v N of the 8 heads (grouped-query attention): written out with k and v repeated per group, SDPA
with enable_gqa (torch >= 2.5; repeated before it on older ones), nn.MultiheadAttention not run.

(This machine presets OPENBLAS_CORETYPE for older OpenBLAS builds; it slows PyTorch's GEMM, so
the command unsets it for this process only.) Prints median milliseconds of --reps runs after a
warm-up. Needs python3-torch (Debian) or the oracle venv; attn does not depend on them.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0
try:  # torch >= 2.5
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:
    flex_attention = None
# SDPA's enable_gqa argument came with torch 2.5.
SDPA_GQA = HAS_SDPA and tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)
SCORES = ("scaled_dot", "alibi", "rotary")


def median_ms(reps, fn):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def alibi_slopes(heads):
    """score::Alibi::slope of attn for a power-of-two head count: 2^(−8(h+1)/H)."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)])


def rotary_tables(T, Dh, base=10000.0):
    """cos and sin [T, Dh/2] of the angles p θ_c, θ_c = base^(−2c/Dh)."""
    theta = base ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * theta[None, :]
    return torch.cos(angles).float(), torch.sin(angles).float()


def rotate(x, cos, sin):
    """x [..., T, Dh] with each adjacent pair (x_2c, x_2c+1) turned by its angle (RoFormer's)."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lengths", default="256,1024,2048,4096")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--score", choices=SCORES, default="scaled_dot")
    ap.add_argument("--kv-heads", type=int, default=8, help="key/value heads (divides 8)")
    ap.add_argument("--json", action="store_true",
                    help="one JSON object per line instead of the table (for vs_torch.py)")
    args = ap.parse_args()
    B, H, Dh = 1, 8, 64
    Hk = args.kv_heads
    if Hk < 1 or H % Hk:
        ap.error(f"--kv-heads {Hk} must divide the {H} heads")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    n = 2048
    a, b = torch.randn(n, n), torch.randn(n, n)
    sgemm = 2.0 * n**3 / (median_ms(args.reps, lambda: a @ b) * 1e6)
    names = ["manual"]
    if args.score == "scaled_dot" and Hk == H:
        names.append("mha")
    if HAS_SDPA:
        names.append("sdpa")
    names_fb = list(names)
    if flex_attention is not None:
        names.append("flex")
        flex = torch.compile(flex_attention, dynamic=False)
    keys = [f"{w}_{f}_ms" for w in names for f in ("fwd", "fb") if f == "fwd" or w in names_fb]
    if args.json:
        print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                          "sgemm_gflops": sgemm, "score": args.score, "kv_heads": Hk,
                          "sdpa_gqa": SDPA_GQA}))
    else:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, B = {B}, "
              f"H = {H}, Dh = {Dh}, score {args.score}, {Hk} key/value heads; SGEMM (n = {n}): "
              f"{sgemm:.1f} GFLOP/s")
        print("     T mask    | " + " | ".join(f"{k[:-3]:>13s}" for k in keys))
    slopes = alibi_slopes(H)
    for T in [int(t) for t in args.lengths.split(",")]:
        for causal in (False, True):
            q = torch.randn(B, H, T, Dh, requires_grad=True)
            k = torch.randn(B, Hk, T, Dh, requires_grad=True)
            v = torch.randn(B, Hk, T, Dh, requires_grad=True)
            pos = torch.arange(T)
            # The additive bias [H, T, T] of the written-out formula and SDPA's float mask.
            bias = None
            if args.score == "alibi":
                bias = -slopes[:, None, None] * (pos[None, :, None] - pos[None, None, :]).abs()
            if causal:
                upper = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
                bias = upper if bias is None else bias + upper
            cos, sin = rotary_tables(T, Dh)

            def qk():
                """q and k as the score sees them (rotated for rotary; timed with the rest)."""
                if args.score == "rotary":
                    return rotate(q, cos, sin), rotate(k, cos, sin)
                return q, k

            def manual():
                qq, kk = qk()
                kk, vv = kk.repeat_interleave(H // Hk, dim=1), v.repeat_interleave(H // Hk, dim=1)
                s = qq @ kk.transpose(-1, -2) / math.sqrt(Dh)
                if bias is not None:
                    s = s + bias
                return torch.softmax(s, dim=-1) @ vv

            mha = torch.nn.MultiheadAttention(H * Dh, H, batch_first=True)
            x = torch.randn(B, T, H * Dh, requires_grad=True)
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1) if causal else None

            def mha_call():
                return mha(x, x, x, attn_mask=mask, need_weights=False)[0]

            def sdpa():
                # torch >= 2.0: the fused kernel (flash attention on the CPU), as nanoGPT calls it.
                qq, kk = qk()
                vv = v
                extra = {}
                if Hk < H and SDPA_GQA:
                    extra["enable_gqa"] = True
                elif Hk < H:
                    kk, vv = kk.repeat_interleave(H // Hk, 1), v.repeat_interleave(H // Hk, 1)
                if args.score == "alibi":
                    return F.scaled_dot_product_attention(qq, kk, vv, attn_mask=bias[None], **extra)
                return F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, **extra)

            flex_call = None
            if flex_attention is not None:
                def causal_mask(b, h, q_idx, kv_idx):
                    return q_idx >= kv_idx

                def alibi_mod(score, b, h, q_idx, kv_idx):
                    return score - slopes[h] * (q_idx - kv_idx).abs()

                block_mask = (create_block_mask(causal_mask, None, None, T, T, device="cpu")
                              if causal else None)

                def flex_call():
                    # Forward only: its CPU backend refuses inputs that require gradients.
                    qq, kk = (t.detach() for t in qk())
                    return flex(qq, kk, v.detach(), block_mask=block_mask, enable_gqa=Hk < H,
                                score_mod=alibi_mod if args.score == "alibi" else None)

            calls = {"manual": manual, "mha": mha_call, "sdpa": sdpa, "flex": flex_call}
            with torch.no_grad():  # every way computes the written-out formula's output
                reference = manual()
                for w in ("sdpa", "flex"):
                    if w in names:
                        err = (calls[w]() - reference).abs().max().item()
                        if not err < 1e-4:
                            sys.exit(f"torch_attention: {w} differs from the written-out formula "
                                     f"by {err:g} (T {T}, causal {causal}, {args.score})")

            def forward(f):
                def run():
                    with torch.no_grad():
                        f()
                return run

            def forward_backward(f):
                return lambda: f().sum().backward()

            ways = [(forward if key.endswith("_fwd_ms") else forward_backward)(
                calls[key.split("_")[0]]) for key in keys]
            row = [median_ms(args.reps, f) for f in ways]
            mask_name = "causal" if causal else "none"
            if args.json:
                print(json.dumps({"T": T, "mask": mask_name, **dict(zip(keys, row))}), flush=True)
            else:
                print(f"{T:6d} {mask_name:7s} | " + " | ".join(f"{t:13.1f}" for t in row),
                      flush=True)


if __name__ == "__main__":
    main()
