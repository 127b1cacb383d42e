"""What the thread-based and the asyncio clients share: TLS settings, addresses, channel
options, the order in which a call tries the nodes, and the unary requests."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Union

import grpc

from locks_client import lease as _lease
from locks_client._proto import locks_pb2 as pb
from locks_client.errors import LocksError

Pem = Union[bytes, str, "os.PathLike[str]"]
"""PEM data, or the path of a file holding it."""

# Failures that say a node cannot be reached (try the next address), not that it refused.
_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@dataclass
class TLS:
    """TLS to the node (its ``--client-tls-*`` flags): ``ca``, the PEM of the CA its certificate
    must chain to; ``server_name``, the name it must carry; ``cert`` and ``key``, this client's
    PEM certificate chain and key, for a node that asks for client certificates. Each is bytes
    or a path to a file."""

    ca: Pem
    server_name: str = "locks"
    cert: Pem | None = None
    key: Pem | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        """The channel credentials (the files read now)."""
        return grpc.ssl_channel_credentials(
            root_certificates=_pem(self.ca),
            private_key=_pem(self.key),
            certificate_chain=_pem(self.cert),
        )


def _pem(value: Pem | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    with open(value, "rb") as f:
        return f.read()


def addresses(addr: str | Sequence[str]) -> list[str]:
    """The node addresses of ``addr``: one, a list, or a comma-separated string. Raises
    ``ValueError`` for none."""
    listed = addr.split(",") if isinstance(addr, str) else list(addr)
    found = [a.strip() for a in listed if a.strip()]
    if not found:
        raise ValueError("no node address")
    return found


def channel_options(keepalive: float, tls: TLS | None) -> list[tuple[str, int | str]]:
    """The options of a channel whose connection counts as gone after ``keepalive`` seconds
    of silence: a ping every half of it, each answered within the other half."""
    half = max(1, int(keepalive * 500))
    options: list[tuple[str, int | str]] = [
        ("grpc.keepalive_time_ms", half),
        ("grpc.keepalive_timeout_ms", half),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    if tls is not None:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    return options


Metadata = tuple[tuple[str, str], ...]


def metadata(token: str | None) -> Metadata:
    """The metadata every call carries: the node's token, if it has one."""
    return (("authorization", f"Bearer {token}"),) if token else ()


class Failover:
    """The attempts of one call over ``count`` nodes: first the one that answered last
    (``first``), then the next ones while they cannot be reached, within ``timeout`` seconds
    in all, each getting an equal share of what is left."""

    def __init__(self, count: int, first: int, timeout: float) -> None:
        """The attempts of a call bounded by ``timeout`` seconds."""
        self.count = count
        self.first = first
        self.deadline = _lease.now() + timeout
        self.failures: list[LocksError] = []

    def attempts(self) -> Iterator[tuple[int, float]]:
        """The node to try next (its index) and the seconds it gets, while time is left."""
        for i in range(self.count):
            left = self.deadline - _lease.now()
            if left <= 0:
                return
            yield (self.first + i) % self.count, left / (self.count - i)

    def failed(self, error: LocksError) -> None:
        """An attempt failed with ``error``: raised again unless it says the node cannot be
        reached (then the next one is tried)."""
        if error.code not in _UNREACHABLE:
            raise error
        self.failures.append(error)

    def error(self) -> LocksError:
        """What the call raises when no attempt succeeded."""
        if self.count == 1 and self.failures:
            return self.failures[0]
        tried = "; ".join(f.message for f in self.failures) or "no time left"
        code = self.failures[-1].code if self.failures else grpc.StatusCode.DEADLINE_EXCEEDED
        return LocksError(code, f"none of {self.count} nodes answered ({tried})")


def table_request(max_locks_per_node: int, wait: float | None) -> pb.TableRequest:
    """The ``Table`` request: ``wait`` (seconds) for the other nodes, the node's default when
    ``None``."""
    return pb.TableRequest(
        max_locks_per_node=max_locks_per_node, timeout_ms=int((wait or 0) * 1000)
    )


def graph_request(wait: float | None) -> pb.GraphRequest:
    """The ``Graph`` request (``wait`` as for :func:`table_request`)."""
    return pb.GraphRequest(timeout_ms=int((wait or 0) * 1000))


def table_bound(default: float, timeout: float | None, wait: float | None) -> float:
    """The bound on a ``Table`` or ``Graph`` call: ``timeout``, or the client's ``default``,
    or the node's wait (2 s when ``None``) plus 5 s when that is longer."""
    if timeout is not None:
        return timeout
    return max(default, (wait if wait is not None else 2.0) + 5)
