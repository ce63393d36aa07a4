#!/usr/bin/env python3
"""Builds and runs the downstream example of README.md exactly as the README shows it.

From the section "Using attn from another project": the first ```cmake block becomes
CMakeLists.txt and the first ```cpp block main.cpp of a new project; attn is installed from the
build tree into a prefix there (find_package(attn) as the README says), the project is built in
Release and run, and what it prints must be the output the README shows after "It prints": the
same lines, every number within 0.01 of the README's (compilers and GEMM backends round
differently). Exit status 1, with the difference, when anything fails.
Does not edit the README.

usage: readme_example.py --source DIR --binary DIR --work DIR --cxx COMPILER --generator NAME
                         [--make-program PATH] [--prefix-path 'a|b']
"""
import argparse
import pathlib
import re
import shutil
import subprocess
import sys


def section_blocks(readme):
    text = readme.read_text(encoding="utf-8")
    start = text.index("## Using attn from another project")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    cmake = re.search(r"```cmake\n(.*?)```", section, re.S).group(1)
    cpp = re.search(r"```cpp\n(.*?)```", section, re.S).group(1)
    printed = re.search(r"It prints[^\n]*\n+```\n(.*?)```", section, re.S).group(1)
    return cmake, cpp, printed


def run(step, cmd):
    print(f"readme_example: {step}: {' '.join(map(str, cmd))}", flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"readme_example: {step} failed ({r.returncode}):\n{r.stdout}")
    return r.stdout


NUMBER = re.compile(r"-?\d+\.\d+|-?\d+")


def same_output(got, want):
    g, w = got.strip().splitlines(), want.strip().splitlines()
    if len(g) != len(w):
        return f"{len(g)} lines printed, the README shows {len(w)}"
    for a, b in zip(g, w):
        if NUMBER.sub("#", a) != NUMBER.sub("#", b):
            return f"line '{a}' differs from the README's '{b}'"
        for x, y in zip(NUMBER.findall(a), NUMBER.findall(b)):
            if abs(float(x) - float(y)) > 0.01:
                return f"line '{a}': {x} is not within 0.01 of the README's {y}"
    return None


def main():
    p = argparse.ArgumentParser()
    for name in ("--source", "--binary", "--work", "--cxx", "--generator"):
        p.add_argument(name, required=True)
    p.add_argument("--make-program", default="")
    p.add_argument("--prefix-path", default="")
    a = p.parse_args()

    cmake_text, cpp_text, printed = section_blocks(pathlib.Path(a.source) / "README.md")
    work = pathlib.Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    (work / "app").mkdir(parents=True)
    (work / "app" / "CMakeLists.txt").write_text(cmake_text, encoding="utf-8")
    (work / "app" / "main.cpp").write_text(cpp_text, encoding="utf-8")

    prefix = work / "prefix"
    run("install attn", ["cmake", "--install", a.binary, "--prefix", prefix])
    prefixes = [str(prefix)] + [x for x in a.prefix_path.split("|") if x]
    configure = ["cmake", "-S", work / "app", "-B", work / "build", "-G", a.generator,
                 f"-DCMAKE_CXX_COMPILER={a.cxx}", "-DCMAKE_BUILD_TYPE=Release",
                 f"-DCMAKE_PREFIX_PATH={';'.join(prefixes)}",
                 "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"]
    if a.make_program:
        configure.append(f"-DCMAKE_MAKE_PROGRAM={a.make_program}")
    run("configure", configure)
    run("build", ["cmake", "--build", work / "build"])
    got = run("run", [work / "build" / "app"])
    print(got)
    why = same_output(got, printed)
    if why:
        sys.exit(f"readme_example: the README's example does not print what the README says: {why}")
    print("readme_example: the README's example builds, runs and prints what the README shows")


if __name__ == "__main__":
    main()
