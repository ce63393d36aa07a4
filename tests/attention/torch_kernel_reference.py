#!/usr/bin/env python3
"""Reference values for tests/attention/test_kernel_features.cpp, computed with PyTorch (the
oracle).

Writes tests/attention/data/torch_kernels.txt: the softmax attention's output and each row's
log-sum-exp with their gradients, the merge of two partial attentions with its gradients,
attention with sinks, soft-capped scores and learned biases, each written from its formula in
float64 from fixed seeds. attn does not depend on PyTorch.

Regenerate (PyTorch from scripts/oracle-venv; the output is the same byte for byte each run on one
machine, while another CPU can change the last digits: PyTorch's float64 kernels sum in an order
that depends on the SIMD width, relative 3e-12 seen between a Zen 2 and an AVX-512 Xeon, and
between the committed file and a Zen 1, AMD EPYC family 23 model 1, torch 2.15.0):
    scripts/oracle-venv
    build/oracle-venv/bin/python tests/attention/torch_kernel_reference.py

The file format is torch_reference.py's with its own first line ("attn-torch-kernels 1"):
    <name> <rank> <d0> ... <d_rank-1> <v0> <v1> ...   values row-major, %.17g
    end <number of tensor lines>
Attention cases (<case>.*): q [B, H, Tq, Dh], k [B, Hk, Tk, Dh], v [B, Hk, Tk, Dv] (query head h
reads key/value head h // (H / Hk)), r [B, H, Tq, Dv] and r_lse [B, H, Tq] (fixed random weights
of the loss = sum(o * r) + sum(lse * r_lse)), o, lse, and grad.q, grad.k, grad.v. The score is
named by the case: scaled dot q.k / sqrt(Dh), or the negative squared Euclidean distance
-|q - k|^2. Causal masks are end-aligned (query i sees keys j <= i + Tk - Tq), as attn's.
Merge cases (<case>.*): o_a, o_b [B, H, Tq, Dv], lse_a, lse_b [B, H, Tq], r, r_lse, the merged o
and lse, and grad.o_a, grad.lse_a, grad.o_b, grad.lse_b. Sink cases: an attention case (causal,
scaled dot) with sinks [H], one logit per head that joins each row's softmax with no value, and
grad.sinks. Soft-cap cases: an attention case (causal, scaled dot, ALiBi's bias when named so)
with every score s mapped to cap * tanh(s / cap) before masking (cap: 2 and 1.5, as the test
says). Learned-bias cases: an attention case (scaled dot) whose scores get a bias with parameters,
named by the case and given as `theta` with grad.theta: T5's relative-position buckets (table
[H, num_buckets], the bucket of each pair from the transformers package's T5Attention, the T5
code, with relative position key - query; the case's `buckets` tensor holds the settings
num_buckets, max_distance, bidirectional), ALiBi with learned slopes [H] (bias -m_h |i' - j|,
i' = i + Tk - Tq), or a dense bias [H, Tq, Tk] or [B, H, Tq, Tk].
"""

import math
import os

import torch
from transformers.models.t5.modeling_t5 import T5Attention

from torch_reference import DTYPE, alibi_bias, randn, write_reference  # the same file format

FORMAT = "attn-torch-kernels 1"
HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, "data", "torch_kernels.txt")


