"""Kafka's error codes, from one place: kio's ErrorCode, generated from Kafka's protocol (an IntEnum, so a member
is the int the wire carries). Handlers and layers below them use these names instead of declaring numbers."""
from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode"]


class ApiError(Exception):
    """An error a client sees as a Kafka error code, raised by any layer (storage, replication) and turned into the
    response's error_code (and error_message, where the version has one) by the handler."""
    error_code: int = ErrorCode.unknown_server_error

    def __init__(self, error_code: int | None = None, message: str | None = None):
        super().__init__(message)
        if error_code is not None:
            self.error_code = error_code
