"""The server side of SASL on one connection (Kafka's SaslServerAuthenticator): SaslHandshake (v0: raw tokens follow;
v1: SaslAuthenticate requests follow), the mechanism's exchange, the principal, the session lifetime (KIP-368) and
re-authentication. Until it completes, a connection may send only ApiVersions and the SASL requests.

Mechanisms are built per listener from Kafka's settings: PLAIN users from `listener.name.X.plain.sasl.jaas.config`
(`user_<name>="password"`), SCRAM credentials from the metadata image (AlterUserScramCredentials), OAUTHBEARER
tokens checked by Kafka's unsecured-JWS validator, or against a JWKS (`sasl.oauthbearer.jwks.endpoint.url`)."""
from __future__ import annotations

import logging
import time

from broker.security.listeners import mechanism_setting
from protocol import kio_codec
from protocol.errors import ErrorCode
from protocol.sasl import SaslAuthenticationFailed

log = logging.getLogger("strata.security")

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SCRAM_MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


class AuthenticationEnded(Exception):
    """The connection must close once `reply` (a response body, or None) is written: a refused handshake, failed
    credentials, a request out of order."""

    def __init__(self, reason: str, reply=None, corr: int | None = None, flexible: bool = False):
        super().__init__(reason)
        self.reply, self.corr, self.flexible = reply, corr, flexible


def mechanism_factory(broker, listener: str, mechanism: str):
    """A function making a new server for `mechanism` on `listener`, built once per listener and mechanism (the
    PLAIN users, the OAUTHBEARER validator and its keys), as Kafka's SaslChannelBuilder configures its callback
    handlers once."""
    config = broker.config
    jaas_text = mechanism_setting(config, listener, mechanism, "sasl.jaas.config")
    if mechanism == "PLAIN":
        from protocol.sasl.plain import PlainServer, plain_users_from_jaas, users_verifier
        verify = users_verifier(plain_users_from_jaas(_jaas_options(jaas_text)))
        return lambda: PlainServer(verify)
    if mechanism in SCRAM_MECHANISM_CODES:
        from protocol.sasl.scram import ScramCredential, ScramServer
        code = SCRAM_MECHANISM_CODES[mechanism]

        def credential_of(user: str):
            c = broker.topics.image.scram_credentials.get((user, code))
            return None if c is None else ScramCredential(c.salt, c.stored_key, c.server_key, c.iterations)
        return lambda: ScramServer(mechanism, credential_of)
    if mechanism == "OAUTHBEARER":
        from protocol.sasl.oauthbearer import JwksValidator, OAuthBearerServer, UnsecuredJwsValidator
        jwks = mechanism_setting(config, listener, mechanism, "sasl.oauthbearer.jwks.endpoint.url")
        if jwks:
            remote = jwks.startswith(("http://", "https://"))
            source = fetch_jwks(jwks) if remote else jwks[len("file://"):] if jwks.startswith("file://") else jwks
            aud = mechanism_setting(config, listener, mechanism, "sasl.oauthbearer.expected.audience")
            validator = JwksValidator(
                source, expected_audience=[a.strip() for a in aud.split(",") if a.strip()] or None,
                expected_issuer=mechanism_setting(config, listener, mechanism, "sasl.oauthbearer.expected.issuer")
                or None,
                sub_claim_name=mechanism_setting(config, listener, mechanism, "sasl.oauthbearer.sub.claim.name")
                or "sub",
                clock_skew_s=int(mechanism_setting(config, listener, mechanism,
                                                   "sasl.oauthbearer.clock.skew.seconds") or 30))
            if remote:
                refresh_ms = int(mechanism_setting(config, listener, mechanism,
                                                   "sasl.oauthbearer.jwks.endpoint.refresh.ms") or 3_600_000)
                broker.jwks_refreshes.append((jwks, validator, refresh_ms / 1000))
        else:
            validator = UnsecuredJwsValidator(_jaas_options(jaas_text))
        return lambda: OAuthBearerServer(validator)
    raise ValueError(f"unsupported SASL mechanism {mechanism}")


def fetch_jwks(url: str, timeout: float = 10.0) -> dict:
    """A JWKS from an identity provider's endpoint (HTTP or HTTPS, the system's CAs), as a dict; blocking, so the
    broker calls it at start and then from a thread (BrokerSecurity.refresh_jwks)."""
    import json
    import urllib.request
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def _jaas_options(text: str) -> dict[str, str]:
    """The options of a listener's JAAS config for a mechanism (the broker's own entry: one login module)."""
    if not text:
        return {}
    from protocol.sasl.jaas import parse_jaas_config
    return dict(parse_jaas_config(text)[0].options)


