"""The one exception of the client, :class:`LocksError`, and its conversions from gRPC."""

from __future__ import annotations

import grpc


class LocksError(Exception):
    """A request the node refused, a call that got no answer in time, or a session that ended.

    ``code`` is a ``grpc.StatusCode`` (the node's, or the client's own: DEADLINE_EXCEEDED for a
    bound that ran out, ABORTED for a session whose lease expired); ``message`` says what went
    wrong.
    """

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        """The error ``code: message``."""
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    def again(self) -> LocksError:
        """A new error with the same code and message: what a call raises when it hands on an
        error that another call raised first (each raise gets a traceback of its own)."""
        return LocksError(self.code, self.message)


def code_of(number: int) -> grpc.StatusCode:
    """The ``grpc.StatusCode`` of a status code number (UNKNOWN for a number it does not know)."""
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code
    return grpc.StatusCode.UNKNOWN


def from_rpc(error: grpc.RpcError, where: str, timeout: float | None = None) -> LocksError:
    """The :class:`LocksError` of a failed gRPC call ``error`` to ``where`` (an address), saying
    when the call's own bound of ``timeout`` seconds ran out."""
    try:
        code, details = error.code(), error.details()
    except AttributeError:  # an RpcError that is not a call's outcome
        code, details = grpc.StatusCode.UNKNOWN, str(error)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and timeout is not None:
        return LocksError(code, f"no answer from {where} within {timeout:g} s")
    return LocksError(code, f"{where}: {details or code.name.lower()}")
