#!/usr/bin/env python3
"""Reference values for tests/attention/test_rotary_hf.cpp: rotary positions as the Llama code of
the transformers package applies them (the "halves" pairs of attn's score::Rotary).

Writes tests/attention/data/torch_rotary.txt. For each case, q and k [B, H, T, D] at positions
p0, p0 + 1, ... are turned by transformers' own apply_rotary_pos_emb (q * cos + rotate_half(q) *
sin, with the cos and sin tables [T, D] holding each angle twice, frequencies concatenated); the
angles (p0 + t) * base^(-2c/D) are formed in float64 here, because LlamaRotaryEmbedding forms
them in float32 (at position 1000 that is an error of 1e-4 in the angle). The script checks
that its tables equal LlamaRotaryEmbedding's to float32 precision, so the frequencies and the
layout are Llama's and only the rounding is not. Tensors per case: q, k, p0 and base (rank-1,
one element), r_q and r_k (fixed random weights of the loss sum(q' * r_q) + sum(k' * r_k)), the
turned q' and k', and grad.q, grad.k.

Regenerate (transformers from scripts/oracle-venv):
    scripts/oracle-venv
    build/oracle-venv/bin/python tests/attention/rotary_reference.py
The file format is torch_reference.py's with its own first line ("attn-torch-rotary 1").
"""

import os

import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from torch_reference import DTYPE, randn, write_reference  # the same file format

FORMAT = "attn-torch-rotary 1"
HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, "data", "torch_rotary.txt")


def tables(p0, t, d, base):
    """cos, sin [T, D] in float64, laid out as LlamaRotaryEmbedding lays them out; checked
    against it (float32) before they are used."""
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=DTYPE) / d)  # θ_c = base^(-2c/D)
    positions = torch.arange(p0, p0 + t, dtype=DTYPE)
    angles = torch.outer(positions, inv_freq)
    emb = torch.cat([angles, angles], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    config = LlamaConfig(hidden_size=d, num_attention_heads=1, rope_theta=base,
                         max_position_embeddings=p0 + t)
    rope = LlamaRotaryEmbedding(config)
    x = torch.zeros(1, t, d, dtype=torch.float32)
    hf_cos, hf_sin = rope(x, torch.arange(p0, p0 + t).unsqueeze(0))
    # float32 angles: an absolute error of about |angle| * 2^-24, then cos and sin rounded.
    tol = 4 * (p0 + t) * 2.0 ** -24 + 1e-6
    assert (hf_cos[0].double() - cos).abs().max() <= tol, "cos tables differ from Llama's"
    assert (hf_sin[0].double() - sin).abs().max() <= tol, "sin tables differ from Llama's"
    return cos, sin


def rotary_case(name, seed, b, h, t, d, p0, base):
    gen = torch.Generator().manual_seed(seed)
    q = randn(gen, b, h, t, d).requires_grad_(True)
    k = randn(gen, b, h, t, d).requires_grad_(True)
    r_q = randn(gen, b, h, t, d)
    r_k = randn(gen, b, h, t, d)
    cos, sin = tables(p0, t, d, base)
    # apply_rotary_pos_emb takes cos, sin [B, T, D] and unsqueezes them over the heads.
    q_out, k_out = apply_rotary_pos_emb(q, k, cos.unsqueeze(0), sin.unsqueeze(0))
    loss = (q_out * r_q).sum() + (k_out * r_k).sum()
    grads = torch.autograd.grad(loss, [q, k])
    scalar = lambda v: torch.tensor([v], dtype=DTYPE)  # noqa: E731
    out = [(f"{name}.q", q), (f"{name}.k", k), (f"{name}.p0", scalar(p0)),
           (f"{name}.base", scalar(base)), (f"{name}.r_q", r_q), (f"{name}.r_k", r_k),
           (f"{name}.q_out", q_out), (f"{name}.k_out", k_out)]
    out += [(f"{name}.grad.q", grads[0]), (f"{name}.grad.k", grads[1])]
    return out


def main():
    torch.set_num_threads(1)  # same summation order every run
    tensors = []
    # Llama 2's base, a head width of 8, positions from 0; Llama 3's base (rope_theta 500000), a
    # head width of 12 (6 pairs, odd), positions from 1000 (a decoding step's, far along).
    tensors += rotary_case("llama2", 1, 2, 3, 5, 8, 0, 10000.0)
    tensors += rotary_case("llama3", 2, 1, 2, 4, 12, 1000, 500000.0)
    write_reference(OUTPUT, FORMAT, "tests/attention/rotary_reference.py", tensors)


if __name__ == "__main__":
    main()
