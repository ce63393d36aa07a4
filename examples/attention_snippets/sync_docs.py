#!/usr/bin/env python3
"""Keeps the code blocks of docs/attention.md equal to the blocks of main.cpp they come from.

In main.cpp a block runs from a line `// [doc:NAME]` to the next `// [end]`; in the docs, the
```cpp block right after a line `<!-- snippet: NAME -->` shows it (dedented). Without arguments
this checks that every docs block matches and that every block is shown (exit status 1 if not);
with --write it copies the blocks from main.cpp into the docs.
"""
import pathlib
import re
import sys
import textwrap

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE / "main.cpp"
DOCS = HERE.parent.parent / "docs" / "attention.md"


def source_blocks():
    blocks, name, lines = {}, None, []
    for line in SOURCE.read_text().splitlines():
        m = re.match(r"\s*// \[doc:(\w+)\]\s*$", line)
        if m:
            name, lines = m.group(1), []
        elif name and re.match(r"\s*// \[end\]\s*$", line):
            blocks[name] = textwrap.dedent("\n".join(lines)).strip("\n")
            name = None
        elif name:
            lines.append(line)
    return blocks


def main():
    write = "--write" in sys.argv[1:]
    blocks = source_blocks()
    text = DOCS.read_text()
    pattern = re.compile(r"(<!-- snippet: (\w+) -->\n```cpp\n)(.*?)(```)", re.S)
    errors, shown = [], set()

    def replace(m):
        name = m.group(2)
        shown.add(name)
        if name not in blocks:
            errors.append(f"docs show snippet '{name}', which main.cpp does not define")
            return m.group(0)
        if m.group(3).rstrip("\n") != blocks[name]:
            errors.append(f"snippet '{name}' differs between docs/attention.md and main.cpp")
        return m.group(1) + blocks[name] + "\n" + m.group(4)

    new_text = pattern.sub(replace, text)
    errors += [f"snippet '{n}' of main.cpp is not shown in the docs" for n in blocks if n not in shown]
    if write:
        DOCS.write_text(new_text)
        errors = [e for e in errors if "differs" not in e]
    for e in errors:
        print(f"sync_docs: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
