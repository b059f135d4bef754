"""Count how many public PyTorch programs use each PyTorch name.

    python tools/api_usage.py --source pytorch/examples@<commit>=<dir> [--source ...] \
        [--include 'GLOB' ...] -o tools/data/api_usage.json

Each source is a checkout of a repository of programs (the repository and commit are
recorded with the counts). Every ``.py`` file (and the code cells of ``.ipynb`` files) under
it that matches an ``--include`` glob (all files when none is given) is parsed, its imports
of ``torch`` resolved (``import torch.nn as nn``, ``from torch.nn import functional as F``,
``from torch.utils.data import DataLoader``), and each attribute chain rooted in such a name
counted under its full PyTorch name (``nn.Conv2d`` -> ``torch.nn.Conv2d``). A method or
property of a name in PyTorch's ``Tensor`` (``x.view(...)``, ``x.shape``) called on anything
else counts as ``torch.Tensor.<name>``: the scan cannot know types, so a few names that are
also common methods of Python's own types are left out (`AMBIGUOUS`). A file counts once per
name: the numbers are "programs that use it".
"""
from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES_FILE = os.path.join(HERE, "data", "pytorch_api.json")
# Tensor methods that are also everyday methods of str/list/dict/file objects
AMBIGUOUS = {"split", "sort", "index", "count", "copy", "type", "data", "apply", "map", "values", "name",
             "resize"}


def _tensor_names() -> set:
    with open(NAMES_FILE) as f:
        return set(json.load(f)["namespaces"]["torch.Tensor"])


def _dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def names_used(source: str, tensor_names: set) -> set:
    """The PyTorch names one program's source uses (see the module docstring)."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    used: set = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch" or a.name.startswith("torch."):
                    if a.asname:
                        aliases[a.asname] = a.name
                    else:
                        aliases["torch"] = "torch"
                    used.add(a.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and (
                node.module == "torch" or node.module.startswith("torch.")):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                aliases[a.asname or a.name] = full
                used.add(full)
    # the outermost attribute of each chain: mark inner ones first
    inner = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            inner.add(id(node.value))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        dotted = _dotted(node)
        root = dotted.split(".", 1)[0] if dotted else None
        if id(node) not in inner and root in aliases:
            used.add(aliases[root] + dotted[len(root):])
        elif node.attr in tensor_names and node.attr not in AMBIGUOUS:
            base = _dotted(node.value)
            if base == "self":   # a module's attribute (self.relu = nn.ReLU()), not a tensor's
                continue
            if base is None or base.split(".", 1)[0] not in aliases:
                used.add(f"torch.Tensor.{node.attr}")
    for node in ast.walk(tree):   # bare names imported from torch modules and called
        if isinstance(node, ast.Name) and node.id in aliases:
            used.add(aliases[node.id])
    return used


def _sources_of(path: str) -> str:
    if path.endswith(".ipynb"):
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
        cells = ["".join(c.get("source", "")) for c in nb.get("cells", []) if c.get("cell_type") == "code"]
        # notebook magics and shell escapes are not Python
        return "\n".join(line for c in cells for line in c.splitlines()
                         if not line.lstrip().startswith(("%", "!")))
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def scan(root: str, include: list, tensor_names: set) -> tuple[Counter, int]:
    counts: Counter = Counter()
    files = 0
    for dirpath, _, filenames in os.walk(root):
        for fn in sorted(filenames):
            if not fn.endswith((".py", ".ipynb")):
                continue
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, root)
            if include and not any(fnmatch.fnmatch(rel, g) for g in include):
                continue
            try:
                used = names_used(_sources_of(path), tensor_names)
            except (SyntaxError, ValueError, json.JSONDecodeError):
                continue
            if not any(u.startswith("torch") and not u.startswith("torch.Tensor.") for u in used):
                continue     # not a PyTorch program
            files += 1
            counts.update(used)
    return counts, files


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", action="append", required=True,
                    help="REPO@COMMIT=DIR: a checkout of REPO at COMMIT")
    ap.add_argument("--include", action="append", default=[],
                    help="REPO:GLOB: only files of REPO whose relative path matches GLOB")
    ap.add_argument("-o", "--output", default=os.path.join(HERE, "data", "api_usage.json"))
    args = ap.parse_args(argv)
    tensor_names = _tensor_names()
    total: Counter = Counter()
    sources = []
    for spec in args.source:
        ident, _, root = spec.partition("=")
        repo, _, commit = ident.partition("@")
        include = [g.split(":", 1)[1] for g in args.include if g.split(":", 1)[0] == repo]
        counts, files = scan(root, include, tensor_names)
        sources.append({"repo": repo, "commit": commit, "include": include, "programs": files})
        total.update(counts)
    out = {"sources": sources, "programs": sum(s["programs"] for s in sources),
           "counts": dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))}
    with open(args.output, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{out['programs']} programs, {len(total)} names -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
