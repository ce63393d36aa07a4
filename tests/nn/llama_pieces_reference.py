#!/usr/bin/env python3
"""Reference values for tests/nn/test_llama_pieces.cpp: the normalisation and the MLP of Llama,
as PyTorch and the transformers package define them, in float64.

Writes tests/nn/data/torch_llama_pieces.txt:
  rms.*    torch.nn.RMSNorm (y = weight * x / sqrt(mean(x^2) + eps)): x, weight, eps (rank 1,
           one element), r (fixed random weights of the loss sum(y * r)), y, grad.x,
           grad.weight. transformers' LlamaRMSNorm computes in float32 whatever its input, so
           PyTorch's module is the float64 statement of the same formula; the script checks
           that the two agree to float32 precision.
  mlp.*    transformers' LlamaMLP (hidden_act "silu", mlp_bias false):
           down_proj(silu(gate_proj(x)) * up_proj(x)): x, gate_proj.weight, up_proj.weight,
           down_proj.weight (PyTorch's [out, in]), r, y, and the gradients of sum(y * r) with
           respect to x and each weight.

Regenerate (PyTorch and transformers from scripts/oracle-venv):
    scripts/oracle-venv
    build/oracle-venv/bin/python tests/nn/llama_pieces_reference.py
The file format is tests/attention/torch_reference.py's, first line "attn-torch-llama-pieces 1".
"""

import os
import sys

import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "attention"))
from torch_reference import DTYPE, randn, write_reference  # noqa: E402  the same file format

FORMAT = "attn-torch-llama-pieces 1"
OUTPUT = os.path.join(HERE, "data", "torch_llama_pieces.txt")


def rms_case(name, seed, shape, eps):
    gen = torch.Generator().manual_seed(seed)
    d = shape[-1]
    norm = torch.nn.RMSNorm(d, eps=eps, dtype=DTYPE)
    with torch.no_grad():
        norm.weight.copy_(randn(gen, d))
    x = randn(gen, *shape, scale=2.0).requires_grad_(True)
    r = randn(gen, *shape)
    y = norm(x)
    gx, gw = torch.autograd.grad((y * r).sum(), [x, norm.weight])
    llama = LlamaRMSNorm(d, eps=eps)
    with torch.no_grad():
        llama.weight.copy_(norm.weight.float())
    assert (llama(x.detach().float()).double() - y).abs().max() < 1e-5, "LlamaRMSNorm differs"
    return [(f"{name}.x", x), (f"{name}.weight", norm.weight),
            (f"{name}.eps", torch.tensor([eps], dtype=DTYPE)), (f"{name}.r", r),
            (f"{name}.y", y), (f"{name}.grad.x", gx), (f"{name}.grad.weight", gw)]


def mlp_case(name, seed, shape, hidden):
    gen = torch.Generator().manual_seed(seed)
    d = shape[-1]
    config = LlamaConfig(hidden_size=d, intermediate_size=hidden, hidden_act="silu",
                         mlp_bias=False)
    mlp = LlamaMLP(config).to(DTYPE)
    params = dict(mlp.named_parameters())
    assert sorted(params) == ["down_proj.weight", "gate_proj.weight", "up_proj.weight"]
    with torch.no_grad():
        for key in ["gate_proj.weight", "up_proj.weight", "down_proj.weight"]:
            params[key].copy_(randn(gen, *params[key].shape, scale=0.5))
    x = randn(gen, *shape).requires_grad_(True)
    r = randn(gen, *shape)
    y = mlp(x)
    keys = ["gate_proj.weight", "up_proj.weight", "down_proj.weight"]
    grads = torch.autograd.grad((y * r).sum(), [x] + [params[k] for k in keys])
    out = [(f"{name}.x", x)] + [(f"{name}.{k}", params[k]) for k in keys]
    out += [(f"{name}.r", r), (f"{name}.y", y)]
    out += [(f"{name}.grad.{k}", g) for k, g in zip(["x"] + keys, grads)]
    return out


def main():
    torch.set_num_threads(1)  # same summation order every run
    tensors = []
    # Llama's eps (1e-6, and 1e-5 of Llama 2) on rows of an odd width, inputs of scale 2.
    tensors += rms_case("rms", 1, (2, 3, 13), 1e-6)
    tensors += rms_case("rms_eps", 2, (5, 7), 1e-5)
    # Width 6, hidden 11 (Llama's hidden is not 4 D).
    tensors += mlp_case("mlp", 3, (2, 4, 6), 11)
    write_reference(OUTPUT, FORMAT, "tests/nn/llama_pieces_reference.py", tensors)


if __name__ == "__main__":
    main()
