#!/usr/bin/env python3
"""The transformers side of benchmarks/hf_generate.cpp: tokens per second of greedy generation
with the key/value cache (transformers' default dynamic cache, or its static cache with
--cache static) from a model of a config.json with random weights, float32 on the CPU.

    build/oracle-venv/bin/python benchmarks/hf_generate.py --model benchmarks/hf_shapes/gpt2-124m \
        --threads 2 --prompt 16 --tokens 128 [--cache dynamic|static]

One untimed call, then --reps timed calls (default 3); prints the median's tokens/s. Needs torch
and transformers (scripts/oracle-venv); attn does not depend on them.
"""
import argparse
import statistics
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--cache", choices=["dynamic", "static"], default="dynamic")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_config(config).eval()
    prompt = torch.tensor([[(i + 1) % config.vocab_size for i in range(a.prompt)]])
    kwargs = dict(max_new_tokens=a.tokens, min_new_tokens=a.tokens, do_sample=False,
                  pad_token_id=0, attention_mask=torch.ones_like(prompt))
    if a.cache == "static":
        kwargs["cache_implementation"] = "static"
    with torch.no_grad():
        model.generate(prompt, **kwargs)
        seconds = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            out = model.generate(prompt, **kwargs)
            seconds.append(time.perf_counter() - t0)
            assert out.shape[1] == a.prompt + a.tokens
    median = statistics.median(seconds)
    params = sum(t.numel() for t in model.parameters())
    print("transformers %s torch %s %s (%s, %d parameters), %d threads, %s cache, prompt %d, "
          "%d new tokens: %.1f tokens/s (%.3f s)" % (
              transformers.__version__, torch.__version__.split("+")[0], a.model,
              config.model_type, params, a.threads, a.cache, a.prompt, a.tokens,
              a.tokens / median, median))


if __name__ == "__main__":
    main()
