#!/usr/bin/env python3
"""Reference values for tests/attention/test_torch_parity.cpp, computed with CPU PyTorch.

Writes tests/attention/data/torch_parity.txt: outputs and gradients of torch.nn.MultiheadAttention
(causal, key padding, cross-attention) and of the per-head formula softmax(Q K^T / sqrt(Dh)) V,
in float64, from fixed seeds. PyTorch is only the oracle here: attn does not depend on it.

Regenerate (PyTorch 1.13 on the system python; the output is the same byte for byte each run):
    /usr/bin/python3 tests/attention/torch_reference.py

File format (text, one tensor per line, '#' lines are comments):
    attn-torch-parity 1                  first line: format name and version
    <name> <rank> <d0> ... <d_rank-1> <v0> <v1> ...   values row-major, %.17g (exact in double)
    end <number of tensor lines>         last line: catches a truncated file
Names are <case>.<tensor>. For a module case the tensors are: heads (the head count, as a
rank-1 tensor of one element), the inputs (x; memory for cross-attention), PyTorch's parameters
under their state_dict names (in_proj_weight [3D, D] = the rows of W_q, W_k, W_v stacked;
in_proj_bias [3D]; out_proj.weight [D, D]; out_proj.bias [D]; every linear map is
y = x W^T + b), lengths (key lengths, for cases with a key padding mask), r (fixed random
weights of the loss), y (the output) and grad.<tensor>: the gradient of loss = sum(y * r) with
respect to each input and parameter. Per-head cases store q, k, v [B, H, T, Dh], r, o and
grad.q, grad.k, grad.v.

Causal masks are aligned at the end (query i sees keys j <= i + Tk - Tq), as attn's mask::Causal.
"""

import math
import os
import sys

import torch

FORMAT = "attn-torch-parity 1"
HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, "data", "torch_parity.txt")
DTYPE = torch.float64


def randn(gen, *shape, scale=1.0):
    return torch.randn(*shape, generator=gen, dtype=DTYPE) * scale


def causal_disallowed(tq, tk):
    """Bool [Tq, Tk], True where attention is NOT allowed (PyTorch's convention for bool masks)."""
    i = torch.arange(tq).unsqueeze(1)
    j = torch.arange(tk).unsqueeze(0)
    return j > i + (tk - tq)


def padding_disallowed(lengths, tk):
    """Bool [B, Tk] key_padding_mask: True for keys j >= lengths[b]."""
    j = torch.arange(tk).unsqueeze(0)
    return j >= torch.tensor(lengths).unsqueeze(1)


