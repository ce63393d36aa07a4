#!/usr/bin/python3
"""The PyTorch side of benchmarks/attention.cpp: softmax(Q Kᵀ/√d) V written out, forward and
forward+backward, nn.MultiheadAttention (projections included) and, on torch >= 2.0,
F.scaled_dot_product_attention (its fused flash-attention kernel on the CPU), float32, B = 1,
8 heads, d_h = 64, on the CPU.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 benchmarks/torch_attention.py \
        --threads 2 --lengths 256,1024,2048,4096

(This machine presets OPENBLAS_CORETYPE for older OpenBLAS builds; it slows PyTorch's GEMM, so
the command unsets it for this process only.) Prints median milliseconds of --reps runs after a
warm-up. Needs python3-torch (Debian); attn does not depend on it.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0


def median_ms(reps, fn):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lengths", default="256,1024,2048,4096")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", action="store_true",
                    help="one JSON object per line instead of the table (for vs_torch.py)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    B, H, Dh = 1, 8, 64
    n = 2048
    a, b = torch.randn(n, n), torch.randn(n, n)
    sgemm = 2.0 * n**3 / (median_ms(args.reps, lambda: a @ b) * 1e6)
    if args.json:
        print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                          "sgemm_gflops": sgemm}))
    else:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, B = {B}, "
              f"H = {H}, Dh = {Dh}; SGEMM (n = {n}): {sgemm:.1f} GFLOP/s")
        print("     T mask    | manual fwd ms | manual f+b ms | nn.MHA fwd ms | nn.MHA f+b ms"
              + (" | SDPA fwd ms | SDPA f+b ms" if HAS_SDPA else ""))
    for T in [int(t) for t in args.lengths.split(",")]:
        for causal in (False, True):
            q = torch.randn(B, H, T, Dh, requires_grad=True)
            k = torch.randn(B, H, T, Dh, requires_grad=True)
            v = torch.randn(B, H, T, Dh, requires_grad=True)
            bias = torch.triu(torch.full((T, T), float("-inf")), diagonal=1) if causal else None

            def manual():
                s = q @ k.transpose(-1, -2) / math.sqrt(Dh)
                if bias is not None:
                    s = s + bias
                return torch.softmax(s, dim=-1) @ v

            def manual_fwd():
                with torch.no_grad():
                    manual()

            def manual_fb():
                manual().sum().backward()

            mha = torch.nn.MultiheadAttention(H * Dh, H, batch_first=True)
            x = torch.randn(B, T, H * Dh, requires_grad=True)
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1) if causal else None

            def mha_fwd():
                with torch.no_grad():
                    mha(x, x, x, attn_mask=mask, need_weights=False)

            def mha_fb():
                mha(x, x, x, attn_mask=mask, need_weights=False)[0].sum().backward()

            ways = [manual_fwd, manual_fb, mha_fwd, mha_fb]
            keys = ["manual_fwd_ms", "manual_fb_ms", "mha_fwd_ms", "mha_fb_ms"]
            if HAS_SDPA:
                # torch >= 2.0: the fused kernel (flash attention on the CPU), as nanoGPT calls it.
                def sdpa_fwd():
                    with torch.no_grad():
                        F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                def sdpa_fb():
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal).sum().backward()

                ways += [sdpa_fwd, sdpa_fb]
                keys += ["sdpa_fwd_ms", "sdpa_fb_ms"]
            row = [median_ms(args.reps, f) for f in ways]
            mask_name = "causal" if causal else "none"
            if args.json:
                print(json.dumps({"T": T, "mask": mask_name, **dict(zip(keys, row))}), flush=True)
            else:
                print(f"{T:6d} {mask_name:7s} | " + " | ".join(f"{t:13.1f}" for t in row),
                      flush=True)


if __name__ == "__main__":
    main()
