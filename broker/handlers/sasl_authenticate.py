"""SaslAuthenticate (key 36). The connection's authenticator answers it while a SASL exchange runs
(broker/security/sasl_authenticator.py); reaching this handler means there is no exchange to continue, and Kafka's
KafkaApis answers ILLEGAL_SASL_STATE."""
from __future__ import annotations

from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 36
VERSIONS = (0, 2)
DECODABLE = (0, 2)


def handle(broker, req):
    return kio_codec.encode_response(API_KEY, req.api_version, {
        "error_code": ErrorCode.illegal_sasl_state, "auth_bytes": b"", "session_lifetime": 0,
        "error_message": "SaslAuthenticate request received after successful authentication"})
