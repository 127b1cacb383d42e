"""The one exception of the client, :class:`LocksError`, and its conversions from gRPC."""

import grpc


class LocksError(Exception):
    """A request the node refused, a call that got no answer in time, or a session that ended.

    ``code`` is a ``grpc.StatusCode`` (the node's, or the client's own: DEADLINE_EXCEEDED for a
    bound that ran out, ABORTED for a session whose lease expired); ``message`` says what went
    wrong.
    """

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def code_of(number):
    """The ``grpc.StatusCode`` of a status code number (UNKNOWN for a number it does not know)."""
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code
    return grpc.StatusCode.UNKNOWN


def from_rpc(error, where, timeout=None):
    """The :class:`LocksError` of a failed gRPC call ``error`` to ``where`` (an address), saying
    when the call's own bound of ``timeout`` seconds ran out."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and timeout is not None:
        return LocksError(code, f"no answer from {where} within {timeout:g} s")
    return LocksError(code, f"{where}: {details or code.name.lower()}")
