#!/usr/bin/env python3
"""Checks that a model char_gpt trained and exported (--export-hf) is, in transformers, the model
attn trained: transformers' from_pretrained loads the export and its tokenizer files with no code
of attn's, and its greedy continuation of a prompt equals char_gpt's own (`char_gpt sample
--temperature 0`) token for token (within the model's context: block size minus the prompt).

    examples/char_gpt/check_export.py CHAR_GPT RUN EXPORT [--prompt TEXT] [--tokens N]

CHAR_GPT is the program, RUN the run's directory (its checkpoint.safetensors), EXPORT the
--export-hf directory. The prompt is encoded by the exported tokenizer (AutoTokenizer) and the
continuation decoded by it, so the tokenizer files are checked with the model. Prints a report;
exit 0 when they agree, 1 when not. Needs transformers and torch (scripts/oracle-venv); run by
hand, never by the build or CI.
"""

import argparse
import os
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("char_gpt")
    p.add_argument("run")
    p.add_argument("export")
    p.add_argument("--prompt", default="ROMEO:\n")
    p.add_argument("--tokens", type=int, default=200)
    a = p.parse_args()
    checkpoint = os.path.join(a.run, "checkpoint.safetensors")
    tokenizer = AutoTokenizer.from_pretrained(a.export)
    ids = tokenizer(a.prompt)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(a.export)
    model.eval()
    # The model's context: the greedy continuation stays within it (neither side restarts).
    limit = model.config.to_dict().get("n_positions") or model.config.max_position_embeddings
    tokens = min(a.tokens, limit - len(ids))
    # attn's greedy continuation (the program prints the prompt, the new text and a newline).
    out = subprocess.run([a.char_gpt, "sample", checkpoint, "--prompt", a.prompt, "--tokens",
                          str(tokens), "--temperature", "0", "--threads", "1"],
                         check=True, capture_output=True, text=True).stdout
    assert out.startswith(a.prompt) and out.endswith("\n"), out
    attn_text = out[len(a.prompt):-1]
    with torch.no_grad():
        generated = model.generate(torch.tensor([ids]), max_new_tokens=tokens, do_sample=False,
                                   pad_token_id=0, eos_token_id=None,
                                   attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    hf_text = tokenizer.decode(generated[0, len(ids):].tolist())
    same = attn_text == hf_text
    print("transformers %s: %s and %s loaded from %s (%s, vocabulary %d)" % (
        __import__("transformers").__version__, type(model).__name__, type(tokenizer).__name__,
        a.export, model.config.model_type, len(tokenizer)))
    print("prompt %r (%d tokens), %d greedy tokens" % (a.prompt, len(ids), tokens))
    print("attn:         %r" % attn_text)
    print("transformers: %r" % hf_text)
    print("the same: %s" % ("yes" if same else "NO"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
