"""SASL mechanisms (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) as pure state machines, client and server side.

Why pure: the broker's SaslHandshake/SaslAuthenticate handlers and our own client own the sockets; a mechanism only
turns the peer's bytes into the next bytes to send, so it can be tested exhaustively (RFC vectors, fuzzing) without
I/O. The behaviour and the error texts follow Apache Kafka's own SaslServer/SaslClient classes, because clients show
those texts to users and compatibility tests compare them.

Kafka's servers fail in two ways, and SaslAuthenticationFailed keeps the distinction:
  * SaslAuthenticationException: its message goes to the client verbatim (e.g. PLAIN's "Authentication failed:
    Invalid username or password");
  * SaslException: SaslServerAuthenticator hides the reason (it may reveal whether a user exists) and sends
    "Authentication failed during authentication due to invalid credentials with SASL mechanism <M>".
Both become SaslAuthenticationFailed; `message` is the client-visible text, `detail` the reason for the broker's log
and `generic` tells which kind it was (see `client_message` for re-authentication).

Also here: `client_from_config` (Kafka client settings -> a client, including the token Kafka's unsecured
OAUTHBEARER login handler would make) and the few Java behaviours (String.split, Double.toString, trim) that leak
into Kafka's texts and that several mechanisms reproduce.
"""
from __future__ import annotations

import base64
import math
import re
import time
from decimal import Decimal

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslAuthenticationFailed(Exception):
    """The exchange failed; `message` is what Kafka puts in SaslAuthenticateResponse.error_message."""

    def __init__(self, message: str, detail: str | None = None, *, generic: bool = False):
        super().__init__(message)
        self.message = message
        self.detail = message if detail is None else detail
        self.generic = generic

    def client_message(self, reauthenticating: bool = False) -> str:
        """Kafka says "re-authentication" in the generic text when the session is being re-authenticated."""
        if self.generic and reauthenticating:
            return self.message.replace("during authentication", "during re-authentication", 1)
        return self.message


def invalid_credentials(mechanism: str, detail: str) -> SaslAuthenticationFailed:
    """The failure Kafka reports for a SaslException: a fixed text, the real reason kept out of the response."""
    return SaslAuthenticationFailed(
        f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}",
        detail, generic=True)


def now_ms() -> int:
    return int(time.time() * 1000)


# ---- Java semantics that leak into Kafka's wire texts and token parsing ----

JAVA_WHITESPACE = "".join(map(chr, range(33)))   # what String.trim() removes


def java_split(s: str, sep: str) -> list[str]:
    """String.split with a literal separator: [s] if `sep` is absent, otherwise trailing empty strings dropped."""
    parts = s.split(sep)
    if len(parts) > 1:
        while parts and parts[-1] == "":
            parts.pop()
    return parts


def java_double(x: float) -> str:
    """Double.toString: shortest round-trip digits, plain in [1e-3, 1e7), else d.dddE<n> ("1.7297909E9")."""
    if x != x or math.isinf(x):
        return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")
    if x == 0:
        return "-0.0" if math.copysign(1, x) < 0 else "0.0"
    sign, d = ("-" if x < 0 else ""), Decimal(repr(abs(x)))
    if 1e-3 <= abs(x) < 1e7:
        s = format(d, "f")
        return sign + (s if "." in s else s + ".0")
    _, digits, exp = d.normalize().as_tuple()
    text = "".join(map(str, digits))
    return f"{sign}{text[0]}.{text[1:] or '0'}E{len(digits) - 1 + exp}"


def java_long(x, rounding: bool = False) -> int:
    """Math.round (rounding) or Number.longValue (truncating) of a JSON number: NaN is 0, out of range clamps."""
    if isinstance(x, int):
        return max(-2 ** 63, min(2 ** 63 - 1, x))
    if x != x:
        return 0
    if abs(x) >= 2 ** 63:
        return 2 ** 63 - 1 if x > 0 else -2 ** 63
    return math.floor(x + 0.5) if rounding else int(x)


