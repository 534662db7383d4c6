"""SaslHandshake (key 17). On a SASL listener the connection's authenticator answers it before authentication and
for re-authentication (broker/security/sasl_authenticator.py); reaching this handler means a PLAINTEXT or SSL
listener, where Kafka's KafkaApis answers ILLEGAL_SASL_STATE."""
from __future__ import annotations

from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 17
VERSIONS = (0, 1)
DECODABLE = (0, 1)


def handle(broker, req):
    return kio_codec.encode_response(API_KEY, req.api_version, {"error_code": ErrorCode.illegal_sasl_state,
                                                                "mechanisms": []})
