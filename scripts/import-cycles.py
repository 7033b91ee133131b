#!/usr/bin/env python3
"""Import circles between the top-level modules of each crate (docs/ARCHITECTURE.md).

For every crate of the workspace, lists the edges `A -> B`: a file of the top-level
module A (`src/A.rs` or `src/A/**`) names `crate::B` outside its tests. Then looks for
circles among those edges (A reaches B and B reaches A, directly or through others).
Prints each crate's edges and every circle, and exits 1 when there is one.

    scripts/import-cycles.py            every crate
    scripts/import-cycles.py -q         only the circles (and the verdict)
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES = ["src", "protocol/src", "os/src", "policy/src", "sandbox/src", "supervisor/src",
          "workers/src", "bench/src"]

# `crate::name` and the names inside `crate::{a, b::c}`.
PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
GROUP = re.compile(r"\bcrate::\{([^}]*)\}", re.S)
# Where a file's tests begin: `#[cfg(test)]` before a `mod`.
TESTS = re.compile(r"^\s*#\[cfg\(test\)\]\s*\n\s*(pub(\([a-z]+\))?\s+)?mod\s", re.M)


def product_text(path: Path) -> str:
    """The file without its test module and without comments."""
    text = path.read_text(encoding="utf-8")
    m = TESTS.search(text)
    if m:
        text = text[: m.start()]
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def top_modules(src: Path) -> set[str]:
    tops = {p.stem for p in src.glob("*.rs")} | {p.name for p in src.iterdir() if p.is_dir()}
    return tops - {"lib", "main"}


def edges_of(src: Path) -> dict[str, set[str]]:
    tops = top_modules(src)
    edges: dict[str, set[str]] = {t: set() for t in tops}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src)
        if f.name == "tests.rs" or "tests" in rel.parts[:-1]:
            continue
        top = rel.parts[0].removesuffix(".rs")
        if top not in tops:
            continue
        text = product_text(f)
        names = set(PATH.findall(text))
        for group in GROUP.findall(text):
            for item in group.split(","):
                head = item.strip().split("::", 1)[0].split(" ", 1)[0]
                if head:
                    names.add(head)
        for name in names:
            if name in tops and name != top:
                edges[top].add(name)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    quiet = "-q" in sys.argv[1:]
    bad = 0
    for crate in CRATES:
        src = ROOT / crate
        if not src.is_dir():
            continue
        edges = edges_of(src)
        found = circles(edges)
        if not quiet:
            print(f"== {crate}")
            for a in sorted(edges):
                if edges[a]:
                    print(f"  {a} -> {', '.join(sorted(edges[a]))}")
        for comp in found:
            bad += 1
            members = set(comp)
            inner = [f"{a} -> {b}" for a in comp for b in sorted(edges[a]) if b in members]
            print(f"CIRCLE in {crate}: {', '.join(comp)}  ({'; '.join(inner)})")
    print("import circles:", bad if bad else "none")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
