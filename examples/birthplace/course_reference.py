#!/usr/bin/env python3
"""The problem set's pretraining recipe written out in PyTorch: an oracle for attn's loss curve.

The birth-place study (docs/experiments/birthplace.md) compares attn's pretraining loss with the
course code's. Its public logs give only the first five epochs and the last, so this script
trains the same recipe in PyTorch to give the whole curve on this machine: minGPT of 2020 as the
course ships it (4 layers, 8 heads, 256 wide, block 128, dropout 0.1 everywhere, positions
initialised to zeros, every linear layer N(0, 0.02^2), no residual scaling), span corruption of
each line of the corpus, AdamW (betas 0.9/0.95, decay 0.1 on every parameter whose name lacks
"bias", as the course's name filter works out for its modules), gradient clipping at 1.0, and
minGPT's cycling token cosine (warm-up 10 240 tokens, period set by 200 epochs of tokens, floor
10 %), the rate set after each step. Its rows are 128 positions long and count 128 tokens each, as
attn's did when the committed curves were made; the course's targets are 127 long, so its cosine
runs 0.8 % behind this one's (under 0.1 % in the rate over 30 epochs). Written for this
repository from the problem set's description; it is a reference, never part of attn's build or
tests.

Each of attn's choices (docs/experiments/birthplace.md, "What differs from the course code") can
be switched on alone, so a difference in the curves can be traced to one of them:
  --decay nanogpt     weight decay on matrices and embeddings only
  --pos-init normal   position table N(0, 0.02^2) instead of zeros
  --residual-scaling  output projections N(0, (0.02/sqrt(2 layers))^2)
  --shuffle           a new random order every epoch (the course's DataLoader does not shuffle)

Writes one CSV row per optimizer step (step, epoch, loss, lr) to --out.

  build/oracle-venv/bin/python examples/birthplace/course_reference.py --epochs 40 \
      --out runs/course_reference/course-s1.csv
"""
import argparse
import csv
import math
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, MASK = "\u25A1", "\u2047"


