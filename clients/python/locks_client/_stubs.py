"""The locks.v1 stubs, generated from the repository's .proto with grpcio-tools.

They are generated into ``locks_client/_generated/`` on first import (and again when the
.proto is newer than them), so the .proto stays the one source of the API. ``LOCKS_PROTO_DIR``
names another directory holding ``locks/v1/locks.proto``.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_OUT = os.path.join(_HERE, "_generated")
_DEFAULT_PROTO_DIR = os.path.normpath(
    os.path.join(_HERE, "..", "..", "..", "locks-grpc", "proto")
)


def _generate():
    proto_dir = os.environ.get("LOCKS_PROTO_DIR", _DEFAULT_PROTO_DIR)
    proto = os.path.join(proto_dir, "locks", "v1", "locks.proto")
    if not os.path.exists(proto):
        raise ImportError(f"locks_client: no {proto} (set LOCKS_PROTO_DIR)")
    made = os.path.join(_OUT, "locks", "v1", "locks_pb2_grpc.py")
    if os.path.exists(made) and os.path.getmtime(made) >= os.path.getmtime(proto):
        return
    from grpc_tools import protoc
    import importlib.resources

    os.makedirs(_OUT, exist_ok=True)
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{proto_dir}",
            f"-I{well_known}",
            f"--python_out={_OUT}",
            f"--grpc_python_out={_OUT}",
            proto,
        ]
    )
    if code != 0:
        raise ImportError(f"locks_client: protoc failed on {proto} ({code})")


_generate()
if _OUT not in sys.path:
    sys.path.insert(0, _OUT)

from locks.v1 import locks_pb2 as pb  # noqa: E402
from locks.v1 import locks_pb2_grpc as pb_grpc  # noqa: E402

__all__ = ["pb", "pb_grpc"]