class SaslAuthenticator:
    __slots__ = ("broker", "listener", "mechanisms", "state", "server", "mechanism", "principal", "session_end",
                 "reauth_ms", "max_receive", "authenticate_version", "previous")

    def __init__(self, broker, listener: str):
        self.broker, self.listener = broker, listener
        sasl = broker.security.sasl[listener]
        self.mechanisms = sasl.factories                 # mechanism -> a new server, built once per listener
        self.reauth_ms = sasl.reauth_ms
        self.max_receive = sasl.max_receive
        self.state = "handshake"        # handshake -> authenticate | raw -> done
        self.server = None
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.session_end: float | None = None       # time.monotonic() after which requests are refused
        self.authenticate_version = 0
        self.previous: tuple[str, str] | None = None  # (principal, mechanism) being re-authenticated

    @property
    def authenticated(self) -> bool:
        return self.state == "done"

    def expired(self) -> bool:
        return self.session_end is not None and time.monotonic() >= self.session_end

    def begin_reauthentication(self) -> None:
        """KIP-368: a SaslHandshake on an authenticated connection starts over; the principal must not change."""
        self.previous = (self.principal, self.mechanism)
        self.state, self.server = "handshake", None

    # ---- requests while authenticating ----------------------------------------------------------------------------
    def handshake(self, version: int, body, corr: int) -> bytes:
        mech = body.mechanism or ""                     # case-sensitive, as Kafka's
        if self.state != "handshake":
            raise AuthenticationEnded(f"SaslHandshake in state {self.state}",
                                      self._handshake_reply(version, ErrorCode.illegal_sasl_state), corr)
        if mech not in self.mechanisms:
            raise AuthenticationEnded(f"unsupported SASL mechanism {mech!r}",
                                      self._handshake_reply(version, ErrorCode.unsupported_sasl_mechanism), corr)
        if self.previous is not None and mech != self.previous[1]:
            raise AuthenticationEnded(f"re-authentication changed the mechanism to {mech}",
                                      self._handshake_reply(version, ErrorCode.illegal_sasl_state), corr)
        self.server = self.mechanisms[mech]()
        self.mechanism = mech
        self.state = "authenticate" if version >= 1 else "raw"
        return self._handshake_reply(version, 0)

    def _handshake_reply(self, version: int, error: int) -> bytes:
        return kio_codec.encode_response(SASL_HANDSHAKE, version, {"error_code": error,
                                                                    "mechanisms": list(self.mechanisms)})

    def authenticate(self, version: int, body, corr: int, flexible: bool) -> bytes:
        if self.state == "handshake":               # before SaslHandshake: Kafka closes without an answer
            raise AuthenticationEnded("SaslAuthenticate before SaslHandshake")
        if self.state != "authenticate":
            raise AuthenticationEnded(f"SaslAuthenticate in state {self.state}", self._auth_reply(
                version, ErrorCode.illegal_sasl_state, "Unexpected SaslAuthenticate request"), corr, flexible)
        self.authenticate_version = version
        try:
            challenge = self.server.evaluate(bytes(body.auth_bytes))
        except SaslAuthenticationFailed as e:
            raise AuthenticationEnded(f"authentication failed ({self.mechanism}): {e.detail}", self._auth_reply(
                version, ErrorCode.sasl_authentication_failed, e.client_message(self.previous is not None)),
                corr, flexible) from None
        lifetime = 0
        if self.server.complete:
            lifetime = self._complete(corr, flexible, version)
        return self._auth_reply(version, 0, None, challenge, lifetime)

    def raw_token(self, token: bytes) -> bytes:
        """Handshake v0: tokens come without Kafka headers; a failure just closes (Kafka's v0 behaviour)."""
        try:
            challenge = self.server.evaluate(bytes(token))
        except SaslAuthenticationFailed as e:
            raise AuthenticationEnded(f"authentication failed ({self.mechanism}): {e.detail}") from None
        if self.server.complete:
            self._complete(None, False, 0)
        return challenge

    def _complete(self, corr, flexible: bool, version: int) -> int:
        principal = "User:" + self.server.authorization_id
        if self.previous is not None and principal != self.previous[0]:
            raise AuthenticationEnded(
                f"re-authentication as {principal} on a connection of {self.previous[0]}",
                self._auth_reply(version, ErrorCode.sasl_authentication_failed,
                                 "Cannot change principals during re-authentication")
                if corr is not None else None, corr, flexible)
        self.principal, self.state, self.previous = principal, "done", None
        # Kafka's ReauthInfo: connections.max.reauth.ms when set, bounded by the credential's expiry when it has one
        # (an OAUTHBEARER token), even an expiry already passed (within the validator's clock skew): that session
        # ends at its next request
        credential = getattr(self.server, "session_lifetime_ms", None)
        lifetimes = ([self.reauth_ms] if self.reauth_ms > 0 else []) + ([max(0, credential)] if credential is not None
                                                                          else [])
        lifetime = min(lifetimes) if lifetimes else None
        self.session_end = time.monotonic() + lifetime / 1000 if lifetime is not None else None
        lifetime = lifetime or 0
        return lifetime if version >= 1 else 0

    def _auth_reply(self, version: int, error: int, message: str | None, data: bytes = b"", lifetime: int = 0):
        return kio_codec.encode_response(SASL_AUTHENTICATE, version, {
            "error_code": error, "error_message": message, "auth_bytes": data, "session_lifetime": lifetime})
