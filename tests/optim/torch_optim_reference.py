#!/usr/bin/env python3
"""Reference values for tests/optim/test_optimizers.cpp, computed with CPU PyTorch's optimizers.

Writes tests/optim/data/torch_optim.txt: three small parameters (w [3, 4], e [2, 3], b [5]), twelve
steps of gradients, a learning rate that changes every step (set through param_group['lr'], as a
schedule does), and for each optimizer case the parameters after the twelve steps and the state
tensors (exp_avg, exp_avg_sq, momentum_buffer). Also torch.nn.utils.clip_grad_norm_ on two sets of
gradients. Everything is float64. PyTorch is only the oracle here: attn does not depend on it.

Every input comes from a formula (no random generator), so the file is the same byte for byte on
every run. Regenerate (PyTorch 1.13 on the system python):
    /usr/bin/python3 tests/optim/torch_optim_reference.py

File format (text, one tensor per line, '#' lines are comments):
    attn-torch-optim 1                   first line: format name and version
    <name> <rank> <d0> ... <d_rank-1> <v0> <v1> ...   values row-major, %.17g (exact in double)
    end <number of tensor lines>         last line: catches a truncated file
Names:
    param.<p>              initial value of parameter p (p = w, e, b)
    grad.<k>.<p>           gradient of p at step k = 1..12
    lr.<case>              [12] the learning rate of each step
    <case>.<p>             p after the twelve steps
    <case>.<state>.<p>     the optimizer's state for p after the twelve steps
    clip_<c>.in.<p>        gradients given to clip_grad_norm_ (max_norm in clip_<c>.max_norm)
    clip_<c>.norm          [1] the total norm it returned
    clip_<c>.out.<p>       the gradients after clipping

Weight decay follows nanoGPT's grouping: w and e (matrices) decay, b (a bias) is in a parameter
group with weight_decay = 0. The C++ test holds the same case table (configs) as CASES below.
"""

import math
import os

import torch

FORMAT = "attn-torch-optim 1"
HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, "data", "torch_optim.txt")
DTYPE = torch.float64
STEPS = 12
SHAPES = {"w": (3, 4), "e": (2, 3), "b": (5,)}
DECAY = {"w": True, "e": True, "b": False}


def initial_value(name):
    n = math.prod(SHAPES[name])
    if name == "w":
        vals = [math.sin(0.5 * i + 0.1) for i in range(n)]
    elif name == "e":
        vals = [0.3 * math.cos(0.9 * i) + 0.05 * i for i in range(n)]
    else:
        vals = [0.1 * i - 0.2 for i in range(n)]
    return torch.tensor(vals, dtype=DTYPE).reshape(SHAPES[name])


def gradient(step, name):
    """Gradient of parameter `name` at step 1..12: a smooth formula of step and element index."""
    j = list(SHAPES).index(name)
    n = math.prod(SHAPES[name])
    vals = [
        math.sin(step * (0.37 * i + 0.11 * (j + 1)) + 0.3 * j) * (1.0 + 0.05 * step)
        for i in range(n)
    ]
    return torch.tensor(vals, dtype=DTYPE).reshape(SHAPES[name])


def learning_rates(base):
    return [base * (1.0 + 0.5 * math.sin(1.7 * k)) for k in range(1, STEPS + 1)]


