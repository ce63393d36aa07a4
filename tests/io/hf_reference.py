#!/usr/bin/env python3
"""Reference models and outputs for tests/io/test_hf.cpp: small random GPT-2 and Llama models as
the transformers package saves them, and what transformers computes with them.

Writes, under tests/io/data/hf/:
  gpt2/            GPT2LMHeadModel (3 layers, 5 heads of 12, vocab 300, 64 positions, tied head),
                   save_pretrained: config.json + model.safetensors (float32)
  llama/           LlamaForCausalLM (3 layers, 6 heads of 10 sharing 2 key/value heads,
                   intermediate 136, vocab 300, rope_theta 500000, untied head), float32
  llama_bf16/      the same Llama saved in bfloat16 and in shards of at most 200 kB
                   (model.safetensors.index.json + model-0000k-of-0000n.safetensors)
  reference.txt    in tests/attention/torch_reference.py's format, first line
                   "attn-hf-reference 1": for each model, ids [2, 12] (fixed token ids), the
                   logits [2, 12, 300] transformers computes in float32, a prompt [1, 5] and its
                   greedy continuation of 10 tokens (generate, do_sample=False), token ids as
                   float64 values; and a batch of three prompts of 5, 3 and 7 tokens, left-padded
                   (the attention mask 0 over the padding; -1 marks it in "<model>.batch"),
                   with transformers' greedy continuations of 10 tokens ("<model>.batch_greedy"). llama_bf16's logits are those of the bfloat16 weights widened
                   to float32 (what attn computes after converting them on load).

The weights are random (seeded), with initializer_range 0.2 so that every layer moves the logits
visibly; the biases GPT-2 initialises to 0 are drawn too, so that a missed bias shows.

Regenerate (transformers and torch from scripts/oracle-venv; never run by the build or CI):
    scripts/oracle-venv
    build/oracle-venv/bin/python tests/io/hf_reference.py
"""

import os
import shutil
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "attention"))
from torch_reference import write_reference  # noqa: E402  the same file format

FORMAT = "attn-hf-reference 1"
OUT = os.path.join(HERE, "data", "hf")
VOCAB = 300


def randomise(model, seed, std):
    """Every parameter ~ N(0, std^2), norms' gains around 1: a model whose every weight counts."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32) * std
            if "ln_" in name or "norm" in name:
                p.copy_((1.0 + noise) if name.endswith("weight") else noise)
            else:
                p.copy_(noise)


def save(model, name, **kwargs):
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    model.save_pretrained(path, safe_serialization=True, **kwargs)
    # What attn reads: config.json and the weights; generation_config.json is transformers' own.
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(path, extra)):
            os.remove(os.path.join(path, extra))
    print("saved %s" % os.path.relpath(path), file=sys.stderr)


def outputs(model, name, ids, prompt, batch):
    model.eval()
    with torch.no_grad():
        logits = model(ids).logits.double()
        continuation = model.generate(prompt, max_new_tokens=10, do_sample=False,
                                      pad_token_id=0, eos_token_id=None,
                                      attention_mask=torch.ones_like(prompt))
        longest = max(len(p) for p in batch)
        padded = torch.zeros(len(batch), longest, dtype=torch.long)
        mask = torch.zeros(len(batch), longest, dtype=torch.long)
        for b, p in enumerate(batch):
            padded[b, longest - len(p):] = p
            mask[b, longest - len(p):] = 1
        batched = model.generate(padded, attention_mask=mask, max_new_tokens=10, do_sample=False,
                                 pad_token_id=0, eos_token_id=None)
    marked = padded.double().masked_fill(mask == 0, -1.0)
    return [(name + ".ids", ids.double()), (name + ".logits", logits),
            (name + ".prompt", prompt.double()),
            (name + ".greedy", continuation[:, prompt.shape[1]:].double()),
            (name + ".batch", marked), (name + ".batch_greedy", batched[:, longest:].double())]


def main():
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, VOCAB, (2, 12), generator=gen)
    prompt = torch.randint(0, VOCAB, (1, 5), generator=gen)
    batch = [torch.randint(0, VOCAB, (n,), generator=gen) for n in (5, 3, 7)]
    tensors = []

    gpt2 = GPT2LMHeadModel(GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=60, n_layer=3, n_head=5,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=1e-5, initializer_range=0.2, bos_token_id=None, eos_token_id=None,
        tie_word_embeddings=True))
    randomise(gpt2, 1, 0.2)
    gpt2.tie_weights()
    save(gpt2, "gpt2")
    tensors += outputs(gpt2, "gpt2", ids, prompt, batch)

    llama_config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=60, intermediate_size=136, num_hidden_layers=3,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-6, rope_theta=500000.0, attention_bias=False, mlp_bias=False,
        hidden_act="silu", tie_word_embeddings=False, initializer_range=0.2,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    llama = LlamaForCausalLM(llama_config)
    randomise(llama, 2, 0.2)
    save(llama, "llama")
    tensors += outputs(llama, "llama", ids, prompt, batch)

    llama_bf16 = LlamaForCausalLM(llama_config).to(torch.bfloat16)
    llama_bf16.load_state_dict({k: v.to(torch.bfloat16) for k, v in llama.state_dict().items()})
    save(llama_bf16, "llama_bf16", max_shard_size="200kB")
    widened = LlamaForCausalLM(llama_config)
    widened.load_state_dict({k: v.float() for k, v in llama_bf16.state_dict().items()})
    tensors += outputs(widened, "llama_bf16", ids, prompt, batch)

    write_reference(os.path.join(OUT, "reference.txt"), FORMAT, "tests/io/hf_reference.py",
                    tensors)


if __name__ == "__main__":
    main()
