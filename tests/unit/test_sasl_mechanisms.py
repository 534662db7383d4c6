"""SASL mechanisms: full client/server exchanges, Kafka's own test expectations (PlainSaslServerTest,
ScramSaslServerTest, ScramFormatterTest, OAuthBearerClientInitialResponseTest, OAuthBearerUnsecuredValidator-
CallbackHandlerTest, JaasContextTest), the RFC 7677 vector, JWKS validation, and fuzzing every server state."""
from __future__ import annotations

import base64
import json
import time

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from protocol.sasl import SaslAuthenticationFailed, client_from_config
from protocol.sasl.jaas import parse_jaas_config, single_entry
from protocol.sasl.oauthbearer import (JwksValidator, OAuthBearerClient, OAuthBearerServer, TokenValidationError,
                                       UnsecuredJwsValidator, make_unsecured_token, parse_client_initial_response)
from protocol.sasl.plain import PlainClient, PlainServer, plain_users_from_jaas, users_verifier
from protocol.sasl.scram import (ScramClient, ScramCredential, ScramServer, make_credential, sasl_name,
                                 username_of)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW_MS = 1_729_787_342_123


def generic(mechanism: str) -> str:
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


def run(client, server) -> bytes | None:
    """Drive an exchange as the Kafka client/broker authenticators do; returns the last server token."""
    token = client.initial()
    while True:
        challenge = server.evaluate(token)
        if server.complete and client.complete:
            return challenge
        token = client.evaluate(challenge)
        if token is None:
            return challenge


def only_sasl_failures(server, data: bytes) -> None:
    try:
        assert isinstance(server.evaluate(data), bytes)
    except SaslAuthenticationFailed as e:
        assert isinstance(e.message, str) and e.message


# ---- JAAS ----

def test_jaas_kafka_cases():
    [entry] = parse_jaas_config('test.testQuotedOptionValue required propName="prop value" '
                                'propName2="value1 = 1, value2 = 2";')
    assert entry == ("test.testQuotedOptionValue", "required",
                     {"propName": "prop value", "propName2": "value1 = 1, value2 = 2"})
    assert parse_jaas_config('test.m Optional "prop name"=propValue;')[0].options == {"prop name": "propValue"}
    assert parse_jaas_config("test.m required option1=\"3\";")[0].options == {"option1": "3"}
    assert parse_jaas_config("test.x requisite;")[0] == ("test.x", "requisite", {})
    entries = parse_jaas_config(" ".join(f"test.Module{i} required index=Index{i} module=Module{i};" for i in range(3)))
    assert [e.options["module"] for e in entries] == ["Module0", "Module1", "Module2"]
    for bad, message in [("  required option1=value1;", "control flag"),
                         ("test.loginModule option1=value1;", "Invalid login module control flag"),
                         ("loginModule required option1;", "Value not specified for key 'option1'"),
                         ("test.testMissingSemicolon required option1=value1", "not terminated by semi-colon"),
                         ("test.testNumericOptionWithoutQuotes required option1=3;", "Value not specified"),
                         ("test.testInvalidControlFlag { option1=3;", "control flag is not available"),
                         ("", "Login module not specified")]:
        with pytest.raises(ValueError, match=message):
            parse_jaas_config(bad)


def test_jaas_tokenizer_details():
    text = ('// a comment\n org.Mod /* block */ REQUIRED a="x\\ty\\101\\"q" b=\'single\' c=word-with.dots$_ '
            'd="unterminated\n e=f;')
    assert parse_jaas_config(text)[0].options == {"a": 'x\tyA"q', "b": "single", "c": "word-with.dots$_",
                                                  "d": "unterminated", "e": "f"}
    with pytest.raises(ValueError, match="should be 1 module"):
        single_entry("a required; b required;")
    with pytest.raises(ValueError, match="is not allowed"):
        single_entry("com.sun.security.auth.module.JndiLoginModule required;")


# ---- PLAIN ----

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="a b";')


def plain_server() -> PlainServer:
    return PlainServer(users_verifier(plain_users_from_jaas(parse_jaas_config(PLAIN_JAAS)[0].options)))


