#!/usr/bin/env python3
"""Doxygen input filter for attn's headers (cmake/attn_docs.cmake runs it; docs/Doxyfile.in).

attn documents its code with plain `//` comments (the formula above each op, the contract above
each type). Doxygen reads only `///` and `/** */` blocks, and would parse their text as markup
(`Var<T>` as an HTML tag, `\\n` as a command). This filter hands Doxygen, line for line:

* the file's opening comment block as the file's description;
* every comment block that stands right above a declaration at namespace or class scope as that
  declaration's description;

each wrapped in \\verbatim ... \\endverbatim, so the text is shown exactly as written and nothing
in it is interpreted. Comments inside function bodies and trailing comments stay plain. The
output has the same number of lines as the input, so Doxygen's line references stay right.

Usage: doxygen_filter.py FILE              writes the filtered file to stdout
       doxygen_filter.py --stage ROOT OUT  writes every .hpp under ROOT, filtered, to the same
                                           path under OUT (one run for all headers; Doxygen's
                                           INPUT_FILTER, doxygen_staged.sh, then only reads them:
                                           a Python start per header cost most of the docs' build)
"""
import os
import re
import sys

SCOPE_OPENER = re.compile(r"^\s*(template\s*<.*>\s*)?(namespace|struct|class|union|enum)\b")
COMMENT = re.compile(r"^(\s*)//(.*)$")


def strip_literals(line):
    """The line without string/char literals and trailing comment (for brace counting)."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//", 1)[0]


def filter_lines(lines):
    out = list(lines)
    n = len(lines)
    # The opening comment block (before any code) describes the file.
    i = 0
    while i < n and COMMENT.match(lines[i]):
        i += 1
    if i > 0:
        out[0] = "/** \\verbatim " + COMMENT.match(lines[0]).group(2)
        for k in range(1, i):
            out[k] = COMMENT.match(lines[k]).group(2)
        out[i - 1] = out[i - 1] + " \\endverbatim @file */"
    # Later comment blocks at namespace/class scope, directly above code.
    stack = []  # True: a namespace/class scope brace; False: a function body or initialiser
    pending_scope = False  # a struct/class/namespace header whose '{' is on a later line
    k = i
    while k < n:
        m = COMMENT.match(lines[k])
        if m and all(stack):
            start = k
            while k < n and COMMENT.match(lines[k]) and COMMENT.match(lines[k]).group(1) == m.group(1):
                k += 1
            nxt = lines[k] if k < n else ""
            if nxt.strip() and not nxt.lstrip().startswith(("#", "}", "public:", "private:", "protected:")):
                indent = m.group(1)
                out[start] = indent + "/** \\verbatim " + COMMENT.match(lines[start]).group(2)
                for j in range(start + 1, k):
                    out[j] = indent + COMMENT.match(lines[j]).group(2)
                out[k - 1] = out[k - 1] + " \\endverbatim */"
            continue
        code = strip_literals(lines[k])
        if SCOPE_OPENER.match(code) and not code.rstrip().endswith(";"):
            pending_scope = True
        for ch in code:
            if ch == "{":
                stack.append(pending_scope)
                pending_scope = False
            elif ch == "}" and stack:
                stack.pop()
        if code.rstrip().endswith(";"):
            pending_scope = False
        k += 1
    return out


def filtered(path):
    with open(path, encoding="utf-8") as f:
        return "\n".join(filter_lines(f.read().split("\n")))


def stage(root, out):
    for folder, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".hpp"):
                continue
            target = os.path.join(out, os.path.relpath(os.path.join(folder, name), root))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target + ".tmp", "w", encoding="utf-8") as f:
                f.write(filtered(os.path.join(folder, name)))
            os.replace(target + ".tmp", target)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--stage":
        stage(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 2:
        sys.stdout.write(filtered(sys.argv[1]))
    else:
        sys.exit("usage: doxygen_filter.py FILE | doxygen_filter.py --stage ROOT OUT")


if __name__ == "__main__":
    main()
