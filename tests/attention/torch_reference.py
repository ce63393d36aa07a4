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
grad.q, grad.k, grad.v. Positional cases (rotary_*, alibi_*) are causal self-attention modules
with the same tensors as a module case, the score written out from its paper (see rotary() and
alibi_bias()) instead of torch.nn.MultiheadAttention, which has neither.

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


def rotary(x, base=10000.0):
    """RoFormer (Su et al.), eq. (34): x [B, H, T, Dh] at positions m = 0 .. T-1 becomes
    x * (cos m theta_1, cos m theta_1, cos m theta_2, ...) + (-x_2, x_1, -x_4, x_3, ...) * (sin ...),
    theta_i = base^(-2(i-1)/d), i = 1 .. d/2: each pair (x_{2i-1}, x_{2i}) turned by m theta_i."""
    t, dh = x.shape[-2], x.shape[-1]
    theta = base ** (-2.0 * torch.arange(dh // 2, dtype=DTYPE) / dh)
    angle = torch.arange(t, dtype=DTYPE)[:, None] * theta[None, :]  # [T, Dh/2]
    cos = angle.cos().repeat_interleave(2, dim=-1)
    sin = angle.sin().repeat_interleave(2, dim=-1)
    x_rot = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).reshape(x.shape)
    return x * cos + x_rot * sin


def alibi_slopes(n):
    """The head slopes of ALiBi (Press, Smith, Lewis), as the paper's reference code computes them:
    a geometric sequence from 2^(-8/n) for n a power of two, else the slopes of the closest smaller
    power of two followed by every other slope of twice that many heads."""

    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][: n - closest]


def alibi_bias(heads, t):
    """[H, T, T]: m_h * (j - i), i.e. -m_h (i - j) on and below the diagonal (the causal part)."""
    i = torch.arange(t)[:, None]
    j = torch.arange(t)[None, :]
    m = torch.tensor(alibi_slopes(heads), dtype=DTYPE)[:, None, None]
    return m * (j - i).to(DTYPE)


def positional_case(name, seed, batch, t, d_model, heads, kind):
    """Causal self-attention with rotary positions or ALiBi, the module written out."""
    gen = torch.Generator().manual_seed(seed)
    d, dh = d_model, d_model // heads
    bound = math.sqrt(6.0 / (4 * d))
    w_in = randn(gen, 3 * d, d, scale=bound).requires_grad_(True)
    b_in = randn(gen, 3 * d, scale=0.1).requires_grad_(True)
    w_out = randn(gen, d, d, scale=1.0 / math.sqrt(d)).requires_grad_(True)
    b_out = randn(gen, d, scale=0.1).requires_grad_(True)
    x = randn(gen, batch, t, d).requires_grad_(True)
    r = randn(gen, batch, t, d)

    def split(u):  # [B, T, D] -> [B, H, T, Dh]
        return u.reshape(batch, t, heads, dh).transpose(1, 2)

    q = split(x @ w_in[:d].T + b_in[:d])
    k = split(x @ w_in[d : 2 * d].T + b_in[d : 2 * d])
    v = split(x @ w_in[2 * d :].T + b_in[2 * d :])
    if kind == "rotary":
        q, k = rotary(q), rotary(k)
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    if kind == "alibi":
        s = s + alibi_bias(heads, t)
    s = s.masked_fill(causal_disallowed(t, t), float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    y = o.transpose(1, 2).reshape(batch, t, d) @ w_out.T + b_out
    params = {"in_proj_weight": w_in, "in_proj_bias": b_in, "out_proj.weight": w_out,
              "out_proj.bias": b_out}
    grads = torch.autograd.grad((y * r).sum(), [x] + list(params.values()))
    assert torch.isfinite(y).all(), name
    out = [(f"{name}.heads", torch.tensor([heads], dtype=DTYPE)), (f"{name}.x", x)]
    out += [(f"{name}.{key}", p) for key, p in params.items()]
    out += [(f"{name}.r", r), (f"{name}.y", y)]
    out += [(f"{name}.grad.{key}", g) for key, g in zip(["x"] + list(params), grads)]
    return out


def format_tensor(name, t):
    t = t.detach().to(DTYPE).contiguous()
    fields = [name, str(t.dim())] + [str(s) for s in t.shape]
    fields += ["%.17g" % v for v in t.reshape(-1).tolist()]
    return " ".join(fields)


def write_reference(path, format_line, script, tensors):
    """Writes (name, tensor) pairs in the format above, first line `format_line`."""
    lines = [
        format_line,
        "# generated by %s with torch %s; do not edit" % (script, torch.__version__.split("+")[0]),
    ]
    lines += [format_tensor(n, t) for n, t in tensors]
    lines.append("end %d" % len(tensors))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d tensors to %s" % (len(tensors), os.path.relpath(path)), file=sys.stderr)


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
    # (5) rotary positions and ALiBi, causal: short, with 6 heads for ALiBi (slopes beyond a
    # power of two), and T = 133 (past the fused path's 128-key tiles; rotary angles past 2 pi).
    tensors += positional_case("rotary_causal", 8, 2, 7, 16, 2, "rotary")
    tensors += positional_case("rotary_long", 9, 1, 133, 8, 2, "rotary")
    tensors += positional_case("alibi_causal", 10, 2, 7, 12, 6, "alibi")
    tensors += positional_case("alibi_long", 11, 1, 133, 8, 2, "alibi")

    write_reference(OUTPUT, FORMAT, "tests/attention/torch_reference.py", tensors)


if __name__ == "__main__":
    main()