def test_plain_exchange():
    server = plain_server()
    assert run(PlainClient("alice", "a b"), server) == b""
    assert server.complete and server.authorization_id == "alice" and server.session_lifetime_ms is None
    server = plain_server()
    assert server.evaluate(b"alice\0alice\0a b") == b"" and server.authorization_id == "alice"


@pytest.mark.parametrize("message, error", [
    (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
    (b"\0bob\0a b", "Authentication failed: Invalid username or password"),
    (b"admin\0alice\0a b",
     "Authentication failed: Client requested an authorization id that is different from username"),
    # Kafka's PlainSaslServerTest.emptyTokens
    (b"\0\0", "Authentication failed: username not specified"),
    (b"\0\0p", "Authentication failed: username not specified"),
    (b"\0u\0", "Authentication failed: password not specified"),
    (b"a\0\0", "Authentication failed: username not specified"),
    (b"a\0\0p", "Authentication failed: username not specified"),
    (b"a\0u\0", "Authentication failed: password not specified"),
    (b"a\0u\0p\0", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    (b"\0u", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
])
def test_plain_failures(message, error):
    server = plain_server()
    with pytest.raises(SaslAuthenticationFailed) as e:
        server.evaluate(message)
    assert e.value.message == error and not e.value.generic and not server.complete
    with pytest.raises(SaslAuthenticationFailed, match="state FAILED"):
        server.evaluate(b"\0alice\0a b")


def test_plain_verifier_error():
    def boom(user, password):
        raise OSError("ldap down")
    with pytest.raises(SaslAuthenticationFailed, match="credentials for user could not be verified"):
        PlainServer(boom).evaluate(b"\0u\0p")


# ---- SCRAM ----

RFC7677 = dict(
    c1="n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    s1="r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    c2="c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    s2="v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def test_scram_rfc7677_vector():
    credential = make_credential("SCRAM-SHA-256", "pencil", 4096, base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = ScramServer("SCRAM-SHA-256", {"user": credential}.get,
                         server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    v = {k: s.encode() for k, s in RFC7677.items()}
    assert client.initial() == v["c1"]
    assert server.evaluate(v["c1"]) == v["s1"]
    assert client.evaluate(v["s1"]) == v["c2"]
    assert server.evaluate(v["c2"]) == v["s2"]
    assert client.evaluate(v["s2"]) is None
    assert client.complete and server.complete and server.authorization_id == "user"


@pytest.fixture(scope="module")
def scram_users():
    return {m: {"alice": make_credential(m, "alice-secret"), "a,b=c": make_credential(m, "x")}
            for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange(mechanism, scram_users):
    for user, password in (("alice", "alice-secret"), ("a,b=c", "x")):
        server, client = ScramServer(mechanism, scram_users[mechanism].get), ScramClient(mechanism, user, password)
        assert run(client, server).startswith(b"v=")
        assert client.complete and server.complete and server.authorization_id == user
    cred = scram_users[mechanism]["alice"]
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(cred), type=ScramCredential) == cred


def test_scram_wrong_password_fails_on_client_final(scram_users):
    server, client = ScramServer("SCRAM-SHA-256", scram_users["SCRAM-SHA-256"].get), \
        ScramClient("SCRAM-SHA-256", "alice", "nope")
    final = client.evaluate(server.evaluate(client.initial()))
    with pytest.raises(SaslAuthenticationFailed) as e:
        server.evaluate(final)
    assert e.value.message == generic("SCRAM-SHA-256") and e.value.detail == "Invalid client credentials"
    assert e.value.client_message(reauthenticating=True) == generic("SCRAM-SHA-256").replace(
        "during authentication", "during re-authentication")


def test_scram_unknown_user_fails_on_client_first(scram_users):
    server = ScramServer("SCRAM-SHA-512", scram_users["SCRAM-SHA-512"].get)
    with pytest.raises(SaslAuthenticationFailed) as e:
        server.evaluate(ScramClient("SCRAM-SHA-512", "mallory", "x").initial())
    assert e.value.message == generic("SCRAM-SHA-512")
    assert e.value.detail == "Authentication failed: Invalid user credentials"


def test_scram_server_kafka_cases(scram_users):
    users = scram_users["SCRAM-SHA-256"].get
    # authorizationIdEqualsAuthenticationId / NotEquals (the latter reaches the client verbatim)
    assert ScramServer("SCRAM-SHA-256", users).evaluate(b"n,a=alice,n=alice,r=abc").startswith(b"r=abc")
    with pytest.raises(SaslAuthenticationFailed) as e:
        ScramServer("SCRAM-SHA-256", users).evaluate(b"n,a=bob,n=alice,r=abc")
    assert e.value.message == ("Authentication failed: Client requested an authorization id that is different "
                               "from username") and not e.value.generic
    # validateFailedNonceExchange
    server = ScramServer("SCRAM-SHA-256", users)
    server.evaluate(b"n,,n=alice,r=abc")
    with pytest.raises(SaslAuthenticationFailed) as e:
        server.evaluate(b"c=biws,r=abcOTHER,p=" + base64.b64encode(bytes(32)))
    assert e.value.detail == "Invalid client nonce in the final client message."
    # channel binding requested, too few iterations, a proof of the wrong length
    for first in (b"p=tls-unique,,n=alice,r=abc", b"y,,n=alice,r=abc", b"n,,n=al=ice,r=abc"):
        with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
            ScramServer("SCRAM-SHA-256", users).evaluate(first)
    weak = make_credential("SCRAM-SHA-256", "p", iterations=1000)
    with pytest.raises(SaslAuthenticationFailed) as e:
        ScramServer("SCRAM-SHA-256", lambda u: weak).evaluate(b"n,,n=alice,r=abc")
    assert e.value.detail == "Iterations 1000 is less than the minimum 4096 for SCRAM_SHA_256"
    server = ScramServer("SCRAM-SHA-256", users)
    nonce = server.evaluate(b"n,,n=alice,r=abc").split(b",")[0][2:]
    with pytest.raises(SaslAuthenticationFailed):
        server.evaluate(b"c=biws,r=" + nonce + b",p=AAAA")


def test_scram_extensions_and_delegation_tokens(scram_users):
    cred, expiry = make_credential("SCRAM-SHA-256", "hmac-of-token"), int(time.time() * 1000) + 60_000
    server = ScramServer("SCRAM-SHA-256", scram_users["SCRAM-SHA-256"].get,
                         token_of=lambda tid: ("owner", cred, expiry) if tid == "t1" else None)
    run(ScramClient("SCRAM-SHA-256", "t1", "hmac-of-token", {"tokenauth": "true"}), server)
    assert server.authorization_id == "owner" and server.token_authenticated
    assert 0 < server.session_lifetime_ms <= 60_000
    with pytest.raises(SaslAuthenticationFailed) as e:   # no delegation token support configured
        ScramServer("SCRAM-SHA-256", scram_users["SCRAM-SHA-256"].get).evaluate(
            ScramClient("SCRAM-SHA-256", "t1", "x", {"tokenauth": "true"}).initial())
    assert e.value.detail == "Token Authentication failed: Invalid tokenId : t1"
    server = ScramServer("SCRAM-SHA-256", scram_users["SCRAM-SHA-256"].get)   # unknown extensions are ignored
    run(ScramClient("SCRAM-SHA-256", "alice", "alice-secret", {"foo": "bar=baz"}), server)
    assert server.complete and server.extensions == {"foo": "bar=baz"}


def test_scram_client_checks_the_server():
    client = ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc")
    client.initial()
    with pytest.raises(SaslAuthenticationFailed, match="Invalid server nonce"):
        client.evaluate(b"r=xyz123,s=QUJD,i=4096")
    client = ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc")
    client.initial()
    with pytest.raises(SaslAuthenticationFailed, match="Requested iterations 100 is less than the minimum 4096"):
        client.evaluate(b"r=abc123,s=QUJD,i=100")
    for final, error in ((b"e=unknown-user", "failed with error: unknown-user"),
                         (b"v=" + base64.b64encode(bytes(32)), "Invalid server signature")):
        client = ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc")
        client.initial()
        client.evaluate(b"r=abc123,s=QUJD,i=4096")
        with pytest.raises(SaslAuthenticationFailed, match=error):
            client.evaluate(final)


def test_scram_saslname_escaping():   # ScramFormatterTest.saslName
    for username in ["user1", "123", "1,2", "user=A", "user==B", "user,1", "user 1", ",", "=", ",=", "=="]:
        name = sasl_name(username)
        assert "," not in name and "=" not in name.replace("=2C", "").replace("=3D", "")
        assert username_of(name) == username


# ---- OAUTHBEARER: unsecured tokens ----

def unsecured_server(options=None, now=NOW_MS) -> OAuthBearerServer:
    return OAuthBearerServer(UnsecuredJwsValidator(options, now_ms=lambda: now), now_ms=lambda: now)


def jws(header: dict, claims: dict, signature: str = "") -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc(header)}.{enc(claims)}.{signature}"


def test_oauthbearer_unsecured_exchange():
    token = make_unsecured_token("alice", lifetime_s=3600, scope=["read", "write"], now=NOW_MS / 1000)
    server = unsecured_server()
    assert run(OAuthBearerClient(token, {"traceId": "42"}), server) == b""
    assert server.complete and server.authorization_id == "alice"
    assert server.credential_expiry_ms == NOW_MS + 3_600_000 and server.session_lifetime_ms == 3_600_000
    assert server.token.scope == {"read", "write"} and server.extensions == {"traceId": "42"}


def test_oauthbearer_invalid_token_challenge_then_failure():
    expired = make_unsecured_token("alice", lifetime_s=60, now=NOW_MS / 1000 - 120)
    server, client = unsecured_server(), OAuthBearerClient(expired)
    challenge = server.evaluate(client.initial())
    assert challenge == b'{"status":"invalid_token"}' and not server.complete
    assert client.evaluate(challenge) == b"\x01" and client.server_error == '{"status":"invalid_token"}'
    with pytest.raises(SaslAuthenticationFailed) as e:
        server.evaluate(b"\x01")
    assert e.value.message == '{"status":"invalid_token"}' and "Expiration Time" in e.value.detail


def test_oauthbearer_insufficient_scope():
    token = make_unsecured_token("alice", scope="scope1", now=NOW_MS / 1000)
    server = unsecured_server({"unsecuredValidatorRequiredScope": "scope1 scope2"})
    assert server.evaluate(OAuthBearerClient(token).initial()) == \
        b'{"status":"insufficient_scope", "scope":"[scope1, scope2]"}'
    with pytest.raises(SaslAuthenticationFailed, match="insufficient_scope"):
        server.evaluate(b"\x01")


def test_unsecured_validator_kafka_cases():
    iat = NOW_MS / 1000
    base = {"exp": iat + 3600}
    options = {"unsecuredValidatorPrincipalClaimName": "principal", "unsecuredValidatorAllowableClockSkewMs": "1"}
    validator = UnsecuredJwsValidator(options, now_ms=lambda: NOW_MS)
    for claims in ({**base, "principal": "username"}, {**base, "principal": "username", "iat": iat}):   # validToken
        assert validator.validate(jws({"alg": "none"}, claims)).principal_name == "username"
    for claims in (base, {**base, "principal": 1}, {"principal": "u", "iat": iat, "exp": iat}):
        with pytest.raises(TokenValidationError) as e:       # bad/missing principal, too early expiration
            validator.validate(jws({"alg": "none"}, claims))
        assert e.value.status == "invalid_token"
    scoped = UnsecuredJwsValidator({"unsecuredValidatorRequiredScope": "scope1"}, now_ms=lambda: NOW_MS)
    assert scoped.validate(jws({"alg": "none"}, {**base, "sub": "u", "scope": "scope1"})).scope == {"scope1"}
    for header, claims, signature in (({"alg": "HS256"}, {**base, "sub": "u"}, ""),
                                      ({"alg": "none"}, {**base, "sub": "u"}, "c2ln"),
                                      ({"typ": "JWT"}, {**base, "sub": "u"}, ""),
                                      ({"alg": "none"}, {"sub": "u"}, ""),
                                      ({"alg": "none"}, {**base, "sub": "u", "iat": iat + 60}, ""),
                                      ({"alg": "none"}, {"exp": "soon", "sub": "u"}, "")):
        with pytest.raises(TokenValidationError):
            validator.validate(jws(header, claims, signature))
    with pytest.raises(ValueError):
        UnsecuredJwsValidator({"unsecuredValidatorAllowableClockSkewMs": "-1"})


def test_client_initial_response_kafka_cases():
    assert OAuthBearerClient("123.345.567", {"nineteen": "42"}).initial() == \
        b"n,,\x01auth=Bearer 123.345.567\x01nineteen=42\x01\x01"
    assert parse_client_initial_response(b"n,a=myuser,\x01auth=Bearer 345\x01\x01") == ("345", "myuser", {})
    assert parse_client_initial_response(b"n,,\x01propA=valueA1, valueA2\x01auth=Bearer 567\x01propB=valueB\x01\x01") \
        == ("567", "", {"propA": "valueA1, valueA2", "propB": "valueB"})
    assert parse_client_initial_response(
        b"n,a=user@example.com,\x01host=server.example.com\x01port=143\x01"
        b"auth=Bearer vF-9.df_t4qm~Tc2Nvb3RlckBhbHR+hdmlzdGEuY29/tCg==\x01\x01") == \
        ("vF-9.df_t4qm~Tc2Nvb3RlckBhbHR+hdmlzdGEuY29/tCg==", "user@example.com",
         {"host": "server.example.com", "port": "143"})
    with pytest.raises(ValueError):
        OAuthBearerClient("t", {"19": "42"})
    for bad, detail in ((b"n,,\x01host=x\x01\x01", "'auth' not specified"), (b"y,,\x01auth=Bearer x\x01\x01", ""),
                        (b"n,,\x01auth=Basic x\x01\x01", "Invalid scheme"), (b"n,,\x01auth=Bearer\x01\x01", "format")):
        with pytest.raises(SaslAuthenticationFailed) as e:
            unsecured_server().evaluate(bad)
        assert e.value.message == generic("OAUTHBEARER") and detail in e.value.detail


def test_oauthbearer_authzid_and_extension_checks():
    token = make_unsecured_token("alice", now=NOW_MS / 1000)
    with pytest.raises(SaslAuthenticationFailed, match=r"authorization id \(bob\) that is different"):
        unsecured_server().evaluate(OAuthBearerClient(token, authorization_id="bob").initial())
    server = OAuthBearerServer(UnsecuredJwsValidator(now_ms=lambda: NOW_MS),
                               extensions_validator=lambda tok, ext: {k: "not allowed" for k in ext if k == "bad"})
    with pytest.raises(SaslAuthenticationFailed, match="1 extensions are invalid! They are: bad: not allowed"):
        server.evaluate(OAuthBearerClient(token, {"bad": "1", "good": "2"}).initial())


# ---- client_from_config ----

def test_client_from_config(scram_users):
    with pytest.raises(ValueError, match="GSSAPI"):
        client_from_config({"sasl.jaas.config": PLAIN_JAAS})
    assert run(client_from_config({"sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS}), plain_server()) == b""
    scram = client_from_config({"sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config":
                                'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
                                'password="alice-secret";'})
    server = ScramServer("SCRAM-SHA-512", scram_users["SCRAM-SHA-512"].get)
    run(scram, server)
    assert server.authorization_id == "alice"
    module = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
    oauth = client_from_config({"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config":
                                f'{module} unsecuredLoginStringClaim_sub="alice" unsecuredLoginExtension_x="1";'})
    server = OAuthBearerServer(UnsecuredJwsValidator())
    run(oauth, server)
    assert server.authorization_id == "alice" and server.extensions == {"x": "1"}
    explicit = client_from_config({"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config":
                                   f'{module} token="{make_unsecured_token("bob")}";'})
    server = OAuthBearerServer(UnsecuredJwsValidator())
    run(explicit, server)
    assert server.authorization_id == "bob"
    for jaas in (f"{module};", f'{module} unsecuredLoginExtension_x="1";', f'{module} unsecuredLoginStringClaim_x="1";',
                 f'{module} unsecuredLoginStringClaim_sub="a" unsecuredLoginNumberClaim_exp="1";'):
        with pytest.raises(ValueError):
            client_from_config({"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": jaas})


# ---- OAUTHBEARER: JWKS ----

@pytest.fixture(scope="module")
def keys():
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    return {"rsa": rsa.generate_private_key(65537, 2048), "rsa-other": rsa.generate_private_key(65537, 2048),
            "ec": ec.generate_private_key(ec.SECP256R1())}


def b64url_int(n: int, size: int | None = None) -> str:
    raw = n.to_bytes(size or (n.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def jwks(keys):
    rsa_pub, ec_pub = keys["rsa"].public_key().public_numbers(), keys["ec"].public_key().public_numbers()
    return {"keys": [{"kty": "RSA", "kid": "r1", "use": "sig", "n": b64url_int(rsa_pub.n), "e": b64url_int(rsa_pub.e)},
                     {"kty": "EC", "kid": "e1", "crv": "P-256", "x": b64url_int(ec_pub.x, 32),
                      "y": b64url_int(ec_pub.y, 32)},
                     {"kty": "oct", "kid": "ignored", "k": "c2VjcmV0"}]}


def sign(key, alg: str, kid: str | None, claims: dict) -> str:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, utils
    header = {"alg": alg, "typ": "JWT", **({"kid": kid} if kid else {})}
    enc = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()  # noqa: E731
    data = f"{enc(json.dumps(header).encode())}.{enc(json.dumps(claims).encode())}".encode()
    if alg == "ES256":
        r, s = utils.decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256())))
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    else:
        signature = key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    return f"{data.decode()}.{enc(signature)}"


def claims_at(now_s: int, **extra) -> dict:
    return {"sub": "alice", "iat": now_s - 10, "exp": now_s + 600, "iss": "https://idp", "aud": "kafka", **extra}


def test_jwks_good_signatures_and_sasl_exchange(keys, jwks, tmp_path):
    now = NOW_MS // 1000
    validator = JwksValidator(jwks, expected_audience="kafka", expected_issuer="https://idp", now_ms=lambda: NOW_MS)
    rs = validator.validate(sign(keys["rsa"], "RS256", "r1", claims_at(now, scope="read write")))
    assert rs.principal_name == "alice" and rs.lifetime_ms == (now + 600) * 1000 and rs.scope == {"read write"}
    assert validator.validate(sign(keys["ec"], "ES256", "e1", claims_at(now, scope=["a", "b"]))).scope == {"a", "b"}
    assert validator.validate(sign(keys["ec"], "ES256", None, claims_at(now))).principal_name == "alice"
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks))
    server = OAuthBearerServer(JwksValidator(str(path), expected_audience=["other", "kafka"], now_ms=lambda: NOW_MS),
                               now_ms=lambda: NOW_MS)
    assert run(OAuthBearerClient(sign(keys["rsa"], "RS256", "r1", claims_at(now))), server) == b""
    assert server.authorization_id == "alice" and server.session_lifetime_ms == 600_000 - NOW_MS % 1000


@pytest.mark.parametrize("case", ["bad signature", "other key", "wrong kid", "expired", "wrong audience",
                                  "unexpected audience", "wrong issuer", "no iat", "alg none", "alg HS256",
                                  "not yet valid", "no sub", "duplicate scope"])
def test_jwks_rejections(keys, jwks, case):
    now = NOW_MS // 1000
    kwargs = {"expected_audience": "kafka", "expected_issuer": "https://idp", "now_ms": lambda: NOW_MS}
    claims, key, alg, kid = claims_at(now), keys["rsa"], "RS256", "r1"
    if case == "other key":
        key = keys["rsa-other"]
    elif case == "wrong kid":
        kid = "r2"
    elif case == "expired":
        claims.update(exp=now - 31, iat=now - 100)     # beyond the 30 s default clock skew
    elif case == "wrong audience":
        claims["aud"] = ["not-kafka"]
    elif case == "unexpected audience":
        del kwargs["expected_audience"]
    elif case == "wrong issuer":
        claims["iss"] = "https://evil"
    elif case == "no iat":
        del claims["iat"]
    elif case == "not yet valid":
        claims["nbf"] = now + 100
    elif case == "no sub":
        del claims["sub"]
    elif case == "duplicate scope":
        claims["scope"] = ["a", "a "]
    token = sign(key, alg, kid, claims)
    if case == "bad signature":
        head, body, sig = token.split(".")
        token = f"{head}.{body}.{'A' if sig[0] != 'A' else 'B'}{sig[1:]}"
    elif case == "alg none":
        token = jws({"alg": "none", "kid": "r1"}, claims, "")
    elif case == "alg HS256":
        token = jws({"alg": "HS256", "kid": "ignored"}, claims, "c2ln")
    with pytest.raises(TokenValidationError):
        JwksValidator(jwks, **kwargs).validate(token)
    server = OAuthBearerServer(JwksValidator(jwks, **kwargs))
    assert server.evaluate(OAuthBearerClient(token).initial()) == b'{"status":"invalid_token"}'


def test_jwks_rejects_small_rsa_keys():
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = rsa.generate_private_key(65537, 1024)
    pub = key.public_key().public_numbers()
    validator = JwksValidator({"keys": [{"kty": "RSA", "n": b64url_int(pub.n), "e": b64url_int(pub.e)}]},
                              now_ms=lambda: NOW_MS)
    claims = claims_at(NOW_MS // 1000)
    del claims["aud"]
    with pytest.raises(TokenValidationError, match="2048 bits"):
        validator.validate(sign(key, "RS256", None, claims))


# ---- fuzzing: no input makes a server (or client) raise anything but SaslAuthenticationFailed ----

@FUZZ
@given(st.lists(st.sampled_from(["org.M", "required", "Optional", "key", "=", '"v w"', "'q\\101", ";", "/*", "*/",
                                  "//", "/", "\n", "3", "-", ".5", "\\", "$_", "\x85", "é", '"'])).map("".join))
def test_fuzz_jaas_only_value_errors(text):
    try:
        for entry in parse_jaas_config(text):
            assert entry.login_module and entry.control_flag in ("required", "requisite", "sufficient", "optional")
    except ValueError:
        pass


FUZZ_CRED = make_credential("SCRAM-SHA-256", "pw")
SCRAM_TEXT = st.text(alphabet=st.sampled_from("nrcpsiave=,2CD3+/xyz0A\x01é"), max_size=60)


@FUZZ
@given(st.binary(max_size=200))
def test_fuzz_plain(data):
    only_sasl_failures(plain_server(), data)


@FUZZ
@given(st.one_of(st.binary(max_size=200), SCRAM_TEXT.map(lambda s: ("n,," + s).encode())))
def test_fuzz_scram_client_first(data):
    only_sasl_failures(ScramServer("SCRAM-SHA-256", lambda user: FUZZ_CRED), data)


@FUZZ
@given(st.one_of(st.binary(max_size=200), SCRAM_TEXT.map(lambda s: ("c=biws,r=abc" + s).encode())))
def test_fuzz_scram_client_final(data):
    server = ScramServer("SCRAM-SHA-256", lambda user: FUZZ_CRED, server_nonce=lambda: "srv")
    server.evaluate(b"n,,n=u,r=abc")
    only_sasl_failures(server, data)


@FUZZ
@given(st.binary(max_size=200), st.sampled_from(["first", "final", "done"]))
def test_fuzz_scram_client(data, state):
    client = ScramClient("SCRAM-SHA-256", "u", "pw", nonce="abc")
    client.initial()
    if state != "first":
        client.evaluate(b"r=abcsrv,s=QUJD,i=4096")
    if state == "done":
        client._state = "COMPLETE"
    try:
        client.evaluate(data)
    except SaslAuthenticationFailed:
        pass


TOKEN_TEXT = st.text(alphabet=st.sampled_from("eyJhbGciOiJub25lIn0.-_+/=x\x01 "), max_size=120)
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                    max_leaves=8)


def fuzz_bytes() -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=200),
                     TOKEN_TEXT.map(lambda t: f"n,,\x01auth=Bearer {t}\x01\x01".encode("utf-8")),
                     st.tuples(st.dictionaries(st.sampled_from(["alg", "kid", "crit", "x"]), JSON, max_size=3),
                               st.dictionaries(st.sampled_from(["sub", "exp", "iat", "scope", "aud", "nbf"]), JSON,
                                               max_size=5))
                     .map(lambda hc: f"n,,\x01auth=Bearer {jws(*hc)}\x01\x01".encode()))


@FUZZ
@given(fuzz_bytes(), st.booleans())
def test_fuzz_oauthbearer_unsecured(data, after_error):
    server = unsecured_server()
    if after_error:
        assert server.evaluate(b"n,,\x01auth=Bearer a.b.\x01\x01").startswith(b'{"status"')
    only_sasl_failures(server, data)


@FUZZ
@given(fuzz_bytes())
def test_fuzz_oauthbearer_jwks(jwks, data):
    only_sasl_failures(OAuthBearerServer(JwksValidator(jwks, expected_audience="kafka")), data)