def to_double(v) -> float:
    """Number.doubleValue(): integers too large for a double become infinities."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def trimmed_option(options, key: str, default: str) -> str:
    """A JAAS option as Kafka's callback handlers read it: trimmed, `default` when absent or blank."""
    value = options.get(key)
    return default if value is None or not value.strip(JAVA_WHITESPACE) else value.strip(JAVA_WHITESPACE)


class SaslServer:
    """One authentication exchange on the broker side. Subclasses implement `_step`; `evaluate` guarantees that no
    input, however malformed, raises anything but SaslAuthenticationFailed (Kafka would sometimes let a runtime
    exception close the connection instead; we always answer)."""

    mechanism: str = ""

    def __init__(self) -> None:
        self.complete = False
        self.failed = False
        self.authorization_id = ""
        self.credential_expiry_ms: int | None = None   # Kafka's CREDENTIAL_LIFETIME_MS negotiated property (epoch ms)
        self.session_lifetime_ms: int | None = None    # ms from completion until credential_expiry_ms, at least 0

    def evaluate(self, token: bytes) -> bytes:
        if self.complete or self.failed:
            state = "COMPLETE" if self.complete else "FAILED"
            raise SaslAuthenticationFailed(f"Unexpected challenge in Sasl server state {state}")
        try:
            return self._step(bytes(token))
        except SaslAuthenticationFailed:
            self.failed = True
            raise
        except Exception as e:  # a bug or an unexpected input: still a clean SASL failure
            self.failed = True
            raise invalid_credentials(self.mechanism, f"{type(e).__name__}: {e}") from e

    def _finish(self, authorization_id: str, expiry_ms: int | None = None, now: int | None = None) -> None:
        self.complete = True
        self.authorization_id = authorization_id
        self.credential_expiry_ms = expiry_ms
        if expiry_ms is not None:
            self.session_lifetime_ms = max(0, expiry_ms - (now_ms() if now is None else now))

    def _step(self, token: bytes) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError


class SaslClient:
    """One authentication exchange on the client side: send `initial()`, then feed each server challenge to
    `evaluate`, sending back what it returns (None: nothing more to send). Failures raise SaslAuthenticationFailed."""

    mechanism: str = ""
    complete: bool = False

    def initial(self) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def evaluate(self, challenge: bytes) -> bytes | None:  # pragma: no cover - abstract
        raise NotImplementedError


_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def client_from_config(cfg: dict[str, str]) -> SaslClient:
    """A client from Kafka client configs: `sasl.mechanism` (Kafka's default GSSAPI is not supported) and
    `sasl.jaas.config` with exactly one login module, as Kafka's JaasContext requires:
      * PlainLoginModule / ScramLoginModule with username= password= (ScramLoginModule's tokenauth="true" sends
        the tokenauth extension, for delegation tokens);
      * OAuthBearerLoginModule with either Kafka's unsecured options (unsecuredLoginStringClaim_sub="alice",
        unsecuredLoginLifetimeSeconds, ...ListClaim_/NumberClaim_, unsecuredLoginExtension_<k>) producing the
        token Kafka's OAuthBearerUnsecuredLoginCallbackHandler would, or (Strata's option, no I/O) token="<jwt>"
        with extension_<k>="v" options as Kafka's secured login handler reads them."""
    from protocol.sasl.jaas import single_entry

    mechanism = cfg.get("sasl.mechanism", "GSSAPI").strip()
    if mechanism not in MECHANISMS:
        raise ValueError(f"SASL mechanism {mechanism} is not supported; supported: {', '.join(MECHANISMS)}")
    jaas = cfg.get("sasl.jaas.config")
    if not jaas:
        raise ValueError(f"sasl.jaas.config must be set for SASL mechanism {mechanism}")
    entry = single_entry(jaas)
    opts = entry.options
    if mechanism == "OAUTHBEARER":
        if entry.login_module != _OAUTH_MODULE:
            raise ValueError(f"SASL mechanism OAUTHBEARER needs {_OAUTH_MODULE}, not {entry.login_module}")
        from protocol.sasl.oauthbearer import OAuthBearerClient
        if "token" in opts:
            return OAuthBearerClient(opts["token"], _suffixes(opts, "extension_"))
        return OAuthBearerClient(unsecured_token_from_options(opts), _suffixes(opts, "unsecuredLoginExtension_"))
    if entry.login_module not in (_PLAIN_MODULE, _SCRAM_MODULE):
        raise ValueError(f"SASL mechanism {mechanism} needs {_PLAIN_MODULE} or {_SCRAM_MODULE}, "
                         f"not {entry.login_module}")
    username, password = opts.get("username"), opts.get("password")
    if username is None or password is None:
        raise ValueError(f"{entry.login_module} needs both username and password options")
    if mechanism == "PLAIN":
        from protocol.sasl.plain import PlainClient
        return PlainClient(username, password)
    from protocol.sasl.scram import ScramClient
    tokenauth = opts.get("tokenauth", "").lower() == "true"
    return ScramClient(mechanism, username, password, {"tokenauth": "true"} if tokenauth else None)


