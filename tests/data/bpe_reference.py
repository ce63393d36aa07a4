#!/usr/bin/env python3
"""Reference data for tests/data/test_bpe.cpp: byte-level BPE as Hugging Face tokenizers does it.

Writes into data/bpe_reference/:
  vocab.json, merges.txt   BpeTrainer's tokenizer (vocabulary 1000) trained on the first 100,000
                           bytes of data/tinyshakespeare.txt as one sequence (model.save);
  tokenizer.json           the same tokenizer in tokenizers' own format (Tokenizer.save);
  reference.txt            the test texts (below) and, for each, the ByteLevel pre-tokenizer's
                           pieces, the ids of that tokenizer, the pieces with add_prefix_space, and
                           the ids of a second tokenizer (vocabulary 420) trained on the test texts
                           themselves, whose merges are listed too (many ties, non-Latin scripts).
The trainer: ByteLevel pre-tokenizer (add_prefix_space False), initial alphabet = its 256 byte
symbols, no special tokens, min_frequency 0. Before writing, the script checks that
  - for every code point, the class tokenizers' pre-tokenizer gives it (letter, number, space,
    other) is the one of scripts/unicode_classes.py (Unicode 16.0);
  - transformers' GPT2TokenizerFast loads the folder and encodes every text to the same ids.

Regenerate (tokenizers 0.22.2, transformers 4.57.6 and unicodedata2 from scripts/oracle-venv;
about 15 s):
    scripts/oracle-venv
    build/oracle-venv/bin/python tests/data/bpe_reference.py

reference.txt, one record a line, fields separated by one space; texts and tokens in hex (UTF-8
bytes), lengths in bytes:
    attn-bpe-reference 1
    text <name> <hex>              a test text
    pieces <name> <len>...         ByteLevel(add_prefix_space=False) pieces
    prefixed <name> <len>...       ByteLevel(add_prefix_space=True) pieces of " " + text, or of
                                   text when it is empty or starts with a space
    ids <name> <id>...             the Shakespeare tokenizer's encode(text).ids
    ids_small <name> <id>...       the second tokenizer's ids
    train_small <vocab size>       the second tokenizer's settings, then its merges in order:
    merge <hex left> <hex right>
    end <number of records>
"""

import json
import os
import random
import sys

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import unicode_classes  # noqa: E402

OUT = os.path.join(ROOT, "data", "bpe_reference")
SLICE_BYTES = 100_000
VOCAB = 1000
VOCAB_SMALL = 420
FORMAT = "attn-bpe-reference 1"

# The test texts: whitespace runs, tabs, newlines, CRLF, digits, apostrophes, punctuation runs,
# scripts with and without combining marks, emoji sequences, Unicode spaces and separators.
CASES = [
    ("hello", "Hello world"),
    ("spaces", "  two leading, three inner   and trailing   "),
    ("only_spaces", "     "),
    ("one_space", " "),
    ("space_x", "  x"),
    ("tabs", "tabs\tand\t\ttabs \t mixed\t"),
    ("newlines", "line one\nline two\n\nline four\n"),
    ("newline_runs", "a\n\n\nb \n c\n \nd\n"),
    ("crlf", "crlf\r\nline\r\n\r\nend\r\n"),
    ("whitespace_mix", "x  \n  y\t \n\tz \u00a0 w"),
    ("digits", "1 12 123 1234567890123456789 3.14159 1,000,000 -42 x2 2x 0x1F"),
    ("long_number", "31415926535897932384626433832795028841971693993751058209749445923"),
    ("other_numbers", "\u0663\u0664\u0665 \u00b2\u00b3 \u216b \u00bd \u2460 \u0968\u0966"),
    ("apostrophes", "it's I'll we've they're I'm he'd don't can't"),
    ("capital_apostrophes", "IT'S I'LL WE'VE THEY'RE I'M HE'D 'S 'Ll"),
    ("quotes", "'quoted' rock'n'roll ''s 's' ' s x's 'sx 're'd"),
    ("curly_apostrophe", "it\u2019s don\u2019t \u2018quoted\u2019"),
    ("punctuation", "Wait... what?!? --- (yes) [no] {maybe} <tag/> @#$%^&* ~~ __init__"),
    ("mixed_runs", "a.b,c;d:e!f?g-h_i/j\\k|l\"m'n`o"),
    ("cyrillic", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! "
                 "\u041a\u0430\u043a \u0434\u0435\u043b\u0430?"),
    ("greek", "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5, "
              "\u03b1\u0301 \u1f00"),
    ("cjk", "\u4f60\u597d\uff0c\u4e16\u754c\u3002\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8"
            "\u3001\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8"),
    ("arabic", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 "
               "\u0661\u0662\u0663 \u0634\u064f\u0643\u0652\u0631\u064b\u0627"),
    ("devanagari", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e "
                   "\u0939\u093f\u0928\u094d\u0926\u0940"),
    ("combining", "e\u0301 cafe\u0301 n\u0303o a\u0308\u0304 \u0301x Z\u0351\u0355\u0362"),
    ("emoji", "I \u2764\ufe0f \U0001f355 \U0001f44d\U0001f3fd \U0001f469\u200d\U0001f469\u200d"
              "\U0001f467\u200d\U0001f466 \U0001f3f3\ufe0f\u200d\U0001f308 \U0001f600\U0001f600"
              " \U0001f1fa\U0001f1f8!"),
    ("unicode_spaces", "a\u00a0b c\u2003d e\u3000f g\u2028h i\u2029j k\u0085l m\u200bn o\u202fp"
                       " q\u1680r \u2028\u2028 s \u00a0\u00a0t"),
    ("space_before_others", " \u00a0x \u2028y\u00a0 \u3000"),
    ("controls", "\x00\x01\x7f \x1b[0m\x0b\x0c\x1c\x1d\x1e\x1f end"),
    ("math", "\u2211x\u00b2 \u2264 \u221e \u2192 \u03b1+\u03b2=\u03b3 \U0001d400\U0001d7d8"),
    ("long_spaces", " " * 100 + "x" + " " * 70),
    ("long_dashes", "-" * 200 + " " + "=" * 65),
    ("long_word", "a" * 300 + " " + "ab" * 80),
    ("shakespeare", "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\n"
                    "Speak, speak.\n"),
    ("empty", ""),
]

