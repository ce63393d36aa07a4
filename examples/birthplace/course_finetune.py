#!/usr/bin/env python3
"""The problem set's finetuning and evaluation written out in PyTorch, from attn's pretrained weights:
an oracle for attn's `birthplace finetune` and `evaluate`.

The birth-place study (docs/experiments/birthplace.md) asks, where its finetuned models answer few
people, whether the fault is in the pretraining or in what comes after it. This script takes a
checkpoint of `birthplace pretrain` (vanilla attention), loads its weights into minGPT of 2020 as
course_reference.py writes it, and

1. checks the loading: it asks the model for the dev people's facts in the pretraining format, as
   `birthplace recall` does (the rule written out again here: the person's wiki line that starts
   with the name, the first occurrence of the place after the name within the first 112
   characters and none after it, the place masked, `prefix ⁇ suffix ⁇`, |place| + 1 greedy
   characters), and compares its completions with those of `birthplace recall --outputs-path`
   (--compare-recall), which the same weights must reproduce but for near-ties of the argmax;
2. finetunes as the course's code does: its NameDataset (`q ⁇ a ⁇ □…` padded to 128 characters,
   input [:-1], target PAD over the question and then the sequence shifted by one: 127 positions),
   the examples in file order, batches of 256, a fresh AdamW (betas 0.9/0.95, decay 0.1 on every
   parameter whose name lacks "bias"), gradient clipping at 1.0, minGPT's token schedule at 6e-4
   (warm-up 10 240 tokens, final_tokens = 200 · pretraining documents · 128, 127 tokens a row, the
   rate set after each step), dropout 0.1, 10 epochs;
3. evaluates as the course's code does: 32 greedy characters after "question ⁇", the answer the
   text up to the next ⁇, exact match.

The QA lines keep their accented names, as attn's do (--ascii strips them to ASCII, as the course's
NameDataset does). Written for this repository from the problem set's description; it is a
reference, never part of attn's build or tests.

  build/oracle-venv/bin/python examples/birthplace/course_finetune.py \\
      --reading-params runs/birthplace_course/vanilla-s1.pretrain.params \\
      --compare-recall runs/vanilla.recall.tsv --outputs-path runs/vanilla.course_finetune.predictions
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from course_reference import GPT, MASK, PAD, parameter_groups  # noqa: E402

BLOCK = 128


def load_attn_checkpoint(path):
    """The tensors (float32, by name) and the metadata of a safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            sys.exit(f"course_finetune: {path}: tensor {name} is {t['dtype']}, not F32")
        lo, hi = t["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(data[lo:hi]), dtype=torch.float32).reshape(t["shape"])
    return tensors, meta


def model_from(path, dropout):
    tensors, meta = load_attn_checkpoint(path)
    if meta.get("format", "").find("birthplace") < 0 or meta.get("variant") not in ("vanilla", "standard"):
        sys.exit(f"course_finetune: {path} is not a birthplace checkpoint of vanilla attention")
    cfg = {k: int(meta[f"config.{k}"]) for k in ("layers", "heads", "d_model", "block_size", "vocab_size")}
    if cfg["block_size"] != BLOCK:
        sys.exit(f"course_finetune: the block is {cfg['block_size']}, not {BLOCK}")
    model = GPT(cfg["vocab_size"], BLOCK, cfg["layers"], cfg["heads"], cfg["d_model"], dropout, "zeros", False)
    names = {"tok_emb.weight": "tok_emb.weight", "ln_f.weight": "ln_f.weight", "ln_f.bias": "ln_f.bias",
             "head.weight": "head.weight"}
    for i in range(cfg["layers"]):
        for attn_name, ours in (("attn.q_proj", "query"), ("attn.k_proj", "key"), ("attn.v_proj", "value"),
                                ("attn.out_proj", "proj"), ("mlp.fc", "fc"), ("mlp.proj", "fc_out"),
                                ("ln1", "ln1"), ("ln2", "ln2")):
            for p in ("weight", "bias"):
                names[f"blocks.{i}.{attn_name}.{p}"] = f"blocks.{i}.{ours}.{p}"
    state = {ours: tensors[theirs] for theirs, ours in names.items()}
    state["pos_emb"] = tensors["pos_emb.weight"].unsqueeze(0)
    model.load_state_dict(state, strict=True)
    vocab = list(meta["vocab"])
    if vocab[0] != PAD or vocab[1] != MASK or len(vocab) != cfg["vocab_size"]:
        sys.exit(f"course_finetune: {path}: the vocabulary does not start with PAD and MASK")
    return model, vocab, meta


def logits_of(model, idx):
    t = idx.shape[1]
    x = model.drop(model.tok_emb(idx) + model.pos_emb[:, :t])
    for b in model.blocks:
        x = b(x)
    return model.head(model.ln_f(x))


@torch.no_grad()
def greedy(model, ids, steps, stop=None):
    """`steps` greedy ids after `ids` (a list), fewer when `stop` is written (not included)."""
    x = torch.tensor([ids])
    out = []
    for _ in range(steps):
        nxt = int(logits_of(model, x[:, -BLOCK:])[0, -1].argmax())
        if nxt == stop:
            break
        out.append(nxt)
        x = torch.cat([x, torch.tensor([[nxt]])], dim=1)
    return out


def read_pairs(path, ascii_only):
    text = open(path, encoding="utf-8").read()
    if ascii_only:
        text = text.encode("utf-8").decode("ascii", errors="ignore")
    return [tuple(line.split("\t")) for line in text.split("\n") if line]


def fact_prompt(docs, name, place):
    """The prompt of `birthplace recall` for one person, or None (the rule in the docstring)."""
    for doc in docs:
        if not doc.startswith(name) or len(doc) <= len(name):
            continue
        nxt = doc[len(name)]
        if nxt.isascii() and nxt.isalnum():
            continue
        seen = doc[:BLOCK * 7 // 8]
        at = seen.find(place, len(name))
        if at < 0 or 2 * len(place) >= len(seen) or seen.find(place, at + len(place)) >= 0:
            continue
        return seen[:at] + MASK + seen[at + len(place):] + MASK
    return None


def check_recall(model, stoi, itos, docs, pairs, compare):
    model.eval()
    mine = []
    for q, a in pairs:
        name = q[len("Where was "):-len(" born?")] if q.startswith("Where was ") and q.endswith(" born?") else ""
        prompt = fact_prompt(docs, name, a) if name else None
        if prompt is None:
            mine.append(("unprobed", ""))
            continue
        c = "".join(itos[i] for i in greedy(model, [stoi[ch] for ch in prompt], len(a) + 1, stop=0))
        s = c[1:] if c.startswith(" ") else c
        mine.append(("recalled" if s.startswith(a) else "missed", c))
    theirs = [tuple(line.split("\t", 1)) for line in open(compare, encoding="utf-8").read().split("\n") if line]
    if len(theirs) != len(mine):
        sys.exit(f"course_finetune: {compare} has {len(theirs)} lines for {len(mine)} questions")
    status = sum(m[0] == t[0] for m, t in zip(mine, theirs))
    same = sum(m == t for m, t in zip(mine, theirs))
    print(f"recall check: {sum(m[0] == 'recalled' for m in mine)} recalled of "
          f"{sum(m[0] != 'unprobed' for m in mine)} probed here; against {compare}: the same status for "
          f"{status} of {len(mine)} questions, the same completion for {same}", flush=True)


def finetune(model, stoi, pairs, pretrain_docs, epochs, lr, batch, seed):
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(parameter_groups(model, 0.1, "course"), lr=lr, betas=(0.9, 0.95))
    warmup, final = 512 * 20, 200 * pretrain_docs * BLOCK
    rows = []
    for q, a in pairs:
        s = q + MASK + a + MASK
        s += PAD * (BLOCK - len(s))
        y = PAD * (len(q) - 1) + s[len(q):]
        rows.append(([stoi[c] for c in s[:-1]], [stoi[c] for c in y]))
    model.train()
    tokens, step, t0 = 0, 0, time.time()
    for epoch in range(epochs):
        losses = []
        for first in range(0, len(rows), batch):
            x = torch.tensor([r[0] for r in rows[first:first + batch]])
            y = torch.tensor([r[1] for r in rows[first:first + batch]])
            logits = logits_of(model, x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            tokens += y.numel()
            mult = tokens / warmup if tokens < warmup else max(
                0.1, 0.5 * (1.0 + math.cos(math.pi * (tokens - warmup) / max(1, final - warmup))))
            for g in opt.param_groups:
                g["lr"] = lr * mult
            step += 1
            losses.append(loss.item())
        print(f"finetune epoch {epoch + 1}: mean loss {sum(losses) / len(losses):.4f}, last {losses[-1]:.4f}, "
              f"lr {opt.param_groups[0]['lr']:.3g}, {time.time() - t0:.0f} s", flush=True)


def evaluate(model, stoi, itos, pairs):
    model.eval()
    preds = []
    for q, _ in pairs:
        out = greedy(model, [stoi[c] for c in q + MASK], 32, stop=1)  # the text up to the next ⁇
        completion = q + MASK + "".join(itos[i] for i in out)
        preds.append(completion.split(MASK)[1])
    return preds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reading-params", required=True, help="a checkpoint of birthplace pretrain")
    ap.add_argument("--pretrain-corpus", default="data/wiki.txt")
    ap.add_argument("--finetune-corpus", default="data/birth_places_train.tsv")
    ap.add_argument("--eval-corpus", default="data/birth_dev.tsv")
    ap.add_argument("--compare-recall", help="birthplace recall's --outputs-path for the same checkpoint")
    ap.add_argument("--outputs-path", help="the predictions, one per line (must not exist)")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ascii", action="store_true", help="strip the QA lines to ASCII, as the course does")
    a = ap.parse_args()
    if a.outputs_path and os.path.exists(a.outputs_path):
        sys.exit(f"course_finetune: {a.outputs_path} exists; choose another --outputs-path")
    torch.set_num_threads(a.threads)
    model, itos, _ = model_from(a.reading_params, a.dropout)
    stoi = {c: i for i, c in enumerate(itos)}
    docs = [line for line in open(a.pretrain_corpus, encoding="utf-8").read().split("\n") if line]
    dev = read_pairs(a.eval_corpus, False)
    print(f"course_finetune: {a.reading_params}, torch {torch.__version__}, {a.threads} threads", flush=True)
    if a.compare_recall:
        check_recall(model, stoi, itos, docs, dev, a.compare_recall)
    finetune(model, stoi, read_pairs(a.finetune_corpus, a.ascii), len(docs), a.epochs, a.lr, a.batch, a.seed)
    preds = evaluate(model, stoi, itos, dev)
    correct = sum(p == ans for p, (_, ans) in zip(preds, dev))
    print(f"Correct: {correct} out of {len(dev)}: {100.0 * correct / len(dev):.2f}%")
    if a.outputs_path:
        with open(a.outputs_path + ".part", "w", encoding="utf-8") as f:
            f.write("".join(p + "\n" for p in preds))
        os.replace(a.outputs_path + ".part", a.outputs_path)


if __name__ == "__main__":
    main()
