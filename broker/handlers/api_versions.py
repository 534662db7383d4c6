"""ApiVersions (key 18): the supported ranges, derived from every handler module's VERSIONS declaration. The
controller's APIs (CONTROLLER_ONLY: registration, heartbeats, AlterPartition) are served but not advertised to
clients, as Kafka's broker listener does not list them; nor are Strata's own APIs (ADVERTISED = False), which only
Strata's tools call."""
from __future__ import annotations

from protocol import kio_codec
from protocol.wire import I16, I32
from protocol.errors import ErrorCode

API_KEY = 18
VERSIONS = (0, 4)
DECODABLE = (0, 4)


FINALIZED_FEATURES_EPOCH = 1     # the levels are fixed by configuration, so they never change while clients run


_ANSWERS: dict[tuple, bytes] = {}     # every client asks on every connection; the answer changes only with these keys


def handle(broker, req):
    key = (id(broker.handlers), req.api_version, broker.transactions.transaction_version)
    answer = _ANSWERS.get(key)
    if answer is None:
        answer = _ANSWERS[key] = _answer(broker, req.api_version)
    return answer


def _answer(broker, version: int) -> bytes:
    keys = [{"api_key": k, "min_version": m.VERSIONS[0], "max_version": m.VERSIONS[1]}
            for k, m in sorted(broker.handlers.items())
            if not getattr(m, "CONTROLLER_ONLY", False) and getattr(m, "ADVERTISED", True)]
    # the one feature clients act on: `transaction.version` (KIP-890 part 2; Kafka's TransactionVersion 0-2)
    level = broker.transactions.transaction_version
    return kio_codec.encode_response(API_KEY, version, {
        "error_code": 0, "api_keys": keys, "throttle_time": 0,
        "supported_features": [{"name": "transaction.version", "min_version": 0, "max_version": 2}],
        "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
        "finalized_features": [{"name": "transaction.version", "max_version_level": level,
                                "min_version_level": level}] if level else [],
    })


def unsupported_version_reply() -> bytes:
    """Kafka's fallback for an ApiVersions version it does not know: a v0 body with ErrorCode.unsupported_version and only
    ApiVersions' own range, so the client retries with a version it finds there (KIP-511)."""
    return I16.pack(ErrorCode.unsupported_version) + I32.pack(1) + I16.pack(API_KEY) + I16.pack(VERSIONS[0]) + I16.pack(VERSIONS[1])
