#!/usr/bin/env python3
"""Reference values for the rotary scalings of tests/attention/test_rotary_hf.cpp: rotary
positions with stretched frequencies (linear, NTK-aware, YaRN, Llama 3's bands), stated here in
float64 from their sources and checked against the transformers package's own frequencies.

Writes tests/attention/data/torch_rotary_scaling.txt. Per case, the frequencies theta_c and the
attention factor m are written out from the formulas of attn's RotaryScaling (its comment cites
each source) in float64; the script asserts that they equal what transformers computes for the
same rope_scaling (ROPE_INIT_FUNCTIONS, in float32: to 1e-6 relative) - for the NTK-aware scaling,
transformers' "dynamic" one, whose base is base (s T / T_max - (s - 1))^(D/(D-2)) at a sequence of
T positions: at T = T_max (2s - 1) / s it is the static base s^(D/(D-2)). Then q and k [B, H, T, D] at positions p0, p0 + 1, ... are turned by transformers'
apply_rotary_pos_emb with the tables m cos and m sin (the "halves" layout). Tensors per case: q,
k, p0 and base (one element each), the scaling's parameters ("<case>.scaling": kind code, factor,
original context, beta_fast, beta_slow, attention_factor, low_freq_factor, high_freq_factor;
kind codes 1 linear, 2 ntk, 3 yarn, 4 llama3), theta [D/2], m, r_q and r_k (weights of the loss
sum(q' r_q) + sum(k' r_k)), q_out, k_out, grad.q, grad.k.

Regenerate (transformers from scripts/oracle-venv; never run by the build or CI):
    scripts/oracle-venv
    build/oracle-venv/bin/python tests/attention/rotary_scaling_reference.py
"""

import math
import os

import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from torch_reference import DTYPE, randn, write_reference  # the same file format

FORMAT = "attn-torch-rotary-scaling 1"
HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, "data", "torch_rotary_scaling.txt")
KINDS = {"linear": 1, "ntk": 2, "yarn": 3, "llama3": 4}


def frequencies(kind, d, base, p):
    """theta [D/2] and the attention factor m, float64, from the formulas of the sources."""
    c = torch.arange(0, d // 2, dtype=DTYPE)
    s = p["factor"]
    if kind == "ntk":  # base' = base * s^(D / (D - 2))
        base = base * s ** (d / (d - 2))
    theta = base ** (-2.0 * c / d)
    m = 1.0
    if kind == "linear":  # positional interpolation: every angle / s
        theta = theta / s
    elif kind == "yarn":  # NTK-by-parts: a ramp over the pair index, between beta_fast and beta_slow
        L = p["original"]

        def pair_turning(rotations):  # theta_c L = 2 pi rotations, solved for c
            return d * math.log(L / (rotations * 2 * math.pi)) / (2 * math.log(base))

        lo = max(math.floor(pair_turning(p["beta_fast"])), 0)
        hi = min(math.ceil(pair_turning(p["beta_slow"])), d - 1)
        if hi == lo:
            hi += 0.001
        ramp = ((c - lo) / (hi - lo)).clamp(0, 1)
        theta = ramp * theta / s + (1 - ramp) * theta
        m = p["attention_factor"] or 0.1 * math.log(s) + 1.0
    elif kind == "llama3":  # wavelength bands
        L = p["original"]
        wavelength = 2 * math.pi / theta
        smooth = (L / wavelength - p["low"]) / (p["high"] - p["low"])
        middle = (1 - smooth) * theta / s + smooth * theta
        theta = torch.where(wavelength > L / p["low"], theta / s,
                            torch.where(wavelength < L / p["high"], theta, middle))
    return theta, m


def transformers_frequencies(kind, d, base, p):
    """What transformers computes for the same rope_scaling (float32)."""
    scaling = {"rope_type": "dynamic" if kind == "ntk" else kind, "factor": p["factor"]}
    if kind == "yarn":
        scaling.update(beta_fast=p["beta_fast"], beta_slow=p["beta_slow"],
                       original_max_position_embeddings=p["original"])
        if p["attention_factor"]:
            scaling["attention_factor"] = p["attention_factor"]
    if kind == "llama3":
        scaling.update(low_freq_factor=p["low"], high_freq_factor=p["high"],
                       original_max_position_embeddings=p["original"])
    config = LlamaConfig(hidden_size=d, num_attention_heads=1, rope_theta=base,
                         max_position_embeddings=4096, rope_scaling=scaling)
    kwargs = {"seq_len": 4096 * (2 * p["factor"] - 1) / p["factor"]} if kind == "ntk" else {}
    inv_freq, factor = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config, "cpu", **kwargs)
    return inv_freq.double(), factor


