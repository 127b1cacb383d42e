#!/usr/bin/env python3
"""Finds import circles between the source files of each crate of the workspace.

File A imports file B when a `use` or a path in A (`crate::...`, `super::...`, `self::...`)
names an item defined in B, or module B itself; a re-export (`pub use`, `pub(crate) use`) is
followed to the file that defines the item, so importing a name through a parent module is an
import of the file that defines it. A circle is a strongly connected set of two or more files.
A module's file owns the files of its submodules: its uses of them (declarations,
re-exports, items) are not counted, their uses of it are.

Usage: scripts/import_cycles.py [workspace root]. Prints each circle and exits 1 if there is
one, 0 otherwise.
"""
import os
import re
import sys

ITEM = re.compile(
    r"^(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+|async\s+|const\s+)*"
    r"(?:fn|struct|enum|trait|type|const|static|union)\s+([A-Za-z_][A-Za-z0-9_]*)",
    re.M,
)
MACRO = re.compile(r"^\s*macro_rules!\s*([A-Za-z_][A-Za-z0-9_]*)", re.M)
INLINE_MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{", re.M)
USE = re.compile(r"\buse\s+([^;]+);")
PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def strip(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def expand(tree):
    """`a::{b, c::{d, e}}` -> [[a, b], [a, c, d], [a, c, e]] (aliases dropped)."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, s):
        i = s.find("{")
        if i < 0:
            for part in split(s):
                part = part.split("as")[0] if "as" in part and "::" not in part else part
                segs = [x for x in re.split(r"::", re.sub(r"as[A-Za-z_][A-Za-z0-9_]*$", "", part)) if x]
                out.append(prefix + segs)
            return
        head = [x for x in s[:i].split("::") if x]
        body = s[i + 1 : s.rfind("}")]
        for part in split(body):
            walk(prefix + head, part)

    def split(s):
        depth, cur, parts = 0, "", []
        for ch in s:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch
        if cur:
            parts.append(cur)
        return parts

    walk([], tree)
    return out


class Crate:
    def __init__(self, src):
        self.files = {}
        for d, _, names in os.walk(src):
            for n in names:
                if n.endswith(".rs"):
                    p = os.path.join(d, n)
                    rel = os.path.relpath(p, src)[:-3].split(os.sep)
                    if rel[0] == "bin":
                        continue
                    if rel == ["lib"] or rel == ["main"]:
                        rel = []
                    elif rel[-1] == "mod":
                        rel = rel[:-1]
                    self.files[tuple(rel)] = p
        self.text = {m: strip(open(p).read()) for m, p in self.files.items()}
        self.defs = {m: set(ITEM.findall(t)) | set(MACRO.findall(t)) for m, t in self.text.items()}
        self.inline = {m: set(INLINE_MOD.findall(t)) for m, t in self.text.items()}
        self.reexports = {}
        for m, t in self.text.items():
            r = {}
            for tree in USE.findall(t):
                for segs in expand(tree):
                    if segs and segs[-1] not in ("*", "self"):
                        r.setdefault(segs[-1], segs)
            self.reexports[m] = r

    def base(self, m, head):
        if head == "crate":
            return []
        if head == "self":
            return list(m)
        return list(m[:-1])

    def resolve(self, m, segs, seen=None):
        """The file an absolute-from-`m` path names, or None for outside the crate."""
        seen = seen or set()
        if segs and segs[0] not in ("crate", "super", "self"):
            # A path relative to the module (`use child::Item;`).
            if tuple(list(m) + [segs[0]]) in self.files or segs[0] in self.inline.get(m, ()):
                segs = ["self"] + segs
        if not segs or segs[0] not in ("crate", "super", "self"):
            return None
        cur = self.base(m, segs[0])
        rest = segs[1:]
        while rest and rest[0] == "super":
            cur, rest = cur[:-1], rest[1:]
        while rest:
            seg = rest[0]
            if seg in ("*", "self"):
                break
            if tuple(cur + [seg]) in self.files:
                cur, rest = cur + [seg], rest[1:]
                continue
            f = tuple(cur)
            if f not in self.files:
                return None
            if seg in self.inline[f]:
                rest = rest[1:]
                continue
            if seg in self.defs[f]:
                return f
            re_ = self.reexports[f].get(seg)
            if re_ and (f, seg) not in seen:
                seen.add((f, seg))
                return self.resolve(f, re_, seen) or f
            return f
        return tuple(cur) if tuple(cur) in self.files else None

    def edges(self):
        out = {}
        for m, t in self.text.items():
            targets = set()
            for tree in USE.findall(t):
                for segs in expand(tree):
                    r = self.resolve(m, segs)
                    if r is not None and r != m:
                        targets.add(r)
            for head, rest in PATH.findall(USE.sub("", t)):
                r = self.resolve(m, [head] + [x for x in rest.split("::") if x])
                if r is not None and r != m:
                    targets.add(r)
            # A module split over files is one unit: its file owns the files of its
            # submodules (declares them, re-exports and uses their items), which is not a
            # circle with their use of it.
            out[m] = {t for t in targets if t[: len(m)] != m}
        return out


def circles(edges):
    index, low, stack, on, found, n = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(100000)

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
                found.append(comp)

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    bad = 0
    for name in sorted(os.listdir(root)):
        src = os.path.join(root, name, "src")
        if not os.path.isfile(os.path.join(root, name, "Cargo.toml")) or not os.path.isdir(src):
            continue
        crate = Crate(src)
        edges = crate.edges()
        for comp in circles(edges):
            bad += 1
            names = sorted(crate.files[m] for m in comp)
            print(f"{name}: {len(comp)} files import each other:")
            for m in sorted(comp):
                print(f"  {os.path.relpath(crate.files[m], root)} -> " + ", ".join(
                    sorted(os.path.relpath(crate.files[t], root) for t in edges[m] if t in comp)))
    print(f"{bad} import circle(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
