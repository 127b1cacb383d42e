#!/usr/bin/env python3
"""Groups a `perf record` profile's self time by what the time was spent on, as BENCHMARKS.md's
breakdown of a gRPC request on the node does.

Each sampled function goes to the first group whose rule matches it, in this order: the kernel;
allocation and copies (malloc, free, jemalloc, mimalloc, memmove, byte buffers); HTTP/2 (h2,
hyper, http-body); gRPC framing and protobuf (tonic, prost); task hops (tokio, futures, actix,
wakers); the session (`locks_grpc`); the engine (`locks_agent`, `locks_server`, `locks_core`
and their hash maps); the rest is "other". The rules read symbol names only, so a function
inlined into another counts as its caller.

Usage: scripts/perf_groups.py PERF_DATA [--top N]. Prints each group's share of the samples;
with --top, the N largest functions of "other" too (to check that no rule misses a big one).
Needs `perf` on the path.
"""
import collections
import re
import subprocess
import sys

GROUPS = [
    ("kernel", None),
    (
        "alloc+copies",
        r"\bmi_|_mi_|\bje_|_rjem_|malloc|free|memmove|memcpy|realloc|_int_|calloc|alloc::raw_vec"
        r"|alloc::alloc|drop_in_place<alloc::vec|bytes::bytes_mut::|bytes::bytes::",
    ),
    ("http2", r"\bh2::|hyper::|hyper_util::|http_body|http::"),
    ("grpc+protobuf", r"tonic::|tonic_prost::|prost::|encoded_len|::encode|::merge|::decode"),
    (
        "task hops",
        r"tokio::|tokio_util::|futures_|futures::|actix|parking_lot|std::sync|core::task|[wW]aker",
    ),
    ("session", r"locks_grpc::"),
    ("engine", r"locks_agent::|locks_server::|locks_core::|hashbrown|petgraph"),
]
LINE = re.compile(r"\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)")


def group_of(dso: str, kind: str, symbol: str) -> str:
    """The group of one sampled function."""
    if kind == "k" or dso.startswith("[kernel"):
        return "kernel"
    for name, rule in GROUPS[1:]:
        if re.search(rule, symbol):
            return name
    return "other"


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    data = sys.argv[1]
    top = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--top" else 0
    report = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym", "--stdio",
         "-g", "none", "--percent-limit", "0"],
        capture_output=True, text=True, check=True,
    ).stdout
    shares = collections.OrderedDict((name, 0.0) for name, _ in GROUPS)
    shares["other"] = 0.0
    others = collections.Counter()
    for line in report.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        share, dso, kind, symbol = float(m.group(1)), m.group(2), m.group(3), m.group(4)
        group = group_of(dso, kind, symbol)
        shares[group] += share
        if group == "other":
            others[symbol[:100]] += share
    for name, share in shares.items():
        print(f"{name:14s} {share:5.1f} %")
    for symbol, share in others.most_common(top):
        print(f"    {share:5.2f} % {symbol}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
