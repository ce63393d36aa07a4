#!/usr/bin/env bash
# The runs behind the "Learned biases and sinks" section of docs/experiments/positional_scores.md:
# char_gpt at the demo's settings (as positional_scores.sh), three seeds each of
#   rotary         rotary positions (RoPE) in the score, no position embedding
#   alibi          ALiBi with the paper's fixed slopes, no position embedding
#   t5bias         T5's learned relative-position buckets (32, one direction), no embedding
#   alibi-learned  ALiBi whose slopes are parameters (the paper's at the start), no embedding
#   sink           the standard attention with a learned sink logit per head, learned positions
# written to runs/learned_biases/ (resumable) and summarised into
# docs/experiments/positional_scores/learned/. The variables of positional_scores.sh apply.
#
#   examples/char_gpt/experiments/learned_biases.sh          # 15 runs, 2 at a time
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
VARIANTS=${VARIANTS:-"rotary alibi t5bias alibi-learned sink"} \
  OUT=${OUT:-runs/learned_biases} DEST=${DEST:-docs/experiments/positional_scores/learned} \
  TITLE=${TITLE:-"char_gpt at the demo budget: learned biases and sinks"} \
  exec bash examples/char_gpt/experiments/positional_scores.sh