# name -> (torch optimizer class, base lr, keyword arguments, weight decay or 0, state names).
# Weight decay applies to the decaying group only (w, e); b's group has weight_decay = 0.
CASES = [
    ("sgd_plain", torch.optim.SGD, 0.05, {}, 0.0, []),
    ("sgd_momentum", torch.optim.SGD, 0.05, {"momentum": 0.9, "dampening": 0.1}, 0.0,
     ["momentum_buffer"]),
    ("sgd_nesterov", torch.optim.SGD, 0.05, {"momentum": 0.8, "nesterov": True}, 0.01,
     ["momentum_buffer"]),
    ("sgd_weight_decay", torch.optim.SGD, 0.05, {}, 0.1, []),
    ("adam", torch.optim.Adam, 0.01, {}, 0.0, ["exp_avg", "exp_avg_sq"]),
    ("adam_weight_decay", torch.optim.Adam, 0.01, {"betas": (0.8, 0.95), "eps": 1e-6}, 0.05,
     ["exp_avg", "exp_avg_sq"]),
    ("adamw", torch.optim.AdamW, 0.01, {"betas": (0.9, 0.95)}, 0.1, ["exp_avg", "exp_avg_sq"]),
    # beta2 = 0.999: rho_t <= 5 for t <= 5 (un-rectified momentum steps), rectified from t = 6.
    ("radam", torch.optim.RAdam, 0.01, {}, 0.0, ["exp_avg", "exp_avg_sq"]),
    ("radam_weight_decay", torch.optim.RAdam, 0.01, {"betas": (0.8, 0.99), "eps": 1e-6}, 0.02,
     ["exp_avg", "exp_avg_sq"]),
]

# name -> (factor applied to the step-1 gradients, max_norm)
CLIP_CASES = [("clip_big", 3.0, 1.0), ("clip_small", 0.1, 5.0)]


def run_case(name, cls, base_lr, kwargs, weight_decay, state_names):
    params = {p: initial_value(p).clone().requires_grad_(True) for p in SHAPES}
    groups = [
        {"params": [params[p] for p in SHAPES if DECAY[p]], "weight_decay": weight_decay},
        {"params": [params[p] for p in SHAPES if not DECAY[p]], "weight_decay": 0.0},
    ]
    opt = cls(groups, lr=base_lr, **kwargs)
    lrs = learning_rates(base_lr)
    for k in range(1, STEPS + 1):
        for group in opt.param_groups:
            group["lr"] = lrs[k - 1]
        for p, t in params.items():
            t.grad = gradient(k, p)
        opt.step()
    out = [(f"lr.{name}", torch.tensor(lrs, dtype=DTYPE))]
    for p, t in params.items():
        out.append((f"{name}.{p}", t.detach()))
    for s in state_names:
        for p, t in params.items():
            out.append((f"{name}.{s}.{p}", opt.state[t][s]))
    return out


def clip_case(name, factor, max_norm):
    params = {p: initial_value(p).clone().requires_grad_(True) for p in SHAPES}
    out = [(f"{name}.max_norm", torch.tensor([max_norm], dtype=DTYPE))]
    for p, t in params.items():
        t.grad = gradient(1, p) * factor
        out.append((f"{name}.in.{p}", t.grad.clone()))
    norm = torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
    out.append((f"{name}.norm", norm.reshape(1)))
    for p, t in params.items():
        out.append((f"{name}.out.{p}", t.grad))
    return out


def format_tensor(name, t):
    t = t.detach().to(DTYPE)
    fields = [name, str(t.dim())] + [str(d) for d in t.shape]
    fields += ["%.17g" % v for v in t.reshape(-1).tolist()]
    return " ".join(fields)


def main():
    tensors = [(f"param.{p}", initial_value(p)) for p in SHAPES]
    for k in range(1, STEPS + 1):
        tensors += [(f"grad.{k}.{p}", gradient(k, p)) for p in SHAPES]
    for case in CASES:
        tensors += run_case(*case)
    for case in CLIP_CASES:
        tensors += clip_case(*case)
    for name, t in tensors:
        assert torch.isfinite(t).all(), name

    lines = [FORMAT, f"# written by tests/optim/torch_optim_reference.py with torch {torch.__version__}"]
    lines += [format_tensor(name, t) for name, t in tensors]
    lines.append("end %d" % len(tensors))
    os.makedirs(os.path.dirname(OUTPUT), exist_ok=True)
    with open(OUTPUT, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(tensors)} tensors to {OUTPUT}")


if __name__ == "__main__":
    main()