def scores(q, k, score):
    """[B, H, Tq, Tk] scores, key/value heads repeated for grouped queries."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    if score == "scaled_dot":
        return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if score == "neg_sq_euclidean":
        return -((q.unsqueeze(-2) - k.unsqueeze(-3)) ** 2).sum(-1)
    raise ValueError(score)


def causal_masked(s):
    """s [..., Tq, Tk] with the keys after each end-aligned query at -inf."""
    tq, tk = s.shape[-2], s.shape[-1]
    i = torch.arange(tq).unsqueeze(1)
    j = torch.arange(tk).unsqueeze(0)
    return s.masked_fill(j > i + (tk - tq), float("-inf"))


def draw_qkv(gen, b, h, hk, tq, tk, dh, dv, q_scale=1.0):
    """q [B, H, Tq, Dh], k [B, Hk, Tk, Dh], v [B, Hk, Tk, Dv], all requiring gradients."""
    q = randn(gen, b, h, tq, dh, scale=q_scale).requires_grad_(True)
    k = randn(gen, b, hk, tk, dh).requires_grad_(True)
    v = randn(gen, b, hk, tk, dv).requires_grad_(True)
    return q, k, v


def draw_loss_weights(gen, b, h, tq, dv):
    """r [B, H, Tq, Dv] and r_lse [B, H, Tq]: the loss is sum(o * r) + sum(lse * r_lse)."""
    return randn(gen, b, h, tq, dv), randn(gen, b, h, tq)


def attend(s, v, h, hk):
    """o = softmax(s) @ v and lse = logsumexp(s) for scores s [B, H, Tq, Tk'] (Tk' >= Tk: the
    logits past the keys, a sink's, have no value); key/value heads repeated for grouped queries."""
    weights = torch.softmax(s, dim=-1)[..., : v.shape[-2]]
    return weights @ v.repeat_interleave(h // hk, dim=1), torch.logsumexp(s, dim=-1)


def record(name, inputs, r, r_lse, o, lse, extra=()):
    """The case's tensors in the file's order: its inputs (a dict, name -> tensor), `extra`, r,
    r_lse, o, lse, then the loss's gradient with respect to each input."""
    loss = (o * r).sum() + (lse * r_lse).sum()
    grads = torch.autograd.grad(loss, list(inputs.values()))
    out = [(f"{name}.{n}", t) for n, t in inputs.items()]
    out += list(extra) + [(f"{name}.r", r), (f"{name}.r_lse", r_lse), (f"{name}.o", o),
                          (f"{name}.lse", lse)]
    out += [(f"{name}.grad.{n}", g) for n, g in zip(inputs, grads)]
    return out


def attention_case(name, seed, b, h, hk, tq, tk, dh, dv, score, causal):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = draw_qkv(gen, b, h, hk, tq, tk, dh, dv)
    r, r_lse = draw_loss_weights(gen, b, h, tq, dv)
    s = scores(q, k, score)
    if causal:
        s = causal_masked(s)
    return record(name, {"q": q, "k": k, "v": v}, r, r_lse, *attend(s, v, h, hk))


def sink_case(name, seed, b, h, hk, tq, tk, dh, dv):
    """Causal scaled-dot attention whose softmax has one more logit per head, the sink, with no
    value: o = softmax([s, sink_h])[..., :Tk] @ v, lse = logsumexp([s, sink_h])."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = draw_qkv(gen, b, h, hk, tq, tk, dh, dv)
    sinks = randn(gen, h).requires_grad_(True)
    r, r_lse = draw_loss_weights(gen, b, h, tq, dv)
    s = causal_masked(scores(q, k, "scaled_dot"))
    s = torch.cat([s, sinks.view(1, h, 1, 1).expand(b, h, tq, 1)], dim=-1)
    return record(name, {"q": q, "k": k, "v": v, "sinks": sinks}, r, r_lse, *attend(s, v, h, hk))


def softcap_case(name, seed, b, h, tq, tk, dh, dv, cap, alibi, scale):
    """Causal scaled-dot attention (plus ALiBi's bias when `alibi`, Tq = Tk) with every score
    soft-capped before masking: s -> cap * tanh(s / cap). q is drawn `scale` times wider so the
    scores reach the cap."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = draw_qkv(gen, b, h, h, tq, tk, dh, dv, q_scale=scale)
    r, r_lse = draw_loss_weights(gen, b, h, tq, dv)
    s = scores(q, k, "scaled_dot")
    if alibi:
        s = s + alibi_bias(h, tk)
    s = causal_masked(cap * torch.tanh(s / cap))
    return record(name, {"q": q, "k": k, "v": v}, r, r_lse, *attend(s, v, h, h))


def query_minus_key(tq, tk):
    """[Tq, Tk]: the distance i' - j of each end-aligned query i (i' = i + Tk - Tq) and key j."""
    return (torch.arange(tq).unsqueeze(1) + (tk - tq)) - torch.arange(tk).unsqueeze(0)


def bias_case(name, seed, b, h, hk, tq, tk, dh, dv, causal, kind, settings=None):
    """Scaled-dot attention plus a learned bias of `kind` ("t5": settings = (num_buckets,
    max_distance, bidirectional); "alibi": learned slopes; "dense_shared" [H, Tq, Tk];
    "dense_batched" [B, H, Tq, Tk])."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = draw_qkv(gen, b, h, hk, tq, tk, dh, dv)
    r, r_lse = draw_loss_weights(gen, b, h, tq, dv)
    delta = query_minus_key(tq, tk)
    extra = []
    if kind == "t5":
        num_buckets, max_distance, bidirectional = settings
        theta = randn(gen, h, num_buckets).requires_grad_(True)
        bucket = T5Attention._relative_position_bucket(
            -delta, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
        )
        bias = theta[:, bucket]  # [H, Tq, Tk]
        extra = [(f"{name}.buckets", torch.tensor(
            [num_buckets, max_distance, int(bidirectional)], dtype=DTYPE))]
    elif kind == "alibi":
        theta = (alibi_slopes(h) * (1 + 0.5 * randn(gen, h))).requires_grad_(True)
        bias = -theta.view(h, 1, 1) * delta.abs().to(DTYPE)
    elif kind == "dense_shared":
        theta = randn(gen, h, tq, tk).requires_grad_(True)
        bias = theta
    elif kind == "dense_batched":
        theta = randn(gen, b, h, tq, tk).requires_grad_(True)
        bias = theta
    else:
        raise ValueError(kind)
    s = scores(q, k, "scaled_dot") + bias
    if causal:
        s = causal_masked(s)
    return record(name, {"q": q, "k": k, "v": v, "theta": theta}, r, r_lse, *attend(s, v, h, hk),
                  extra=extra)


def alibi_slopes(h):
    """The ALiBi paper's slopes for h heads (a power of two here): 2^(-8 (i + 1) / h)."""
    assert h & (h - 1) == 0
    return torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], dtype=DTYPE)


def merge_case(name, seed, b, h, tq, dv):
    gen = torch.Generator().manual_seed(seed)
    o_a = randn(gen, b, h, tq, dv).requires_grad_(True)
    o_b = randn(gen, b, h, tq, dv).requires_grad_(True)
    lse_a = randn(gen, b, h, tq, scale=3.0).requires_grad_(True)
    lse_b = randn(gen, b, h, tq, scale=3.0).requires_grad_(True)
    r, r_lse = draw_loss_weights(gen, b, h, tq, dv)
    lse = torch.logaddexp(lse_a, lse_b)
    o = torch.exp(lse_a - lse).unsqueeze(-1) * o_a + torch.exp(lse_b - lse).unsqueeze(-1) * o_b
    return record(name, {"o_a": o_a, "lse_a": lse_a, "o_b": o_b, "lse_b": lse_b}, r, r_lse, o, lse)


def main():
    torch.set_num_threads(1)  # same summation order every run
    tensors = []
    # Grouped queries (4 query heads on 2 key/value heads), Dv != Dh, small head sizes, odd
    # lengths past one 128-wide tile of attn's fused path; causal with Tq < Tk and not.
    tensors += attention_case("lse_causal", 1, 1, 4, 2, 37, 133, 4, 3, "scaled_dot", True)
    tensors += attention_case("lse_full", 2, 1, 2, 1, 130, 70, 3, 2, "scaled_dot", False)
    # A score with beta_q != 0: its -|q|^2 is in the log-sum-exp, though it cancels in softmax.
    tensors += attention_case("lse_euclidean", 3, 1, 2, 2, 9, 11, 4, 3, "neg_sq_euclidean", True)
    tensors += merge_case("merge", 4, 2, 3, 5, 4)
    # Sinks, with grouped queries, Tq > 1 tile of keys.
    tensors += sink_case("sink", 5, 1, 4, 2, 9, 133, 4, 2)
    # Soft-capped scores (cap 2: most scores are past it), past one tile; with ALiBi's bias
    # inside the cap.
    tensors += softcap_case("softcap", 6, 1, 2, 20, 140, 4, 3, 2.0, False, 3.0)
    tensors += softcap_case("softcap_alibi", 7, 1, 2, 9, 9, 4, 3, 1.5, True, 3.0)
    # Learned biases. T5: the encoder's buckets past max_distance (|delta| up to 149 > 128, both
    # signs), no mask, over one tile; the decoder's (not bidirectional, 8 buckets, max distance
    # 20) under a causal mask with Tq < Tk and grouped queries.
    tensors += bias_case("t5_bidirectional", 8, 1, 2, 1, 150, 150, 4, 3, False, "t5",
                         (32, 128, True))
    tensors += bias_case("t5_causal", 9, 1, 4, 2, 37, 133, 4, 2, True, "t5", (8, 20, False))
    tensors += bias_case("alibi_learned", 10, 1, 4, 2, 70, 70, 4, 2, True, "alibi")
    tensors += bias_case("dense_shared", 11, 2, 1, 1, 10, 140, 4, 2, False, "dense_shared")
    tensors += bias_case("dense_batched", 12, 2, 2, 2, 9, 9, 4, 3, True, "dense_batched")

    write_reference(OUTPUT, FORMAT, "tests/attention/torch_kernel_reference.py", tensors)

if __name__ == "__main__":
    main()