def documents(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    if PAD in chars or MASK in chars:
        sys.exit(f"course_reference: {path} contains the PAD or MASK character")
    vocab = [PAD, MASK] + chars
    stoi = {c: i for i, c in enumerate(vocab)}
    docs = [line for line in text.split("\n") if line]
    return docs, stoi, len(vocab)


def corrupt(doc, block, rng):
    """One example "prefix ⁇ suffix ⁇ masked □…" of the document, as x and y of `block` ids."""
    length = min(len(doc), rng.randint(4, block * 7 // 8))
    truncated = doc[:length]
    # The masked span: random, a quarter of the truncated document on average.
    lo, hi = (1.0, length / 2 - 1) if length >= 4 else (0.0, length / 2)
    masked = min(length, math.floor(rng.uniform(lo, hi) + rng.random()))
    prefix = rng.randint(0, length - masked)
    s = truncated[:prefix] + MASK + truncated[prefix + masked:] + MASK + truncated[prefix:prefix + masked]
    return s + PAD * (block + 1 - len(s))


class Block(nn.Module):
    def __init__(self, embd, heads, dropout):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(embd), nn.LayerNorm(embd)
        self.key, self.query, self.value = (nn.Linear(embd, embd) for _ in range(3))
        self.proj = nn.Linear(embd, embd)
        self.fc, self.fc_out = nn.Linear(embd, 4 * embd), nn.Linear(4 * embd, embd)
        self.attn_dropout, self.resid_drop = dropout, nn.Dropout(dropout)
        self.mlp_drop = nn.Dropout(dropout)

    def attend(self, x):
        b, t, c = x.shape
        h = self.heads
        k = self.key(x).view(b, t, h, c // h).transpose(1, 2)
        q = self.query(x).view(b, t, h, c // h).transpose(1, 2)
        v = self.value(x).view(b, t, h, c // h).transpose(1, 2)
        # softmax(q kᵀ/√d_h, causal) with dropout on the weights, as the course writes it out;
        # PyTorch's fused kernel computes the same thing faster.
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_dropout if self.training else 0.0,
                                           is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, c)
        return self.resid_drop(self.proj(y))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.mlp_drop(self.fc_out(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, embd, dropout, pos_init, residual_scaling):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, embd)
        self.pos_emb = nn.Parameter(torch.zeros(1, block, embd))
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(embd, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(embd)
        self.head = nn.Linear(embd, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if pos_init == "normal":
            nn.init.normal_(self.pos_emb, 0.0, 0.02)
        if residual_scaling:
            for b in self.blocks:
                for m in (b.proj, b.fc_out):
                    nn.init.normal_(m.weight, 0.0, 0.02 / math.sqrt(2 * layers))

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.drop(self.tok_emb(idx) + self.pos_emb[:, :t])
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=0)


def parameter_groups(model, decay, rule):
    with_decay, without = [], []
    for name, p in model.named_parameters():
        if rule == "course":
            # The course filters on the names "bias" and "LayerNorm.weight"; its LayerNorms are
            # called ln1/ln2/ln_f, so only the biases escape the decay.
            (without if "bias" in name else with_decay).append(p)
        else:  # nanoGPT's rule: matrices and embeddings decay, biases and LayerNorm gains do not
            (with_decay if p.dim() >= 2 else without).append(p)
    return [{"params": with_decay, "weight_decay": decay}, {"params": without, "weight_decay": 0.0}]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="data/wiki.txt")
    ap.add_argument("--epochs", type=float, default=650)
    ap.add_argument("--schedule-epochs", type=float, default=650,
                    help="the recipe's epoch count, which sets the batch count per epoch only")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=6e-3)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--decay", choices=["course", "nanogpt"], default="course")
    ap.add_argument("--pos-init", choices=["zeros", "normal"], default="zeros")
    ap.add_argument("--residual-scaling", action="store_true")
    ap.add_argument("--shuffle", action="store_true")
    ap.add_argument("--out", required=True, help="CSV of the per-step loss (must not exist)")
    a = ap.parse_args()
    if os.path.exists(a.out):
        sys.exit(f"course_reference: {a.out} exists; choose another --out")
    if a.epochs <= 0 or a.threads < 1:
        sys.exit("course_reference: --epochs must be > 0 and --threads >= 1")

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    docs, stoi, vocab = documents(a.corpus)
    block, batch = 128, 128
    model = GPT(vocab, block, 4, 8, 256, a.dropout, a.pos_init, a.residual_scaling)
    opt = torch.optim.AdamW(parameter_groups(model, 0.1, a.decay), lr=a.lr, betas=(0.9, 0.95))
    warmup, final = 512 * 20, 200 * len(docs) * block
    steps_per_epoch = math.ceil(len(docs) / batch)
    total_steps = round(a.epochs * steps_per_epoch)
    print(f"course_reference: {len(docs)} documents, vocabulary {vocab}, "
          f"{sum(p.numel() for p in model.parameters())} parameters, {total_steps} steps, "
          f"decay {a.decay}, positions {a.pos_init}, residual scaling {a.residual_scaling}, "
          f"shuffle {a.shuffle}, torch {torch.__version__}, {a.threads} threads", flush=True)

    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + ".part"
    tokens, step, t0 = 0, 0, time.time()
    with open(tmp, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["step", "epoch", "loss", "lr"])
        model.train()
        while step < total_steps:
            order = list(range(len(docs)))
            if a.shuffle:
                rng.shuffle(order)
            epoch_losses = []
            for first in range(0, len(order), batch):
                if step >= total_steps:
                    break
                rows = [corrupt(docs[i], block, rng) for i in order[first:first + batch]]
                ids = torch.tensor([[stoi[c] for c in s] for s in rows])
                x, y = ids[:, :-1], ids[:, 1:]
                lr = opt.param_groups[0]["lr"]
                loss = model(x, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                # minGPT: the rate for the next step from the tokens seen so far (PAD included).
                tokens += y.numel()
                if tokens < warmup:
                    mult = tokens / warmup
                else:
                    progress = (tokens - warmup) / max(1, final - warmup)
                    mult = max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))
                for g in opt.param_groups:
                    g["lr"] = a.lr * mult
                step += 1
                epoch_losses.append(loss.item())
                out.writerow([step, f"{step / steps_per_epoch:.4f}", f"{loss.item():.5f}", f"{lr:.6g}"])
            f.flush()
            print(f"epoch {step / steps_per_epoch:.0f}: mean loss {sum(epoch_losses) / len(epoch_losses):.4f}, "
                  f"lr {opt.param_groups[0]['lr']:.3g}, {time.time() - t0:.0f} s", flush=True)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
