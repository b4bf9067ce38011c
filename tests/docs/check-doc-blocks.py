#!/usr/bin/python3
"""Checks the code blocks of README.md and docs/*.md against the code, so that they cannot rot.

    check-doc-blocks.py [--cxx COMPILER] [-I DIR]... [--list] SOURCE_DIR

Registered as the ctest `doc_blocks` (label lint) by tests/CMakeLists.txt, which passes the C++
compiler and the include folders of the public headers (include/, the build's generated
halox/config.hpp, MPI's).

What each fenced block is checked for, by the first word of its info string:

    cpp, c++       compiled with `-std=c++17 -fsyntax-only` against the public headers. A block
                   with a `main` is one translation unit. Any other is wrapped: its `#include`
                   lines stay at file scope, the rest becomes the body of a function, after
                   #include <halox/halox.hpp>, <halox/ops/ops.hpp>, <halox/ops/distributed.hpp>
                   and the standard headers the examples use (<cstdio>, <vector>, ...), so a
                   block of statements compiles when it declares every name it uses.
    python, py     compiled (syntax); and every name it reads must be defined in the block
                   (assigned, imported or a builtin), as in a script that runs as it stands.
    json           parsed.
    sh, bash,      never run (they build, install or launch MPI jobs): checked for shell syntax
    shell, console (`bash -n`); every path into the source tree they name (bench/..., tests/...,
                   examples/..., ./quickstart) must exist, except what a command writes
                   (after --out, -o, --prefix), and a `./quickstart X` must name a command
                   quickstart has.

Other languages (cmake, text, ...) and blocks without a language (output, formulas) are not
checked.

The convention for blocks that are not complete programs: the word `fragment` after the
language, as in

    ```cpp fragment
    plan.execute(halox::tensor_view(x, buf));   // x, buf: declared in the text around it
    ```

A fragment uses names the surrounding text defines, or shows a synopsis rather than code. A C++
fragment is not compiled, but every qualified name it spells under halox (`halox::halo_plan`,
`halox::backend::nccl`, `ops::dist_conv` with the usual `namespace ops = halox::ops`) must
still be declared in the public headers, so a renamed class, function or enumerator fails here
too. A Python fragment is only compiled for syntax (its names are not checked); shell and JSON
blocks are checked the same either way. GitHub and the API reference
(MyST) both take the first word as the language, so fragments are highlighted like the rest.
Any other word after the language is an error, so a misspelt marker cannot silence a check.

Exit status 0 when every block passes, 1 otherwise (each failure is listed with its file and
line and the compiler's or parser's message).
"""

import argparse
import builtins
import glob
import json
import os
import re
import shlex
import subprocess
import symtable
import sys
import tempfile

CXX_LANGS = {"cpp", "c++"}
PY_LANGS = {"python", "py"}
SH_LANGS = {"sh", "bash", "shell", "console"}
JSON_LANGS = {"json"}
MARKERS = {"fragment"}

CXX_PRELUDE = """#include <halox/halox.hpp>
#include <halox/ops/distributed.hpp>
#include <halox/ops/ops.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>
"""

# Folders of the source tree that shell blocks name paths in.
SOURCE_DIRS = ("bench/", "tests/", "examples/", "python/", "docs/", "src/", "include/",
               "cmake/", "kernels/", "./")


class Block:
    def __init__(self, path, line, lang, markers, text):
        self.path, self.line, self.lang, self.markers, self.text = path, line, lang, markers, text

    @property
    def fragment(self):
        return "fragment" in self.markers

    def where(self):
        return f"{self.path}:{self.line}"