# Pieces for the random texts: mostly characters that sit on the expression's edges.
FUZZ_ATOMS = [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2028", "\u3000", "\u0085",
              "a", "b", "Z", "the", "'", "'", "s", "ll", "re", "S", "1", "23", "\u0663", "\u00bd",
              "!", ".", "?!", "-", "_", "\u00e9", "e\u0301", "\u0301", "\u4f60", "\u305f",
              "\u0436", "\u03c9", "\u0928\u094d", "\U0001f600", "\U0001f44d\U0001f3fd", "\u200d",
              "\ufe0f", "\u200b", "\u2019", "\x00", "\x7f", "\U0001d400"]
FUZZ_COUNT = 160


def fuzz_cases():
    rng = random.Random(51)
    cases = []
    for i in range(FUZZ_COUNT):
        n = rng.randint(1, 16)
        cases.append(("fuzz%03d" % i, "".join(rng.choice(FUZZ_ATOMS) for _ in range(n))))
    return cases


def byte_level(prefix_space=False):
    return pre_tokenizers.ByteLevel(add_prefix_space=prefix_space, use_regex=True)


def train(texts, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = byte_level()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=0, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def piece_lengths(pre, text):
    """The byte lengths of the pre-tokenizer's pieces of `text`: a piece is spelled in the
    byte-level alphabet, one character per byte."""
    lengths = [len(piece) for piece, _ in pre.pre_tokenize_str(text)]
    covered = len(text.encode("utf-8"))
    covered += bool(pre.add_prefix_space and text and not text.startswith(" "))
    assert sum(lengths) == covered, "pieces do not cover the text"
    return lengths


def check_unicode_classes():
    """The class of every code point in tokenizers' pre-tokenizer = unicode_classes.char_class."""
    pre = byte_level()
    count = lambda s: len(pre.pre_tokenize_str(s))  # noqa: E731
    wrong = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue  # not in a Python str that Rust accepts, nor in UTF-8
        ch = chr(cp)
        if count("a" + ch) == 1:
            seen = unicode_classes.LETTER
        elif count("1" + ch) == 1:
            seen = unicode_classes.NUMBER
        elif count("!" + ch) == 1:
            seen = unicode_classes.OTHER
        else:
            seen = unicode_classes.SPACE
        if seen != unicode_classes.char_class(cp):
            wrong.append(cp)
    assert not wrong, "%d code points differ, first U+%04X" % (len(wrong), wrong[0])


def main():
    check_unicode_classes()
    with open(os.path.join(ROOT, "data", "tinyshakespeare.txt"), "rb") as f:
        corpus = f.read()[:SLICE_BYTES].decode("utf-8")
    big = train([corpus], VOCAB)
    cases = CASES + fuzz_cases()
    small = train([text for _, text in CASES], VOCAB_SMALL)

    os.makedirs(OUT, exist_ok=True)
    big.model.save(OUT)
    big.save(os.path.join(OUT, "tokenizer.json"))

    # transformers reads the folder and encodes alike.
    fast = transformers.GPT2TokenizerFast.from_pretrained(OUT)
    for name, text in cases:
        assert fast(text)["input_ids"] == big.encode(text).ids, name

    hexed = lambda s: s.encode("utf-8").hex() or "-"  # noqa: E731
    records = []
    plain, prefixed = byte_level(), byte_level(True)
    for name, text in cases:
        records.append("text %s %s" % (name, hexed(text)))
        records.append(" ".join(["pieces", name] + [str(n) for n in piece_lengths(plain, text)]))
        records.append(" ".join(["prefixed", name] +
                                [str(n) for n in piece_lengths(prefixed, text)]))
        records.append(" ".join(["ids", name] + [str(i) for i in big.encode(text).ids]))
        records.append(" ".join(["ids_small", name] + [str(i) for i in small.encode(text).ids]))
    records.append("train_small %d" % VOCAB_SMALL)
    small_model = small.to_str()
    for left, right in json.loads(small_model)["model"]["merges"]:
        records.append("merge %s %s" % (hexed(left), hexed(right)))
    with open(os.path.join(OUT, "reference.txt"), "w", encoding="ascii", newline="\n") as f:
        f.write(FORMAT + "\n")
        f.write("# written by tests/data/bpe_reference.py: tokenizers %s, transformers %s, "
                "Unicode %s classes; %d-byte slice of tinyshakespeare, vocabulary %d\n"
                % (tokenizers.__version__, transformers.__version__,
                   unicode_classes.UNICODE_VERSION, SLICE_BYTES, VOCAB))
        for r in records:
            f.write(r + "\n")
        f.write("end %d\n" % len(records))
    print("wrote %s: %d texts, %d merges (big), %d merges (small)"
          % (os.path.relpath(OUT), len(cases), len(json.loads(big.to_str())["model"]["merges"]),
             len(json.loads(small_model)["model"]["merges"])))


if __name__ == "__main__":
    main()