def _suffixes(options: dict[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix):]: v for k, v in options.items() if k.startswith(prefix)}


# ---- OAuthBearerLoginModule options -> token: Kafka's OAuthBearerUnsecuredLoginCallbackHandler ----

def _json_escape(s: str) -> str:   # Kafka's escape(), bug included: quotes first, so " ends up as \\"
    return s.replace('"', '\\"').replace("\\", "\\\\")


def _list_json(value: str) -> str:
    """listJsonText: the first character is the delimiter; Kafka adds an empty item after an empty piece."""
    if len(value) <= 1:
        return "[]"
    delimiter, text = value[0], value[1:]
    elements = java_split(text, delimiter)
    out = ("[" if elements else "") + ",".join(f'"{_json_escape(e)}"' for e in elements)
    if text.startswith(delimiter) or text.endswith(delimiter) or delimiter * 2 in text:
        out += ',""'
    return out + "]"


def unsecured_token_from_options(options: dict[str, str], now: int | None = None) -> str:
    """The alg-none token Kafka's unsecured login handler makes from OAuthBearerLoginModule options:
    unsecuredLogin{StringClaim_,NumberClaim_,ListClaim_}<name>, unsecuredLoginLifetimeSeconds (3600),
    unsecuredLoginPrincipalClaimName (sub), unsecuredLoginScopeClaimName (scope); numbers are written as Java's
    Double.toString does ("exp":1.7297909E9). `now` in epoch ms. ValueError on bad options."""
    from protocol.sasl.oauthbearer import TokenValidationError, parse_unsecured_jws
    if not options:
        raise ValueError("No token options: this login cannot be used to establish client connections")
    if all(k.startswith("unsecuredLoginExtension_") for k in options):
        raise ValueError("Extensions provided in login context without a token")
    lifetime = options.get("unsecuredLoginLifetimeSeconds", "3600")
    if not re.fullmatch(r"[+-]?[0-9]{1,18}", lifetime):
        raise ValueError(f'For input string: "{lifetime}"')
    now = now_ms() if now is None else now
    parts = [f'"exp":{java_double(now / 1000.0 + int(lifetime))}', f'"iat":{java_double(now / 1000.0)}']
    for key, value in options.items():
        kind, _, name = key.removeprefix("unsecuredLogin").partition("Claim_")
        if not key.startswith("unsecuredLogin") or kind not in ("String", "Number", "List") or not name:
            continue
        if name in ("iat", "exp"):
            raise ValueError(f"Cannot explicitly set the '{name}' claim")
        text = f'"{_json_escape(value)}"' if kind == "String" else \
            java_double(float(value)) if kind == "Number" else _list_json(value)
        if kind == "List" and not (text.startswith("[") and text.endswith("]")):
            raise ValueError(f"Illegal JSON array: {text}")
        parts.append(f'"{_json_escape(name)}":{text}')
    token = ".".join(base64.urlsafe_b64encode(p.encode()).rstrip(b"=").decode()
                     for p in ('{"alg":"none"}', "{" + ",".join(parts) + "}")) + "."
    try:   # as Kafka does, prove the token has a principal (and is well-formed) before using it
        parse_unsecured_jws(token, trimmed_option(options, "unsecuredLoginPrincipalClaimName", "sub"),
                            trimmed_option(options, "unsecuredLoginScopeClaimName", "scope"))
    except TokenValidationError as e:
        raise ValueError(e.description) from e
    return token