def manual_attention(q, k, v, disallowed):
    """softmax(Q K^T / sqrt(Dh)) V per head; `disallowed` broadcasts to [B, H, Tq, Tk]."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(disallowed, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def manual_mha(x, memory, w_in, b_in, w_out, b_out, heads, disallowed):
    """The module written out by hand (the script's own check that the module does what we say)."""
    d = x.shape[-1]
    dh = d // heads

    def split(t):  # [B, T, D] -> [B, H, T, Dh]
        return t.reshape(t.shape[0], t.shape[1], heads, dh).transpose(1, 2)

    q = split(x @ w_in[:d].T + b_in[:d])
    k = split(memory @ w_in[d : 2 * d].T + b_in[d : 2 * d])
    v = split(memory @ w_in[2 * d :].T + b_in[2 * d :])
    o = manual_attention(q, k, v, disallowed)
    o = o.transpose(1, 2).reshape(x.shape[0], x.shape[1], d)
    return o @ w_out.T + b_out


def mha_case(name, seed, batch, tq, tk, d_model, heads, cross, causal, lengths):
    gen = torch.Generator().manual_seed(seed)
    mha = torch.nn.MultiheadAttention(
        d_model, heads, dropout=0.0, bias=True, batch_first=True, dtype=DTYPE
    )
    mha.eval()
    # Explicit values (not the module's init, which would tie the data to its RNG use); nonzero
    # biases so that their gradients and effect are tested.
    bound = math.sqrt(6.0 / (4 * d_model))  # xavier-uniform-like spread for [3D, D]
    with torch.no_grad():
        mha.in_proj_weight.copy_(randn(gen, 3 * d_model, d_model, scale=bound))
        mha.in_proj_bias.copy_(randn(gen, 3 * d_model, scale=0.1))
        mha.out_proj.weight.copy_(randn(gen, d_model, d_model, scale=1.0 / math.sqrt(d_model)))
        mha.out_proj.bias.copy_(randn(gen, d_model, scale=0.1))
    x = randn(gen, batch, tq, d_model).requires_grad_(True)
    memory = randn(gen, batch, tk, d_model).requires_grad_(True) if cross else None
    r = randn(gen, batch, tq, d_model)

    attn_mask = causal_disallowed(tq, tk) if causal else None
    key_padding_mask = padding_disallowed(lengths, tk) if lengths is not None else None
    kv = memory if cross else x
    y, _ = mha(
        x, kv, kv, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False
    )
    loss = (y * r).sum()
    params = {
        "in_proj_weight": mha.in_proj_weight,
        "in_proj_bias": mha.in_proj_bias,
        "out_proj.weight": mha.out_proj.weight,
        "out_proj.bias": mha.out_proj.bias,
    }
    inputs = {"x": x}
    if cross:
        inputs["memory"] = memory
    grads = torch.autograd.grad(loss, list(inputs.values()) + list(params.values()))

    # The module against the formula written out: the oracle must be what the file claims.
    disallowed = torch.zeros(batch, 1, tq, tk, dtype=torch.bool)
    if attn_mask is not None:
        disallowed = disallowed | attn_mask
    if key_padding_mask is not None:
        disallowed = disallowed | key_padding_mask[:, None, None, :]
    with torch.no_grad():
        y_manual = manual_mha(x, kv, *params.values(), heads, disallowed)
    assert torch.isfinite(y).all(), name
    assert (y - y_manual).abs().max().item() < 1e-12, name

    out = [(f"{name}.heads", torch.tensor([heads], dtype=DTYPE))]
    for key, t in inputs.items():
        out.append((f"{name}.{key}", t))
    for key, t in params.items():
        out.append((f"{name}.{key}", t))
    if lengths is not None:
        out.append((f"{name}.lengths", torch.tensor(lengths, dtype=DTYPE)))
    out.append((f"{name}.r", r))
    out.append((f"{name}.y", y))
    for key, g in zip(list(inputs) + list(params), grads):
        out.append((f"{name}.grad.{key}", g))
    return out


def per_head_case(name, seed, batch, heads, tq, tk, dh):
    gen = torch.Generator().manual_seed(seed)
    q = randn(gen, batch, heads, tq, dh).requires_grad_(True)
    k = randn(gen, batch, heads, tk, dh).requires_grad_(True)
    v = randn(gen, batch, heads, tk, dh).requires_grad_(True)
    r = randn(gen, batch, heads, tq, dh)
    o = manual_attention(q, k, v, causal_disallowed(tq, tk))
    grads = torch.autograd.grad((o * r).sum(), [q, k, v])
    assert torch.isfinite(o).all(), name
    out = [(f"{name}.q", q), (f"{name}.k", k), (f"{name}.v", v), (f"{name}.r", r)]
    out.append((f"{name}.o", o))
    out += [(f"{name}.grad.{n}", g) for n, g in zip("qkv", grads)]
    return out


def format_tensor(name, t):
    t = t.detach().to(DTYPE).contiguous()
    fields = [name, str(t.dim())] + [str(s) for s in t.shape]
    fields += ["%.17g" % v for v in t.reshape(-1).tolist()]
    return " ".join(fields)


def main():
    torch.set_num_threads(1)  # same summation order every run
    tensors = []
    # (1) self-attention, causal: B = 2, T = 5, D = 8, 2 heads.
    tensors += mha_case("mha_causal", 1, 2, 5, 5, 8, 2, cross=False, causal=True, lengths=None)
    # (2) self-attention with key padding (lengths 5 and 3; padded queries still see real keys).
    tensors += mha_case("mha_padding", 2, 2, 5, 5, 8, 2, cross=False, causal=False, lengths=[5, 3])
    # (3) cross-attention, Tq = 5 queries over Tk = 7 memory positions: no mask, key padding, and
    # end-aligned causal.
    tensors += mha_case("mha_cross", 3, 2, 5, 7, 8, 2, cross=True, causal=False, lengths=None)
    tensors += mha_case(
        "mha_cross_padding", 4, 2, 5, 7, 8, 2, cross=True, causal=False, lengths=[7, 4]
    )
    tensors += mha_case("mha_cross_causal", 5, 2, 5, 7, 8, 2, cross=True, causal=True, lengths=None)
    # (4) the per-head formula with a causal mask: small, and long enough (T = 70 and 100 keys)
    # to span several 64-wide tiles of attn's fused path, including fully masked ones.
    tensors += per_head_case("head_causal", 6, 2, 2, 7, 7, 4)
    tensors += per_head_case("head_causal_long", 7, 1, 2, 70, 100, 4)

    lines = [
        FORMAT,
        "# generated by tests/attention/torch_reference.py with torch %s; do not edit"
        % torch.__version__.split("+")[0],
    ]
    lines += [format_tensor(n, t) for n, t in tensors]
    lines.append("end %d" % len(tensors))
    os.makedirs(os.path.dirname(OUTPUT), exist_ok=True)
    with open(OUTPUT, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d tensors to %s" % (len(tensors), os.path.relpath(OUTPUT)), file=sys.stderr)


if __name__ == "__main__":
    main()
