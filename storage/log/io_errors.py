"""I/O errors of a partition log (Kafka's KafkaStorageException and LocalLog.maybeHandleIOException): an OSError in a
log write takes the log offline; storage/log/log.py decorates its reads and writes with `handles_io_errors`."""
from __future__ import annotations

import functools

from protocol.errors import ErrorCode


class KafkaStorageError(OSError):
    """The log failed an I/O operation earlier (Kafka's KafkaStorageException): it is offline and every call on it
    answers this, KAFKA_STORAGE_ERROR, until the broker restarts and recovers it from disk."""
    error_code = ErrorCode.kafka_storage_error


def handles_io_errors(method):
    """Kafka's LocalLog.maybeHandleIOException: an OSError (ENOSPC, EIO...) half-way through a write leaves the
    in-memory state (log end, indexes, producer state) possibly ahead of or behind the file, so the log goes offline
    at once, reports it through `on_io_error` (the broker's log-dir failure handling), and answers KafkaStorageError
    from then on: a write that failed is never acknowledged, nor built on, nor read back."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self.failed is not None:
            raise KafkaStorageError(f"{self.dir.name} is offline after an I/O error: {self.failed}")
        try:
            return method(self, *args, **kwargs)
        except KafkaStorageError:
            raise
        except OSError as e:
            self.fail(e)
            raise KafkaStorageError(f"{method.__name__} on {self.dir.name} failed: {e}") from e
    return wrapper