def blocks_of(path, rel):
    """The fenced blocks of a Markdown file (``` or ~~~, indented or not)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.groups()
        close = re.compile(r"^\s*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
        words = info.split()
        lang = words[0].lower() if words else ""
        out.append(Block(rel, i + 1, lang, words[1:], "\n".join(body) + "\n"))
        i = j + 1
    return out


def check_markers(block):
    unknown = [w for w in block.markers if w not in MARKERS]
    if unknown:
        return (f"unknown word(s) {' '.join(unknown)} after ```{block.lang}; the only marker is "
                "`fragment`")
    return None


def wrap_cxx(text, index):
    if re.search(r"\bint\s+main\s*\(", text):
        return CXX_PRELUDE + "\n#line 1\n" + text
    includes = [ln for ln in text.split("\n") if ln.lstrip().startswith("#include")]
    # #line keeps the compiler's line numbers those of the block (the includes' lines are
    # blank in the body).
    body = ["" if ln.lstrip().startswith("#include") else ln for ln in text.split("\n")]
    return (CXX_PRELUDE + "\n".join(includes) + "\n\n"
            f"[[maybe_unused]] static void halox_doc_block_{index}() {{\n#line 1\n" +
            "\n".join(body) + "\n}\n")


def public_identifiers(root):
    """Every identifier spelt in the public headers (a superset of what they declare)."""
    words = set()
    for path in glob.glob(os.path.join(root, "include", "halox", "**", "*.hpp"), recursive=True):
        words.update(re.findall(r"[A-Za-z_]\w*", open(path, encoding="utf-8").read()))
    return words


def check_cxx_names(block, identifiers):
    unknown = []
    for m in re.finditer(r"\b(?:halox|ops)((?:::[A-Za-z_]\w*)+)", block.text):
        parts = m.group(1).split("::")[1:]
        missing = [p for p in parts if p not in identifiers]
        if missing:
            unknown.append(m.group(0))
    if unknown:
        return (f"(a fragment) names {', '.join(sorted(set(unknown)))}, not declared in the public "
                "headers")
    return None


def check_cxx(block, index, args, tmp):
    if block.fragment:
        return check_cxx_names(block, args.identifiers)
    src = os.path.join(tmp, f"block{index}.cpp")
    with open(src, "w") as f:
        f.write(wrap_cxx(block.text, index))
    cmd = [args.cxx, "-std=c++17", "-fsyntax-only", "-DOMPI_SKIP_MPICXX", "-DMPICH_SKIP_MPICXX",
           "-Wno-unused-variable", "-Wno-unused-but-set-variable"]
    cmd += [f"-I{d}" for d in args.include] + [src]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode == 0:
        return None
    # The compiler's messages, with the block's lines named as the Markdown file's.
    msgs = []
    for ln in r.stderr.splitlines():
        m = re.match(re.escape(src) + r":(\d+):(\d+:)? (.*)", ln)
        if m:
            msgs.append(f"  {block.path}:{block.line + int(m.group(1))}: {m.group(3)}")
    msgs = [m for m in msgs if ": error:" in m or "error:" in m] or r.stderr.splitlines()[:10]
    return "does not compile (mark it ```cpp fragment if it is not meant to):\n" + "\n".join(
        msgs[:12])


def undefined_names(text):
    """Names a Python block reads but neither assigns, imports nor gets from builtins."""
    top = symtable.symtable(text, "<block>", "exec")
    defined = {s.get_name() for s in top.get_symbols()
               if s.is_assigned() or s.is_imported() or s.is_namespace()}
    known = defined | set(dir(builtins)) | {"__file__", "__name__"}
    missing = set()

    def visit(table):
        for s in table.get_symbols():
            if not s.is_referenced():
                continue
            if table is top or s.is_global():
                if s.get_name() not in known:
                    missing.add(s.get_name())
        for child in table.get_children():
            visit(child)

    visit(top)
    return sorted(missing)


def check_python(block):
    try:
        compile(block.text, block.where(), "exec")
    except SyntaxError as e:
        return f"Python syntax error at {block.path}:{block.line + (e.lineno or 0)}: {e.msg}"
    if block.fragment:
        return None
    missing = undefined_names(block.text)
    if missing:
        return (f"uses {', '.join(missing)} without defining them (mark it ```python fragment if "
                "it is not a complete script)")
    return None


def check_json(block):
    try:
        json.loads(block.text)
    except ValueError as e:
        return f"not valid JSON: {e}"
    return None


def quickstart_commands(root):
    text = open(os.path.join(root, "quickstart"), encoding="utf-8").read()
    case = text[text.rfind("\ncase ${1:-} in"):]
    return {m.group(1) for m in re.finditer(r"^  ([a-z][a-z-]*)(?: \|[^)]*)?\)", case, re.M)}


def check_shell(block, root, commands):
    r = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True)
    if r.returncode != 0:
        return "shell syntax error: " + r.stderr.strip().replace("bash: ", "")
    problems = []
    joined = re.sub(r"\\\n", " ", block.text)
    for ln in joined.split("\n"):
        ln = ln.split(" #")[0] if not ln.lstrip().startswith("#") else ""
        try:
            words = shlex.split(ln, comments=True)
        except ValueError:
            continue
        for k, w in enumerate(words):
            w = w.split("=", 1)[1] if re.match(r"^[A-Z_]+=", w) else w
            if not w.startswith(SOURCE_DIRS) or any(c in w for c in "*?$<>|"):
                continue
            if k > 0 and re.match(r"^(-o|--out\w*|--prefix|--log-json|--compare-log)$", words[k - 1]):
                continue  # what the command writes
            if w.startswith("./") and w.count("/") == 1 and "." in w[2:]:
                continue  # ./my_app, ./report.txt: the reader's files
            if not os.path.exists(os.path.join(root, w)):
                if w.startswith("./") and w != "./quickstart":
                    continue
                problems.append(f"names {w}, which does not exist in the source tree")
            if w == "./quickstart" and k + 1 < len(words) and words[k + 1] not in commands:
                problems.append(f"runs ./quickstart {words[k + 1]}, which quickstart does not "
                                f"have (it has: {', '.join(sorted(commands))})")
    return "; ".join(dict.fromkeys(problems)) or None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source_dir")
    ap.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    ap.add_argument("-I", dest="include", action="append", default=[])
    ap.add_argument("--list", action="store_true", help="list every block and how it is checked")
    args = ap.parse_args()
    root = os.path.abspath(args.source_dir)
    args.include = [d for d in args.include if d] or [os.path.join(root, "include")]
    args.identifiers = public_identifiers(root)

    files = ["README.md"] + sorted(os.path.relpath(p, root)
                                   for p in glob.glob(os.path.join(root, "docs", "*.md")))
    commands = quickstart_commands(root)
    failures, counts = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        index = 0
        for rel in files:
            for block in blocks_of(os.path.join(root, rel), rel):
                index += 1
                problem = check_markers(block)
                how = "not checked"
                if problem is None:
                    if block.lang in CXX_LANGS:
                        how = ("C++ fragment: names checked" if block.fragment else
                               "C++ compiled")
                        problem = check_cxx(block, index, args, tmp)
                    elif block.lang in PY_LANGS:
                        how = "Python syntax" if block.fragment else "Python syntax and names"
                        problem = check_python(block)
                    elif block.lang in JSON_LANGS:
                        how = "JSON parsed"
                        problem = check_json(block)
                    elif block.lang in SH_LANGS:
                        how = "shell syntax and paths"
                        problem = check_shell(block, root, commands)
                counts[how] = counts.get(how, 0) + 1
                if args.list:
                    print(f"{block.where()}: ```{block.lang} {' '.join(block.markers)}: {how}"
                          f"{': FAILED' if problem else ''}")
                if problem:
                    failures.append(f"{block.where()}: ```{block.lang} block {problem}")
    for f in failures:
        print(f)
    summary = ", ".join(f"{n} {how}" for how, n in sorted(counts.items()))
    if failures:
        print(f"check-doc-blocks: {len(failures)} block(s) failed ({summary})")
        return 1
    print(f"check-doc-blocks: all blocks pass ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
