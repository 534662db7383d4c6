"""OAUTHBEARER against a JWKS (`sasl.oauthbearer.jwks.endpoint.url`), on a real broker with confluent-kafka handing
signed tokens from its `oauth_cb`: a token signed by a JWKS key is accepted, with the session ending at its expiry
(KIP-368); a bad signature, another issuer's key or an expired token is refused with SASL_AUTHENTICATION_FAILED and
nothing is written."""
from __future__ import annotations

import base64
import json
import time
import uuid

import pytest

from tests.conftest import free_port
from tests.integration.rawclient import RawClient
from tests.unit.test_sasl_mechanisms import b64url_int, sign


@pytest.fixture(scope="module")
def keys():
    from cryptography.hazmat.primitives.asymmetric import rsa
    return rsa.generate_private_key(65537, 2048), rsa.generate_private_key(65537, 2048)


@pytest.fixture(scope="module")
def jwks_broker(tmp_path_factory, keys):
    from tests.conftest import BrokerProcess
    root = tmp_path_factory.mktemp("jwks")
    pub = keys[0].public_key().public_numbers()
    (root / "jwks.json").write_text(json.dumps({"keys": [
        {"kty": "RSA", "kid": "k1", "use": "sig", "n": b64url_int(pub.n), "e": b64url_int(pub.e)}]}))
    port = free_port()
    prefix = "listener.name.sasl_plaintext.oauthbearer."
    b = BrokerProcess(root / "broker", {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        prefix + "sasl.oauthbearer.jwks.endpoint.url": f"file://{root / 'jwks.json'}",
        prefix + "sasl.oauthbearer.expected.audience": "kafka",
        prefix + "sasl.oauthbearer.expected.issuer": "https://idp.example.com"})
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{port}"
    b.sasl = f"127.0.0.1:{port}"
    b.start()
    yield b
    assert b.stop() == 0
    assert "Traceback" not in b.log_text()


def token(key, lifetime_s: int = 600, kid: str = "k1", **claims) -> tuple[str, float]:
    now = int(time.time())
    body = {"sub": "alice", "iat": now - 5, "exp": now + lifetime_s, "iss": "https://idp.example.com",
            "aud": "kafka", **claims}
    return sign(key, "RS256", kid, body), float(now + lifetime_s)


def produce(b, make_token, n: int = 5):
    from confluent_kafka import KafkaError, Producer
    errors = []
    p = Producer({"bootstrap.servers": b.sasl, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": lambda _config: make_token(),
                  "error_cb": errors.append, "message.timeout.ms": 3000})
    topic = f"jwks-{uuid.uuid4().hex[:8]}"
    for i in range(n):
        p.produce(topic, b"v%d" % i)
    left = p.flush(15)
    return topic, left, [e for e in errors if e.code() == KafkaError._AUTHENTICATION]


def test_token_signed_by_a_jwks_key(jwks_broker, keys):
    topic, left, auth_errors = produce(jwks_broker, lambda: token(keys[0]))
    assert left == 0 and not auth_errors
    with RawClient(jwks_broker.bootstrap) as c:
        r = c.request(2, 1, {"replica_id": -1, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "timestamp": -1}]}]})
        assert r.topics[0].partitions[0].offset == 5


@pytest.mark.parametrize("case", ["bad signature", "another key", "expired", "wrong audience"])
def test_bad_tokens_are_refused(jwks_broker, keys, case):
    def make():
        if case == "bad signature":
            value, exp = token(keys[0])
            head, claims, sig = value.split(".")
            forged = base64.urlsafe_b64encode(json.dumps({"sub": "admin", "iat": 1, "exp": int(exp),
                                                          "iss": "https://idp.example.com", "aud": "kafka"}).encode())
            return f"{head}.{forged.rstrip(b'=').decode()}.{sig}", exp
        if case == "another key":
            return token(keys[1])
        if case == "expired":
            value, _ = token(keys[0], lifetime_s=-120)
            return value, time.time() + 60
        return token(keys[0], aud="other")
    topic, left, auth_errors = produce(jwks_broker, make, n=1)
    assert auth_errors, case
    with RawClient(jwks_broker.bootstrap) as c:
        assert topic not in {t.name for t in c.request(3, 1, {"topics": None}).topics}


def test_session_ends_with_the_token(jwks_broker, keys):
    """SaslAuthenticate answers the token's remaining lifetime as the session lifetime."""
    from protocol.sasl.oauthbearer import OAuthBearerClient
    value, _ = token(keys[0], lifetime_s=30)
    client = OAuthBearerClient(value)
    with RawClient(jwks_broker.sasl) as c:
        assert c.request(17, 1, {"mechanism": "OAUTHBEARER"}).error_code == 0
        resp = c.request(36, 2, {"auth_bytes": client.initial()})
        assert resp.error_code == 0 and 25 <= resp.session_lifetime.total_seconds() <= 30


def test_jwks_from_an_endpoint_refreshed(tmp_path, keys):
    """`sasl.oauthbearer.jwks.endpoint.url` on HTTP(S): fetched at start and again every
    sasl.oauthbearer.jwks.endpoint.refresh.ms, so a key the identity provider rotates in is accepted."""
    import http.server
    import threading
    from protocol.sasl.oauthbearer import OAuthBearerClient
    from tests.conftest import BrokerProcess

    def jwks_of(*ks):
        out = []
        for kid, k in ks:
            pub = k.public_key().public_numbers()
            out.append({"kty": "RSA", "kid": kid, "use": "sig", "n": b64url_int(pub.n), "e": b64url_int(pub.e)})
        return json.dumps({"keys": out}).encode()
    served = {"body": jwks_of(("k1", keys[0]))}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(served["body"])

        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    prefix = "listener.name.sasl_plaintext.oauthbearer."
    b = BrokerProcess(tmp_path / "broker", {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        prefix + "sasl.oauthbearer.jwks.endpoint.url": f"http://127.0.0.1:{server.server_port}/jwks",
        prefix + "sasl.oauthbearer.jwks.endpoint.refresh.ms": "300",
        prefix + "sasl.oauthbearer.expected.audience": "kafka"})
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{port}"
    b.start()

    def login(key, kid) -> int:
        with RawClient(f"127.0.0.1:{port}") as c:
            assert c.request(17, 1, {"mechanism": "OAUTHBEARER"}).error_code == 0
            r = c.request(36, 2, {"auth_bytes": OAuthBearerClient(token(key, kid=kid)[0]).initial()})
            if r.error_code or not r.auth_bytes:
                return int(r.error_code)                   # accepted: no challenge
            return int(c.request(36, 2, {"auth_bytes": b"\x01"}).error_code)   # the client's answer to the JSON error
    try:
        assert login(keys[0], "k1") == 0
        assert login(keys[1], "k2") == 58                 # not (yet) in the key set
        served["body"] = jwks_of(("k1", keys[0]), ("k2", keys[1]))
        deadline = time.monotonic() + 10
        while login(keys[1], "k2") != 0:
            assert time.monotonic() < deadline, "the rotated key was never accepted"
            time.sleep(0.2)
    finally:
        server.shutdown()
        assert b.stop() == 0
    assert "Traceback" not in b.log_text()
