#!/usr/bin/env python3
"""Regenerates the client's gRPC stubs, ``locks_client/_proto/``, from the repository's
``locks-grpc/proto/locks/v1/locks.proto``.

    python3 clients/python/generate.py           # rewrite locks_client/_proto/
    python3 clients/python/generate.py --check   # exit 1 if they differ from the .proto's

The stubs are checked in, so that neither installing nor importing the package needs a
generator. They are made by pinned generators (``grpcio-tools`` for the code, ``mypy-protobuf``
for the ``.pyi`` types; both in ``requirements-test.txt``): the same versions give the same
bytes, which is what lets a test compare the checked-in and installed stubs with fresh ones.
The generated code requires ``grpcio`` and ``protobuf`` at least as new as its generators
(``pyproject.toml`` says so); a newer generator would raise those floors for every user.

protoc writes the stubs as a package ``locks.v1``; here they live in ``locks_client._proto``,
so the gRPC module's import of the messages is made relative. The descriptor keeps its name
``locks/v1/locks.proto``, the name every other language's stubs of the API use.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "locks-grpc", "proto"))
PROTO = "locks/v1/locks.proto"
TARGET = os.path.join(HERE, "locks_client", "_proto")
# The generators' versions: the stubs' bytes, and the runtime floors in pyproject.toml, follow
# from them.
GRPCIO_TOOLS = "1.74.0"
MYPY_PROTOBUF = "5.1.0"
FILES = ("locks_pb2.py", "locks_pb2.pyi", "locks_pb2_grpc.py", "locks_pb2_grpc.pyi")

_ABSOLUTE = re.compile(r"^from locks\.v1 import (\w+) as (\w+)$", re.MULTILINE)


def _installed(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _plugin(name: str) -> str:
    """The path of the protoc plugin ``name`` installed beside this Python (a virtualenv's
    ``bin`` need not be on PATH)."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    found = beside if os.path.exists(beside) else shutil.which(name)
    if found is None:
        raise SystemExit(f"generate.py: no {name} (pip install mypy-protobuf=={MYPY_PROTOBUF})")
    return found


def generate(proto_root: str = PROTO_ROOT) -> dict[str, bytes]:
    """The stubs of ``proto_root``'s ``locks/v1/locks.proto``: file name -> contents. Raises
    ``SystemExit`` when the pinned generators are not the ones installed."""
    wanted = {"grpcio-tools": GRPCIO_TOOLS, "mypy-protobuf": MYPY_PROTOBUF}
    wrong = {d: _installed(d) for d, v in wanted.items() if _installed(d) != v}
    if wrong:
        have = ", ".join(f"{d} {v or 'missing'}" for d, v in wrong.items())
        pins = " ".join(f"{d}=={v}" for d, v in wanted.items())
        raise SystemExit(f"generate.py: needs {pins} (found {have}): pip install {pins}")
    with tempfile.TemporaryDirectory() as out:
        # A process of its own: protoc registers what it loads in this process's state.
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto_root}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
            f"--mypy_out={out}",
            f"--mypy_grpc_out={out}",
            PROTO,
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"generate.py: protoc failed:\n{done.stderr}")
        made = {}
        for name in FILES:
            with open(os.path.join(out, "locks", "v1", name), encoding="utf-8") as f:
                text = _ABSOLUTE.sub(r"from . import \1 as \2", f.read())
            if re.search(r"^\s*(from|import) locks\b", text, re.MULTILINE):
                raise SystemExit(f"generate.py: {name} still imports the package locks")
            made[name] = text.encode()
        return made


def differences(made: dict[str, bytes], directory: str = TARGET) -> list[str]:
    """The files of ``made`` whose copy in ``directory`` is missing or differs."""
    stale = []
    for name, contents in made.items():
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            stale.append(f"{name} (missing)")
            continue
        with open(path, "rb") as f:
            if f.read() != contents:
                stale.append(name)
    return stale


def main() -> None:
    """Writes the stubs (or, with ``--check``, exits 1 when they are stale)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args()
    made = generate()
    if args.check:
        stale = differences(made)
        if stale:
            sys.exit(f"stale stubs in {TARGET}: {', '.join(stale)}; run generate.py")
        print(f"{TARGET}: up to date with {os.path.join(PROTO_ROOT, PROTO)}")
        return
    for name, contents in made.items():
        with open(os.path.join(TARGET, name), "wb") as f:
            f.write(contents)
    print(f"wrote {', '.join(made)} to {TARGET}")


if __name__ == "__main__":
    main()
