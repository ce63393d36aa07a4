#!/usr/bin/env bash
# tests/robustness/robustness.sh: the example programs under bad input and interruption, as a
# table of cases. Each case runs one command and asserts its exit status (a crash, e.g. 134 for
# an abort with a core dump, never matches), that an error is one line on stderr naming the
# problem (a regular expression), and that the checkpoints, logs and plots of earlier runs
# (guard/) are byte for byte what they were, with nothing added. Then interruptions: Ctrl-C
# (saves, exit 130, resumable), a second Ctrl-C (quits at once), kill -9 (the checkpoint stays
# loadable; stale temp files are removed at the next start, live ones kept), a log longer than its
# checkpoint (cut back on resume).
# Does not build anything (ctest runs it after the examples are built) nor test training quality.
#
# usage: robustness.sh DATA_DIR NAME=PROGRAM...   (NAME: char_gpt, birthplace, exercises, ...)
set -u
export LC_ALL=C
data=$(realpath "$1")
tests=$(realpath "$(dirname "${BASH_SOURCE[0]}")")
shift
declare -A bin
for kv in "$@"; do bin[${kv%%=*}]=$(realpath "${kv#*=}"); done

work=$(mktemp -d "${TMPDIR:-/tmp}/attn_robustness.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
ulimit -c 0  # a crash must show in the exit status, not leave a core file in the tree

failures=0
cases=0
fail() {
  echo "FAIL [$cases] $*" >&2
  failures=$((failures + 1))
}

# ---- fixtures: tiny data and the runs that every case must leave untouched ---------------------

head -c 20000 "$data/tinyshakespeare.txt" > small.txt
head -c 2000 small.txt > tiny.txt
tail -c 20000 "$data/tinyshakespeare.txt" > other.txt
: > empty.txt
printf 'ab\xffcd\n' > bad_utf8.txt
(head -60 "$data/wiki.txt"; grep -m1 '?' "$data/wiki.txt") > wiki.txt  # '?' for the questions
head -20 "$data/birth_places_train.tsv" > train.tsv
head -20 wiki.txt > some_wiki.txt  # a subset of the people, vocabulary from wiki.txt
head -10 "$data/birth_dev.tsv" > dev.tsv
printf 'Where was Nobody born?\n' > no_tab.tsv

G=${bin[char_gpt]}
B=${bin[birthplace]}
tiny_gpt=(--data small.txt --layers 1 --heads 1 --embd 8 --block 8 --batch 2 --eval-batches 1
  --sample-tokens 10 --threads 1)
tiny_bp=(--layers 1 --heads 1 --embd 8 --block 128 --batch 4 --threads 1 --pretrain-corpus wiki.txt)
ft=(--threads 1 --pretrain-corpus wiki.txt --finetune-corpus train.tsv)

mkdir -p guard
quiet() { "$@" > /dev/null 2>&1 || { echo "fixture failed: $*" >&2; exit 1; }; }
quiet "$G" "${tiny_gpt[@]}" --steps 8 --eval-every 2 --stop-at 4 --out guard/c  # resumable
quiet "$G" "${tiny_gpt[@]}" --steps 4 --eval-every 2 --out guard/done          # finished
quiet "$B" pretrain "${tiny_bp[@]}" --epochs 0.5 --writing-params guard/bp/pre.params
quiet "$B" finetune "${ft[@]}" --reading-params guard/bp/pre.params \
  --writing-params guard/bp/ft.params --epochs 2 --batch 4 --stop-at 3
# Damaged copies of a checkpoint (outside guard/): a flipped bit in the last tensor's data; the
# seed metadata "1" turned into "a" (same length, so the header stays well-formed); a cut file.
ck=guard/c/checkpoint.safetensors
cp "$ck" corrupt.safetensors
size=$(stat -c %s corrupt.safetensors)
last=$(od -An -tu1 -j $((size - 1)) -N1 corrupt.safetensors | tr -d ' ')
printf "\\$(printf %03o $((last ^ 1)))" | dd of=corrupt.safetensors bs=1 seek=$((size - 1)) \
  conv=notrunc status=none
perl -0777 -pe 's/"train\.seed":"1"/"train.seed":"a"/' "$ck" > seed_a.safetensors
cmp -s "$ck" seed_a.safetensors && { echo "fixture: train.seed not found" >&2; exit 1; }
# The same change in a file without the header's checksum (as older attn wrote them): the value
# itself is then what is refused.
python3 - seed_a.safetensors seed_a_old.safetensors <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
del header["__metadata__"]["crc32:__metadata__"]
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * ((8 - len(text) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
PY
# A config of 2^31 x 2^31 weights, its checksums valid (the header's left out, as older attn
# wrote files): refused by the config's bounds before anything is allocated, not a crash.
python3 - "$ck" huge_config.safetensors <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
meta = header["__metadata__"]
del meta["crc32:__metadata__"]
meta["config.vocab_size"] = meta["config.d_model"] = "2147483648"
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * ((8 - len(text) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
PY
head -c 500 "$ck" > cut.safetensors

# A run's lock file (.lock, *.lock) holds the pid of its last holder, which every case that
# takes the lock rewrites: its name is in the listing (nothing added), its content is not hashed.
snapshot() { (cd guard && find . -type f ! -name '*.lock' -print0 | sort -z | xargs -0 sha256sum; find . | sort); }
before=$(snapshot)

# expect STATUS REGEX -- COMMAND...: the status, and stderr is exactly one line matching REGEX
# ("error: ..."); with STATUS 0, REGEX must match stdout instead. guard/ must be unchanged.
expect() {
  local status=$1 regex=$2
  shift 3
  cases=$((cases + 1))
  "$@" > out.txt 2> err.txt
  local rc=$?
  local what="$* -> $rc"
  [ "$rc" = "$status" ] || fail "$what: exit status $rc, expected $status; stderr: $(cat err.txt)"
  if [ "$status" = 0 ]; then
    grep -Eq -- "$regex" out.txt || fail "$what: stdout does not match /$regex/: $(cat out.txt)"
  else
    [ "$(wc -l < err.txt)" = 1 ] || fail "$what: stderr is not one line: $(cat err.txt)"
    grep -Eq -- "^error: .*$regex" err.txt || fail "$what: stderr does not match /$regex/: $(cat err.txt)"
  fi
  grep -q -e 'terminate called' -e 'core dumped' -e 'Aborted' err.txt && fail "$what: crashed"
  [ "$(snapshot)" = "$before" ] || fail "$what: guard/ changed"
}

# ---- char_gpt ------------------------------------------------------------------------------

r=(--resume guard/c/checkpoint.safetensors --data small.txt --threads 1)
expect 1 "earlier run's files are in the way \(guard/c/checkpoint.safetensors, guard/c/log.csv\).*--overwrite" -- "$G" "${tiny_gpt[@]}" --out guard/c
expect 1 "--prompt: .*'€' \(U\+20AC\) .* is not in the vocabulary" -- "$G" "${tiny_gpt[@]}" --out s/p1 --prompt "€"
expect 1 "--prompt is empty" -- "$G" "${tiny_gpt[@]}" --out s/p2 --prompt ""
expect 2 "--temperature: 'nan' is not a finite number" -- "$G" "${tiny_gpt[@]}" --out s/p3 --temperature nan
expect 2 "--grad-clip: 0 is outside \(0, " -- "$G" "${tiny_gpt[@]}" --out s/p4 --grad-clip 0
expect 2 "--data-fraction: 'nan' is not a finite number" -- "$G" "${tiny_gpt[@]}" --out s/p5 --data-fraction nan
expect 2 "--seed: '-1' is not a non-negative integer" -- "$G" "${tiny_gpt[@]}" --out s/p6 --seed -1
expect 2 "--lr: 11 is outside \[0, 10\]" -- "$G" "${tiny_gpt[@]}" --out s/p7 --lr 11
expect 2 "--min-lr 0.01 is above --lr 0.002: the cosine falls from --lr to --min-lr" -- "$G" "${tiny_gpt[@]}" --out s/p10 --min-lr 0.01
expect 2 "--attention: 'nope' is not one of additive, alibi" -- "$G" "${tiny_gpt[@]}" --out s/p8 --attention nope
expect 2 "--arch gpt2 has --attention standard, not euclidean" -- "$G" "${tiny_gpt[@]}" --out s/p11 --arch gpt2 --attention euclidean
expect 2 "--arch llama has --positions none, not learned" -- "$G" "${tiny_gpt[@]}" --out s/p12 --arch llama --positions learned
expect 1 "--export-hf writes a gpt2 or llama model .* this run's is char_gpt" -- "$G" "${tiny_gpt[@]}" --out s/p13 --export-hf s/p13hf
mkdir -p s/p14hf
expect 1 "--export-hf s/p14hf exists: choose another directory, or pass --overwrite" -- "$G" "${tiny_gpt[@]}" --out s/p14 --arch gpt2 --export-hf s/p14hf
quiet "$G" "${tiny_gpt[@]}" --out s/p15 --arch llama --export-hf s/p15hf
grep -q '"model_type": "llama"' s/p15hf/config.json && [ -s s/p15hf/model.safetensors ] ||
  fail "--arch llama --export-hf: no Llama model in s/p15hf"
# --tokenizer bpe: a vocabulary trained on --data (or read from --tokenizer-file), kept in the
# checkpoint (resume, sample) and written beside --export-hf for transformers.
bpe=(--tokenizer bpe --bpe-vocab 300 --arch gpt2 --steps 4 --eval-every 2)
expect 2 "--bpe-vocab is an option of --tokenizer bpe, not char" -- "$G" "${tiny_gpt[@]}" --out s/t1 --bpe-vocab 300
expect 2 "--bpe-vocab: 255 is outside \[256, " -- "$G" "${tiny_gpt[@]}" --out s/t2 --tokenizer bpe --bpe-vocab 255
expect 2 "--bpe-vocab excludes --tokenizer-file" -- "$G" "${tiny_gpt[@]}" --out s/t3 --tokenizer-file small.txt --bpe-vocab 300
printf '{"model": {"type": "WordPiece"}}' > wordpiece.json
expect 1 "wordpiece.json: model.type is \"WordPiece\"; attn reads byte-level BPE only" -- "$G" "${tiny_gpt[@]}" --out s/t3 --tokenizer-file wordpiece.json
quiet "$G" "${tiny_gpt[@]}" "${bpe[@]}" --out s/t4 --stop-at 2
expect 1 "--tokenizer char conflicts with s/t4/checkpoint.safetensors, a model of --tokenizer bpe" -- "$G" --resume s/t4/checkpoint.safetensors --tokenizer char --threads 1
expect 1 "--bpe-vocab conflicts with --resume s/t4/checkpoint.safetensors: the tokenizer is the checkpoint's" -- "$G" --resume s/t4/checkpoint.safetensors --bpe-vocab 300 --threads 1
quiet "$G" --resume s/t4/checkpoint.safetensors --threads 1 --export-hf s/t4hf
grep -q '"type": "ByteLevel"' s/t4hf/tokenizer.json && [ -s s/t4hf/merges.txt ] &&
  grep -q PreTrainedTokenizerFast s/t4hf/tokenizer_config.json ||
  fail "--tokenizer bpe --export-hf: no BPE tokenizer files in s/t4hf"
expect 0 "^Thou" -- "$G" sample s/t4/checkpoint.safetensors --prompt "Thou" --tokens 5 --threads 1
"$G" "${tiny_gpt[@]}" --steps 2 --tokenizer-file s/t4hf/tokenizer.json --out s/t5 2>&1 |
  grep -q "^char_gpt: .*vocab 300 (bpe)" || fail "--tokenizer-file: the run does not use the file's 300 tokens"
grep -q '"type": "Fuse"' s/p15hf/tokenizer.json || fail "--export-hf: no character tokenizer.json in s/p15hf"
expect 2 "--seed: '18446744073709551616' is larger than 2\^64 - 1" -- "$G" "${tiny_gpt[@]}" --out s/p9 --seed 18446744073709551616
expect 2 "--seed: '12345678901234567890123' is larger than 2\^64 - 1" -- "$G" sample guard/c/checkpoint.safetensors --seed 12345678901234567890123
expect 2 "The following argument was not expected: --bogus" -- "$G" --bogus
expect 2 "--data: File does not exist: missing.txt" -- "$G" --data missing.txt
expect 1 "empty.txt is empty" -- "$G" --data empty.txt --out s/d1
expect 1 "bad_utf8.txt: .*invalid UTF-8 at byte 2" -- "$G" --data bad_utf8.txt --out s/d2
expect 1 "the validation split of tiny.txt has 200 characters, fewer than the block \(256\)" -- "$G" --data tiny.txt --block 256 --out s/d3
expect 1 "'/dev/zero' is a character device, not a regular file" -- "$G" --data /dev/zero --out s/d4
mkfifo fifo  # no writer: reading it the usual way blocks forever
expect 1 "'fifo' is a FIFO or pipe, not a regular file" -- timeout 20 "$G" --data fifo --out s/d6
expect 1 "'fifo' is a FIFO or pipe, not a regular file" -- timeout 20 "$G" sample fifo
expect 1 "'/dev/zero' is a character device, not a regular file" -- timeout 20 "$G" sample /dev/zero
expect 1 "'fifo' is a FIFO or pipe, not a regular file" -- timeout 20 "$B" evaluate --reading-params fifo
expect 1 "--heads 3 does not divide --embd 8" -- "$G" --data small.txt --embd 8 --heads 3 --out s/d5
expect 1 "this run needs about .* of memory .*activations of one step.*more than the .* available" -- "$G" --data "$data/tinyshakespeare.txt" --layers 1 --heads 1 --embd 8 --block 2048 --batch 4096 --out s/m1
expect 1 "this run needs about .* GB of memory \(parameters and gradients .*more than the .* available" -- "$G" --data small.txt --layers 64 --heads 64 --embd 8192 --out s/m2
expect 1 "--out guard/c/log.csv: guard/c/log.csv is a file, not a directory" -- "$G" "${tiny_gpt[@]}" --out guard/c/log.csv
expect 1 "--lr 0.5 conflicts with the run in guard/c/checkpoint.safetensors, which has --lr 0.002" -- "$G" "${r[@]}" --lr 0.5
expect 1 "--embd 16 conflicts with the run in .*, which has --embd 8" -- "$G" "${r[@]}" --embd 16
expect 1 "--steps 99 conflicts with .*, which has --steps 8" -- "$G" "${r[@]}" --steps 99
expect 1 "--dropout 0.2 conflicts with .*, which has --dropout 0" -- "$G" "${r[@]}" --dropout 0.2
expect 1 "--vocab-from conflicts with --resume" -- "$G" "${r[@]}" --vocab-from small.txt
expect 1 "--out s/x conflicts with --resume .*: a resumed run continues in .*guard/c" -- "$G" "${r[@]}" --out s/x
expect 1 "--data other.txt is not the text the run in .* was trained on" -- "$G" --resume guard/c/checkpoint.safetensors --data other.txt
expect 1 "--stop-at 2 is not after step 4" -- "$G" "${r[@]}" --stop-at 2
expect 1 "guard/c/checkpoint.safetensors was trained with --attention standard, not euclidean" -- "$G" "${r[@]}" --attention euclidean
expect 0 "is a finished run \(step 4 of 4\): nothing to do, nothing changed" -- "$G" --resume guard/done/checkpoint.safetensors --data small.txt
expect 1 "corrupt.safetensors: tensor \".*\" is corrupt: its data has CRC-32" -- "$G" --resume corrupt.safetensors --data small.txt
expect 1 "seed_a.safetensors: the header is corrupt \(a setting, the vocabulary or a tensor's place changed\)" -- "$G" --resume seed_a.safetensors --data small.txt
expect 1 "seed_a_old.safetensors: metadata 'train.seed' = 'a' is not a non-negative integer" -- "$G" --resume seed_a_old.safetensors --data small.txt
expect 1 "huge_config.safetensors: metadata 'config.vocab_size' = 2147483648 is outside \[1, 16777216\]" -- "$G" sample huge_config.safetensors
expect 1 "cut.safetensors: " -- "$G" --resume cut.safetensors --data small.txt
expect 2 "--overwrite excludes --resume|--resume excludes --overwrite" -- "$G" "${r[@]}" --overwrite
expect 1 "--init-from guard/c/checkpoint.safetensors is the checkpoint this run writes" -- "$G" "${tiny_gpt[@]}" --init-from guard/c/checkpoint.safetensors --out guard/c --overwrite
expect 1 "--layers 2 conflicts with the run in guard/c/checkpoint.safetensors, which has --layers 1: a run from a checkpoint's weights keeps its model" -- "$G" --data small.txt --init-from guard/c/checkpoint.safetensors --layers 2 --out s/i1
expect 1 "--prompt: .*'€'.*not in the vocabulary" -- "$G" sample guard/c/checkpoint.safetensors --prompt "€"
expect 1 "--prompt is empty" -- "$G" sample guard/c/checkpoint.safetensors --prompt ""
expect 1 "small.txt: header length .* exceeds the limit" -- "$G" sample small.txt
expect 1 "corrupt.safetensors: tensor \".*\" is corrupt" -- "$G" sample corrupt.safetensors
expect 2 "--temperature: 'inf' is not a finite number" -- "$G" sample guard/c/checkpoint.safetensors --temperature inf

# ---- birthplace ----------------------------------------------------------------------------

rb=(--resume guard/bp/ft.params "${ft[@]}")
expect 1 "earlier run's files are in the way \(guard/bp/pre.params, guard/bp/pre.params.log.csv\); continue that run with .birthplace pretrain --resume guard/bp/pre.params" -- "$B" pretrain "${tiny_bp[@]}" --writing-params guard/bp/pre.params
expect 1 "--writing-params guard/bp/pre.params is the checkpoint --reading-params reads" -- "$B" finetune "${ft[@]}" --reading-params guard/bp/pre.params --writing-params guard/bp/pre.params --overwrite
expect 1 "--writing-params guard is a directory" -- "$B" pretrain "${tiny_bp[@]}" --writing-params guard --overwrite
expect 1 "--outputs-path nodir/x: the directory nodir does not exist" -- "$B" evaluate --reading-params guard/bp/ft.params --eval-corpus dev.tsv --outputs-path nodir/x
expect 1 "--outputs-path guard is a directory" -- "$B" london --pretrain-corpus wiki.txt --eval-corpus dev.tsv --outputs-path guard
expect 1 "--lr 0.1 conflicts with the run in guard/bp/ft.params, which has --lr 0.0006" -- "$B" finetune "${rb[@]}" --lr 0.1
expect 1 "--embd 16 conflicts with the run in guard/bp/ft.params, which has --embd 8" -- "$B" finetune "${rb[@]}" --embd 16
expect 1 "--schedule single conflicts with .*, which has --schedule mingpt" -- "$B" finetune "${rb[@]}" --schedule single
expect 1 "--budget-minutes conflicts with --resume" -- "$B" finetune "${rb[@]}" --budget-minutes 1
expect 1 "--writing-params s/y conflicts with --resume guard/bp/ft.params" -- "$B" finetune "${rb[@]}" --writing-params s/y
expect 1 "guard/bp/ft.params is a finetune run; resume it with .birthplace finetune --resume" -- "$B" pretrain --resume guard/bp/ft.params "${tiny_bp[@]:10}"
expect 1 "--stop-at 2 is not after step 3" -- "$B" finetune "${rb[@]}" --stop-at 2
expect 0 "is a finished pretrain run .*nothing to do, nothing changed" -- "$B" pretrain --resume guard/bp/pre.params --pretrain-corpus wiki.txt --threads 1
expect 2 "--grad-clip: 0 is outside \(0, " -- "$B" pretrain "${tiny_bp[@]}" --writing-params s/b1 --grad-clip 0
# --variant takes the examples' one attention registry (char_gpt's names, "vanilla" an alias).
expect 2 "--variant: 'nope' is not one of " -- "$B" pretrain "${tiny_bp[@]}" --writing-params s/b2 --variant nope
expect 0 "pretrain: .* steps" -- "$B" pretrain "${tiny_bp[@]}" --writing-params s/b3 --variant rotary --epochs 0.2
# Every option of a stage is a row of its settings table: its range, and what --resume does.
expect 2 "--beta2: 1 is outside \\[0, 0.999999\\]" -- "$B" pretrain "${tiny_bp[@]}" --writing-params s/b2 --beta2 1
expect 1 "--dropout 0.3 conflicts with the run in guard/bp/ft.params, which has --dropout 0.1: .*the model comes from the checkpoint" -- "$B" finetune "${rb[@]}" --dropout 0.3
expect 1 "guard/bp/ft.params holds a vanilla model, not synthesizer" -- "$B" evaluate --reading-params guard/bp/ft.params --eval-corpus dev.tsv --variant synthesizer
expect 0 "Correct: " -- "$B" evaluate --reading-params guard/bp/ft.params --eval-corpus dev.tsv --variant standard --threads 1
expect 2 "--seed: '-1' is not a non-negative integer" -- "$B" pretrain "${tiny_bp[@]}" --writing-params s/b2 --seed -1
expect 2 "--epochs: 'nan' is not a finite number" -- "$B" pretrain "${tiny_bp[@]}" --writing-params s/b3 --epochs nan
expect 2 "A subcommand is required" -- "$B"
expect 1 "give --writing-params \(or --resume\)" -- "$B" pretrain "${tiny_bp[@]}"
expect 1 "empty.txt is empty" -- "$B" pretrain --pretrain-corpus empty.txt --writing-params s/b4
expect 1 "bad_utf8.txt: .*invalid UTF-8" -- "$B" london --pretrain-corpus wiki.txt --eval-corpus bad_utf8.txt
expect 1 "no_tab.tsv:1: " -- "$B" finetune "${ft[@]:0:4}" --finetune-corpus no_tab.tsv --writing-params s/b5
expect 1 "this run needs about .* of memory.*more than the .* available" -- "$B" pretrain --pretrain-corpus wiki.txt --layers 64 --embd 8192 --writing-params s/b6
expect 1 "this run needs about .* of memory.*activations of one step.*more than the .* available" -- "$B" pretrain --pretrain-corpus wiki.txt --layers 1 --heads 1 --embd 8 --block 2048 --batch 65536 --writing-params s/b7
expect 1 "--vocabulary-corpus is for new models; guard/bp/pre.params brings its own vocabulary" -- "$B" finetune "${ft[@]}" --reading-params guard/bp/pre.params --vocabulary-corpus wiki.txt --writing-params s/b8
expect 1 "wiki.txt: .*is not in the vocabulary" -- "$B" pretrain "${tiny_bp[@]}" --vocabulary-corpus tiny.txt --writing-params s/b9
expect 0 "Correct: " -- "$B" london --pretrain-corpus some_wiki.txt --vocabulary-corpus wiki.txt --eval-corpus dev.tsv
expect 1 "guard/c/checkpoint.safetensors: not a birthplace checkpoint" -- "$B" evaluate --reading-params guard/c/checkpoint.safetensors
expect 1 "corrupt.safetensors: tensor \".*\" is corrupt" -- "$B" evaluate --reading-params corrupt.safetensors
# No output may be one of the run's inputs, whatever the spelling of its path.
expect 1 "--outputs-path ./dev.tsv is the file --eval-corpus reads \(dev.tsv\)" -- "$B" evaluate --reading-params guard/bp/ft.params --eval-corpus dev.tsv --outputs-path ./dev.tsv
expect 1 "--outputs-path guard/bp/../bp/ft.params is the file --reading-params reads" -- "$B" evaluate --reading-params guard/bp/ft.params --eval-corpus dev.tsv --outputs-path guard/bp/../bp/ft.params
expect 1 "--outputs-path dev.tsv is the file --eval-corpus reads" -- "$B" london --pretrain-corpus wiki.txt --eval-corpus dev.tsv --outputs-path dev.tsv
expect 1 "--writing-params wiki.txt is the file --pretrain-corpus reads" -- "$B" pretrain "${tiny_bp[@]}" --writing-params wiki.txt --overwrite
expect 1 "--writing-params train.tsv is the file --finetune-corpus reads" -- "$B" finetune "${ft[@]}" --writing-params train.tsv --overwrite
# recall: the questions' facts in the pretraining format, from a pretrained checkpoint.
expect 0 "Recalled: [0-9]+ out of [0-9]+ probed" -- "$B" recall --reading-params guard/bp/pre.params --pretrain-corpus wiki.txt --eval-corpus dev.tsv --threads 1
expect 1 "--outputs-path ./wiki.txt is the file --pretrain-corpus reads \(wiki.txt\)" -- "$B" recall --reading-params guard/bp/pre.params --pretrain-corpus wiki.txt --eval-corpus dev.tsv --outputs-path ./wiki.txt
expect 1 "--outputs-path guard/bp/pre.params is the file --reading-params reads" -- "$B" recall --reading-params guard/bp/pre.params --pretrain-corpus wiki.txt --eval-corpus dev.tsv --outputs-path guard/bp/pre.params
expect 1 "guard/c/checkpoint.safetensors: not a birthplace checkpoint" -- "$B" recall --reading-params guard/c/checkpoint.safetensors
expect 1 "tiny.txt: .*is not in the vocabulary" -- "$B" recall --reading-params guard/bp/pre.params --pretrain-corpus tiny.txt --eval-corpus dev.tsv
expect 2 "--reading-params is required" -- "$B" recall --eval-corpus dev.tsv

# ---- the other examples that take input -------------------------------------------------------

if [ -n "${bin[exercises]:-}" ]; then
  E=${bin[exercises]}
  expect 2 "--keys \(6\) must not exceed --dim \(5\)" -- "$E" --keys 6 --dim 5
  expect 2 "--keys: At Most 1 required" -- "$E" --keys 5 --keys 6
  expect 2 "--seed: '-3' is not a non-negative integer" -- "$E" --seed -3
  expect 2 "--beta: 'nan' is not a finite number" -- "$E" --beta nan
fi
if [ -n "${bin[positions]:-}" ]; then
  expect 2 "--heads: 3 does not divide --d-model 8" -- "${bin[positions]}" --heads 3 --d-model 8
  expect 2 "--lr: 'nan' is not a finite number" -- "${bin[positions]}" --lr nan
  expect 2 "--seed: '-3' is not a non-negative integer" -- "${bin[positions]}" --seed -3
fi
if [ -n "${bin[seq2seq]:-}" ]; then
  expect 2 "--hidden: 3 is not even" -- "${bin[seq2seq]}" --hidden 3
  expect 1 "--out guard/c/log.csv: guard/c/log.csv is a file, not a directory" -- "${bin[seq2seq]}" --out guard/c/log.csv
  # A warmup longer than the run: named when asked for; the default fits itself to a short run.
  expect 2 "--warmup: 100 is more than --steps 2" -- "${bin[seq2seq]}" --steps 2 --warmup 100
  cases=$((cases + 1))
  "${bin[seq2seq]}" --steps 2 --models dot --test-size 10 --show 0 --threads 1 > s2s.out 2>&1 ||
    fail "seq2seq --steps 2 with the default warmup: $(cat s2s.out)"
  # Its options are a settings table: a seed is digits, at most 2^64 - 1.
  expect 2 "--seed: '18446744073709551616' is larger than 2\^64 - 1" -- "${bin[seq2seq]}" --seed 18446744073709551616
  # Earlier alignment plots in --out are not replaced unasked.
  quiet "${bin[seq2seq]}" --steps 2 --models dot --test-size 10 --show 1 --threads 1 --out s/s2s
  expect 1 "seq2seq: an earlier run's files are in the way \(s/s2s/dot_alignment_0" -- "${bin[seq2seq]}" --steps 2 --models dot --test-size 10 --show 1 --threads 1 --out s/s2s
  expect 0 "exact match per input format" -- "${bin[seq2seq]}" --steps 2 --models dot --test-size 10 --show 1 --threads 1 --out s/s2s --overwrite
fi
if [ -n "${bin[stolen_attention]:-}" ]; then
  S=${bin[stolen_attention]}
  expect 1 "a model is given as name=checkpoint, got 'x'" -- "$S" x --data small.txt --out s/st
  expect 1 "read_file: cannot open 'missing.safetensors'" -- "$S" a=missing.safetensors --data small.txt --out s/st
  expect 1 "corrupt.safetensors: tensor \".*\" is corrupt" -- "$S" a=corrupt.safetensors --data small.txt --out s/st
  expect 1 "--out guard/c/log.csv: guard/c/log.csv is a file" -- "$S" a=guard/c/checkpoint.safetensors --data small.txt --out guard/c/log.csv
  # A bad model in the list is named before any model is analysed; earlier results stay.
  expect 1 "a model is given as name=checkpoint, got 'x'" -- "$S" a=guard/c/checkpoint.safetensors x --data small.txt --out s/st
  st=(a=guard/c/checkpoint.safetensors --data small.txt --contexts 4,8 --sequences 2 --batch 2)
  expect 0 "wrote s/st3/\{queries,tokens,summary\}.csv" -- "$S" "${st[@]}" --out s/st3
  expect 1 "stolen_attention: an earlier run's files are in the way \(s/st3/queries.csv, " -- "$S" "${st[@]}" --out s/st3
  expect 0 "wrote s/st3/" -- "$S" "${st[@]}" --out s/st3 --overwrite
  expect 2 "--sequences: 0 is outside \[1, 100000\]" -- "$S" a=guard/c/checkpoint.safetensors --data small.txt --out s/st4 --sequences 0
  # A model of --tokenizer bpe reads the text with its own tokenizer.
  expect 0 "wrote s/st5/" -- "$S" b=s/t4/checkpoint.safetensors --data small.txt --contexts 4 --sequences 2 --batch 2 --out s/st5
fi
if [ -n "${bin[value_aware]:-}" ]; then
  V=${bin[value_aware]}
  expect 1 "corrupt.safetensors: tensor \".*\" is corrupt" -- "$V" eval corrupt.safetensors --data small.txt --out s/v.csv
  expect 1 "--out guard is a directory" -- "$V" eval guard/c/checkpoint.safetensors --data small.txt --out guard
  expect 1 "guard/bp/ft.params: not a char_gpt checkpoint" -- "$V" eval guard/bp/ft.params --data small.txt --out s/v.csv
  expect 2 "csv: File does not exist: missing.csv" -- "$V" plot missing.csv
  # No output replaces an input or an earlier result unasked.
  expect 1 "--out guard/c/checkpoint.safetensors is the file the checkpoint reads" -- "$V" eval guard/c/checkpoint.safetensors --data small.txt --out guard/c/checkpoint.safetensors --overwrite
  expect 1 "--out small.txt is the file --data reads" -- "$V" weights guard/c/checkpoint.safetensors --data small.txt --out small.txt --overwrite
  expect 1 "value_aware: an earlier run's files are in the way \(guard/c/log.csv\)" -- "$V" eval guard/c/checkpoint.safetensors --data small.txt --out guard/c/log.csv
  expect 1 "--out guard/c/log.csv is the file plot reads" -- "$V" plot guard/c/log.csv --out guard/c/log.csv --overwrite
  expect 2 "--windows: 0 is outside \[1, 1000000\]" -- "$V" eval guard/c/checkpoint.safetensors --windows 0
  expect 0 "wrote s/v3.csv" -- "$V" eval s/t4/checkpoint.safetensors --data small.txt --out s/v3.csv --exact-only --windows 1
  # One writer per --out: while another process holds s/v2.csv.lock, a run into s/v2.csv is refused.
  if command -v flock > /dev/null; then
    flock -o s/v2.csv.lock sleep 4 > /dev/null 2>&1 &
    holder=$!
    for _ in $(seq 50); do [ -f s/v2.csv.lock ] && break; sleep 0.1; done
    sleep 0.3
    expect 1 "value_aware: s/v2.csv is in use by another process \(its holder holds s/v2.csv.lock\)" -- "$V" eval guard/c/checkpoint.safetensors --data small.txt --out s/v2.csv --exact-only
    wait $holder 2> /dev/null
  fi
fi
if [ -n "${bin[autodiff_demo]:-}" ]; then
  expect 2 "--steps wants an integer in \[1, 1000000\], got '0'" -- "${bin[autodiff_demo]}" --steps 0
  expect 2 "unknown argument '--bogus'" -- "${bin[autodiff_demo]}" --bogus
fi

# ---- interruptions -------------------------------------------------------------------------

# started PID FILE: waits (up to 60 s) until FILE has a line "memory:" (training is about to start)
started() {
  for _ in $(seq 600); do
    grep -q -- "${ready:-memory}" "$2" 2> /dev/null && return 0
    kill -0 "$1" 2> /dev/null || return 1
    sleep 0.1
  done
  return 1
}
# steps_unique LOG: the first column (the step) strictly increases
steps_unique() { awk -F, 'NR > 1 { if ($1 <= last) exit 1; last = $1 }' "$1"; }

long_gpt=("${tiny_gpt[@]}" --steps 100000000 --eval-every 100000000)

# interrupt TIMES OUT ERR COMMAND...: runs COMMAND in the background (stdout to OUT, stderr to
# ERR), and once it is about to train sends it Ctrl-C (SIGINT) TIMES times, 0.05 s apart, after
# 0.3 s; sets rc to its exit status.
interrupt() {
  local times=$1 out=$2 err=$3
  shift 3
  "$@" > "$out" 2> "$err" &
  local pid=$!
  if started $pid "$out"; then
    sleep 0.3
    for _ in $(seq "$times"); do
      kill -INT $pid
      sleep 0.05
    done
  fi
  wait $pid
  rc=$?
}

# seq2seq and positions: Ctrl-C ends the model in training after its step; it is evaluated (and
# drawn) as it is, the models after it are not trained, exit 130. `ready`: the line that says
# training has begun.
if [ -n "${bin[seq2seq]:-}" ]; then
  cases=$((cases + 1))
  ready="== dot" interrupt 1 s2s_int.out s2s_int.err "${bin[seq2seq]}" --steps 1000000 \
    --models dot transformer --test-size 10 --show 1 --threads 1 --out s/s2s_int
  [ $rc = 130 ] || fail "seq2seq Ctrl-C: exit status $rc, expected 130: $(cat s2s_int.err)"
  grep -q "stopped: dot trained [0-9]* of 1000000 steps; 1 of 2 models" s2s_int.out ||
    fail "seq2seq Ctrl-C: does not say what it trained: $(cat s2s_int.out)"
  ls s/s2s_int/dot_alignment_0.* > /dev/null 2>&1 || fail "seq2seq Ctrl-C: no alignment drawn"
fi
if [ -n "${bin[positions]:-}" ]; then
  cases=$((cases + 1))
  ready="^reverse: " interrupt 1 pos_int.out pos_int.err "${bin[positions]}" --steps 1000000 \
    --test-size 10 --threads 1
  [ $rc = 130 ] || fail "positions Ctrl-C: exit status $rc, expected 130: $(cat pos_int.err)"
  grep -q "stopped: reverse/sinusoidal trained [0-9]* of 1000000 steps; 1 of 6 models" pos_int.out ||
    fail "positions Ctrl-C: does not say what it trained: $(cat pos_int.out)"
fi

# Ctrl-C: the step finishes, the run is saved and plotted, exit 130; it then resumes.
cases=$((cases + 1))
interrupt 1 int.out int.err "$G" "${long_gpt[@]}" --out s/int
[ $rc = 130 ] || fail "Ctrl-C: exit status $rc, expected 130: $(cat int.err)"
grep -q "interrupted: finishing this step, then saving" int.err || fail "Ctrl-C: no message"
grep -q "stopped at step .*; continue with .char_gpt --resume s/int/checkpoint.safetensors" int.out ||
  fail "Ctrl-C: does not say how to continue: $(cat int.out)"
[ -f s/int/checkpoint.safetensors ] && [ -f s/int/loss.svg ] && [ "$(wc -l < s/int/log.csv)" = 2 ] ||
  fail "Ctrl-C: checkpoint, plot or log row missing"
step=$(awk -F, 'NR == 2 { print $1 }' s/int/log.csv)
cases=$((cases + 1))
"$G" --resume s/int/checkpoint.safetensors --data small.txt --stop-at $((step + 3)) > res.out 2>&1 ||
  fail "resume after Ctrl-C failed: $(cat res.out)"
grep -q "resuming at step $step of" res.out || fail "resume after Ctrl-C: not at step $step"
steps_unique s/int/log.csv || fail "resume after Ctrl-C: repeated steps in the log"

# A second Ctrl-C quits at once (the first asked for the step to finish; a step here is long).
cases=$((cases + 1))
interrupt 2 int2.out int2.err "$G" --data small.txt --layers 2 --heads 4 --embd 256 --block 256 \
  --batch 64 --threads 1 --steps 1000 --eval-every 1000 --out s/int2
[ $rc = 130 ] || fail "second Ctrl-C: exit status $rc, expected 130"
grep -q "interrupted again: quitting without saving" int2.err || fail "second Ctrl-C: no message"

# birthplace: Ctrl-C saves the step it finishes; the run resumes from it.
cases=$((cases + 1))
interrupt 1 bint.out bint.err "$B" pretrain "${tiny_bp[@]}" --epochs 100000 \
  --writing-params s/bint/p.params
[ $rc = 130 ] || fail "birthplace Ctrl-C: exit status $rc, expected 130: $(cat bint.err)"
[ -f s/bint/p.params ] && [ -f s/bint/p.params.loss.svg ] || fail "birthplace Ctrl-C: not saved"
step=$(tail -1 s/bint/p.params.log.csv | cut -d, -f1)
cases=$((cases + 1))
"$B" pretrain --resume s/bint/p.params --pretrain-corpus wiki.txt --threads 1 --stop-at $((step + 2)) > bres.out 2>&1 ||
  fail "birthplace resume after Ctrl-C failed: $(cat bres.out)"
grep -q "resuming at step $step of" bres.out || fail "birthplace resume: not at step $step"
steps_unique s/bint/p.params.log.csv || fail "birthplace resume: repeated steps in the log"

# kill -9 at a random moment: the checkpoint is the previous one or the new one, never torn.
cases=$((cases + 1))
"$G" "${tiny_gpt[@]}" --steps 100000000 --eval-every 50 --out s/k9 > k9.out 2>&1 &
pid=$!
started $pid k9.out && sleep 1
kill -9 $pid
wait $pid 2> /dev/null
interrupt 1 k9r.out k9r.err "$G" --resume s/k9/checkpoint.safetensors --data small.txt --threads 1 \
  --sample-tokens 0
[ $rc = 130 ] || fail "resume after kill -9: exit status $rc, expected 130"
steps_unique s/k9/log.csv || fail "resume after kill -9: repeated steps in the log"

# Stale temp files of killed saves are removed at start; a live process's is kept.
cases=$((cases + 1))
mkdir -p s/stale && cp guard/c/* s/stale/
sh -c 'exit 0' &
dead=$!
wait $dead
: > s/stale/checkpoint.safetensors.tmp.$dead.0
: > s/stale/checkpoint.safetensors.tmp.$$.0
"$G" --resume s/stale/checkpoint.safetensors --data small.txt --threads 1 --stop-at 5 > stale.out 2>&1 ||
  fail "stale temp files: resume failed: $(cat stale.out)"
[ ! -e s/stale/checkpoint.safetensors.tmp.$dead.0 ] || fail "a stale temp file was not removed"
[ -e s/stale/checkpoint.safetensors.tmp.$$.0 ] || fail "a live process's temp file was removed"
grep -q "removed s/stale/checkpoint.safetensors.tmp.$dead.0" stale.out || fail "removal not reported"

# A log longer than its checkpoint (a crash after the row, before the save; a row cut short) is
# cut back to the checkpoint's step on resume: no step twice.
cases=$((cases + 1))
mkdir -p s/long && cp guard/c/* s/long/
printf '6,9,9,9,9,9,9\n7,9' >> s/long/log.csv
"$G" --resume s/long/checkpoint.safetensors --threads 1 > long.out 2>&1 ||  # its own --data
  fail "long log: resume failed: $(cat long.out)"
steps_unique s/long/log.csv || fail "long log: repeated steps after resume"
[ "$(cut -d, -f1 s/long/log.csv | tr '\n' ' ')" = "step 2 4 6 8 " ] ||
  fail "long log: steps are $(cut -d, -f1 s/long/log.csv | tr '\n' ' ')"
grep -q "^6,9,9" s/long/log.csv && fail "long log: the row after the checkpoint was kept"

# No shell between a path and gnuplot: an --out a shell would run as a command is just a name.
cases=$((cases + 1))
evil="s/x';touch INJECTED;'"
"$G" "${tiny_gpt[@]}" --steps 4 --eval-every 2 --out "$evil" > evil.out 2>&1 || fail "quoted --out: $(cat evil.out)"
[ -e INJECTED ] || [ -e s/INJECTED ] && fail "quoted --out: a shell ran a command from the path"
[ -f "$evil/loss.svg" ] || fail "quoted --out: no loss.svg"
if command -v gnuplot > /dev/null; then
  [ -s "$evil/loss.png" ] || fail "quoted --out: loss.png is missing or empty"
fi

# One process per run: a second new run, an --overwrite or a --resume of a run that is training
# is refused while the first is alive (it holds the run's lock), and works once it has ended.
cases=$((cases + 1))
"$G" "${tiny_gpt[@]}" --steps 100000000 --eval-every 5 --out s/live > live.out 2>&1 &
pid=$!
if started $pid live.out; then
  for _ in $(seq 100); do [ -f s/live/checkpoint.safetensors ] && break; sleep 0.1; done
  cp s/live/checkpoint.safetensors live_before.safetensors
  expect 1 "char_gpt: the run in s/live is in use by another process \(pid $pid holds s/live/.lock\)" -- "$G" "${tiny_gpt[@]}" --out s/live --overwrite
  expect 1 "the run in s/live is in use by another process" -- "$G" --resume s/live/checkpoint.safetensors --data small.txt --threads 1
  expect 1 "the run in ./s/live/ is in use by another process" -- "$G" "${tiny_gpt[@]}" --out ./s/live/ --overwrite
else
  fail "lock: the first run did not start: $(cat live.out)"
fi
kill -INT $pid
wait $pid
[ $? = 130 ] || fail "lock: the first run did not end with 130"
step=$(tail -1 s/live/log.csv | cut -d, -f1)
"$G" --resume s/live/checkpoint.safetensors --data small.txt --threads 1 --stop-at $((step + 2)) > live2.out 2>&1 ||
  fail "lock: resume after the holder ended failed: $(cat live2.out)"
# A new birthplace run into a checkpoint another process is training is refused too.
cases=$((cases + 1))
"$B" pretrain "${tiny_bp[@]}" --epochs 100000 --writing-params s/blive/p.params > blive.out 2>&1 &
pid=$!
if started $pid blive.out; then
  expect 1 "birthplace: the run in s/blive/p.params is in use by another process \(pid $pid" -- "$B" pretrain "${tiny_bp[@]}" --writing-params s/blive/p.params --overwrite
fi
kill -INT $pid
wait $pid

# char_gpt resumes a run from its own checkpoint only: another checkpoint file in a run's
# directory would replace that run's checkpoint and cut its log.
cases=$((cases + 1))
mkdir -p s/other && cp guard/c/* s/other/ && cp guard/c/checkpoint.safetensors s/other/other.safetensors
sum=$(sha256sum s/other/checkpoint.safetensors s/other/log.csv)
expect 1 "--resume s/other/other.safetensors is not the checkpoint of the run in its directory" -- "$G" --resume s/other/other.safetensors --data small.txt --threads 1
[ "$(sha256sum s/other/checkpoint.safetensors s/other/log.csv)" = "$sum" ] || fail "--resume other: the run's files changed"

# SIGHUP (a closed terminal) and SIGTERM save like Ctrl-C and exit 128 + the signal.
for sig in HUP TERM; do
  cases=$((cases + 1))
  "$G" "${long_gpt[@]}" --out s/sig$sig > sig.out 2> sig.err &
  pid=$!
  started $pid sig.out && sleep 0.3
  kill -$sig $pid
  wait $pid
  rc=$?
  want=$((128 + $(kill -l $sig)))
  [ $rc = $want ] || fail "SIG$sig: exit status $rc, expected $want: $(cat sig.err)"
  [ -f s/sig$sig/checkpoint.safetensors ] || fail "SIG$sig: not saved"
done

# Ctrl-C while the finished run samples: the sample stops, nothing half-written is kept, exit 130.
cases=$((cases + 1))
"$G" --data small.txt --layers 1 --heads 1 --embd 8 --block 8 --batch 2 --eval-batches 1 --threads 1 \
  --steps 2 --eval-every 2 --sample-tokens 1000000 --out s/sample_int > si.out 2> si.err &
pid=$!
for _ in $(seq 600); do grep -q "^checkpoint:" si.out 2> /dev/null && break; kill -0 $pid 2> /dev/null || break; sleep 0.1; done
kill -INT $pid
wait $pid
rc=$?
[ $rc = 130 ] || fail "Ctrl-C while sampling: exit status $rc, expected 130: $(cat si.out si.err)"
grep -q "sampling interrupted after" si.out || fail "Ctrl-C while sampling: not said: $(cat si.out)"
[ ! -e s/sample_int/sample.txt ] || fail "Ctrl-C while sampling: a sample.txt was written"
[ -f s/sample_int/checkpoint.safetensors ] || fail "Ctrl-C while sampling: the run is not saved"

# A run written by char_gpt before its settings table (tests/robustness/old_run, made by
# make_old_run.sh) resumes: at its step, with every saved setting read back as the same value.
cases=$((cases + 1))
mkdir -p s/old && cp "$tests/old_run/checkpoint.safetensors" "$tests/old_run/log.csv" s/old/
"$G" --resume s/old/checkpoint.safetensors --data small.txt --threads 1 > old.out 2>&1 ||
  fail "old run: resume failed: $(cat old.out)"
grep -q "resuming at step 4 of 8" old.out || fail "old run: not resumed at step 4 of 8: $(cat old.out)"
[ "$(cut -d, -f1 s/old/log.csv | tr '\n' ' ')" = "step 2 4 6 8 " ] || fail "old run: log steps"
python3 - "$tests/old_run/checkpoint.safetensors" s/old/checkpoint.safetensors <<'PY' || fail "old run: settings changed"
import json, struct, sys
def meta(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))["__metadata__"]
old, new = meta(sys.argv[1]), meta(sys.argv[2])
for key, value in old.items():
    if key.startswith("train.") and key not in ("train.step", "train.elapsed_s"):
        a, b = value, new.get(key)
        try:
            same = float(a) == float(b)
        except (TypeError, ValueError):
            same = a == b
        if not same:
            sys.exit(f"{key}: {a} became {b}")
PY

[ "$(snapshot)" = "$before" ] || fail "guard/ changed"
if [ $failures -gt 0 ]; then
  echo "robustness: $failures of $cases cases failed" >&2
  exit 1
fi
echo "robustness: all $cases cases passed"