def case(name, kind, seed, b, h, t, d, p0, base, **p):
    p = {"factor": 1.0, "original": 0, "beta_fast": 32.0, "beta_slow": 1.0,
         "attention_factor": 0.0, "low": 1.0, "high": 4.0, **p}
    theta, m = frequencies(kind, d, base, p)
    hf_theta, hf_m = transformers_frequencies(kind, d, base, p)
    assert ((hf_theta - theta).abs() <= 1e-6 * theta).all(), f"{name}: frequencies differ"
    assert abs(hf_m - m) <= 1e-6, f"{name}: attention factor {hf_m} != {m}"
    gen = torch.Generator().manual_seed(seed)
    q = randn(gen, b, h, t, d).requires_grad_(True)
    k = randn(gen, b, h, t, d).requires_grad_(True)
    r_q = randn(gen, b, h, t, d)
    r_k = randn(gen, b, h, t, d)
    angles = torch.outer(torch.arange(p0, p0 + t, dtype=DTYPE), theta)
    emb = torch.cat([angles, angles], dim=-1)
    cos, sin = (emb.cos() * m).unsqueeze(0), (emb.sin() * m).unsqueeze(0)
    q_out, k_out = apply_rotary_pos_emb(q, k, cos, sin)
    grads = torch.autograd.grad((q_out * r_q).sum() + (k_out * r_k).sum(), [q, k])
    one = lambda v: torch.tensor([v], dtype=DTYPE)  # noqa: E731
    scaling = torch.tensor([KINDS[kind], p["factor"], p["original"], p["beta_fast"],
                            p["beta_slow"], p["attention_factor"], p["low"], p["high"]],
                           dtype=DTYPE)
    return [(f"{name}.q", q), (f"{name}.k", k), (f"{name}.p0", one(p0)), (f"{name}.base", one(base)),
            (f"{name}.scaling", scaling), (f"{name}.theta", theta), (f"{name}.m", one(m)),
            (f"{name}.r_q", r_q), (f"{name}.r_k", r_k), (f"{name}.q_out", q_out),
            (f"{name}.k_out", k_out), (f"{name}.grad.q", grads[0]), (f"{name}.grad.k", grads[1])]


def main():
    torch.set_num_threads(1)
    tensors = []
    tensors += case("linear", "linear", 1, 1, 2, 4, 8, 30, 10000.0, factor=4.0)
    tensors += case("ntk", "ntk", 2, 1, 2, 4, 12, 500, 10000.0, factor=8.0)
    # YaRN's defaults, a context of 64 stretched 4 times: a ramp over the middle pairs of 16.
    tensors += case("yarn", "yarn", 3, 2, 1, 5, 16, 100, 10000.0, factor=4.0, original=64)
    tensors += case("yarn_given", "yarn", 4, 1, 1, 3, 16, 7, 500000.0, factor=16.0,
                    original=256, beta_fast=16.0, beta_slow=2.0, attention_factor=1.5)
    # Llama 3.1's bands (factor 8, low 1, high 4) over a context of 64: pairs kept, scaled and
    # in between with a head width of 16.
    tensors += case("llama3", "llama3", 5, 1, 2, 4, 16, 2000, 10000.0, factor=8.0, original=64)
    write_reference(OUTPUT, FORMAT, "tests/attention/rotary_scaling_reference.py", tensors)


if __name__ == "__main__":
    main()
