"""SASL/OAUTHBEARER (RFC 7628) as Kafka's OAuthBearerSaslServer/OAuthBearerSaslClient, with Kafka's two validators:
the unsecured one (OAuthBearerUnsecuredValidatorCallbackHandler: alg "none" tokens, for development) and the secured
one (OAuthBearerValidatorCallbackHandler over a JWKS: ValidatorAccessTokenValidator and jose4j's JwtConsumer).

The client's first message is n,[a=authzid],^Aauth=Bearer <token>[^Akey=value]*^A^A. A token that fails validation
is not an immediate error: as in Kafka the server answers with a JSON challenge {"status":"invalid_token"} (or
"insufficient_scope" with the scope), the client replies ^A, and only then does the server fail, with that JSON as
the SaslAuthenticate error message. A malformed first message fails at once, with the generic text.

Differences from Kafka, all in what is accepted, never in a valid exchange: Kafka decodes unsecured JWS parts with
Java's *basic* Base64 decoder (a base64url part holding '-' or '_' fails), we take both alphabets; inputs on which
Kafka throws an unchecked exception (header without "alg", non-string scope items) get the invalid_token challenge;
a JWKS key whose "alg" names another algorithm is skipped (jose4j selects by kid, kty, use, key_ops, curve).
"""
from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, NamedTuple, Protocol

from protocol.sasl import (JAVA_WHITESPACE as _WS, SaslAuthenticationFailed, SaslClient, SaslServer,
                           invalid_credentials, java_double, java_long, java_split, now_ms as _wall_ms, to_double,
                           trimmed_option, unsecured_token_from_options)

MECHANISM = "OAUTHBEARER"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KEY, _VALUE = "[A-Za-z]+", r"[\x21-\x7e \t\r\n]+"
_INITIAL = re.compile(f"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:{_KEY}={_VALUE}\x01)*)\x01")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)", re.ASCII)
_SCOPE_ITEM = re.compile(r"[\x23-\x5b\x5d-\x7e\x21]+")


@dataclass(frozen=True)
class OAuthBearerToken:
    value: str
    principal_name: str
    lifetime_ms: int                       # the expiry, epoch ms (Kafka's OAuthBearerToken.lifetimeMs)
    start_time_ms: int | None = None
    scope: frozenset[str] = frozenset()
    claims: Mapping[str, object] = field(default_factory=dict)


class TokenValidationError(Exception):
    """A rejected token: status/scope/openid_configuration make the JSON challenge, `description` is for logs."""

    def __init__(self, description: str, status: str = "invalid_token", scope: str | None = None,
                 openid_configuration: str | None = None):
        super().__init__(description)
        self.description, self.status, self.scope = description, status, scope
        self.openid_configuration = openid_configuration


class TokenValidator(Protocol):
    def validate(self, token: str) -> OAuthBearerToken: ...


def validate_extensions(extensions: Mapping[str, str]) -> None:
    """OAuthBearerClientInitialResponse.validateExtensions (RFC 7628 section 3.1); ValueError."""
    if "auth" in extensions:
        raise ValueError("Extension name auth is invalid")
    for k, v in extensions.items():
        if not re.fullmatch(_KEY, k):
            raise ValueError(f"Extension name {k} is invalid")
        if not re.fullmatch(_VALUE, v):
            raise ValueError(f"Extension value ({v}) for extension {k} is invalid")


def parse_client_initial_response(data: bytes) -> tuple[str, str, dict[str, str]]:
    """(token, authorization id, extensions) of a client first message; ValueError with Kafka's message."""
    m = _INITIAL.fullmatch(data.decode("utf-8", "replace"))
    if not m:
        raise ValueError("Invalid OAUTHBEARER client first message")
    props = dict(p.split("=", 1) for p in java_split(m["kvpairs"], "\x01") if p)
    auth = props.pop("auth", None)
    if auth is None:
        raise ValueError("Invalid OAUTHBEARER client first message: 'auth' not specified")
    validate_extensions(props)
    a = _AUTH.fullmatch(auth)
    if not a:
        raise ValueError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if a["scheme"].lower() != "bearer":
        raise ValueError(f"Invalid scheme in OAUTHBEARER client first message: {a['scheme']}")
    return a["token"], m["authzid"] or "", props


class OAuthBearerServer(SaslServer):
    """`extensions_validator(token, extensions)` may return {name: reason} for invalid extensions (Kafka's
    OAuthBearerExtensionsValidatorCallback); Kafka's own handlers accept all, as the default here does."""

    mechanism = MECHANISM

    def __init__(self, validator: TokenValidator,
                 extensions_validator: Callable[[OAuthBearerToken, dict[str, str]], Mapping[str, str]] | None = None,
                 now_ms: Callable[[], int] | None = None):
        super().__init__()
        self._validator, self._extensions_validator, self._now = validator, extensions_validator, now_ms or _wall_ms
        self._error: str | None = None
        self.validation_failure: str | None = None   # the last TokenValidationError's description, for logs
        self.token: OAuthBearerToken | None = None
        self.extensions: dict[str, str] = {}

    def _step(self, response: bytes) -> bytes:
        if response == b"\x01" and self._error is not None:
            raise SaslAuthenticationFailed(self._error, self.validation_failure)
        self._error = None
        try:
            value, authzid, extensions = parse_client_initial_response(response)
        except ValueError as e:
            raise invalid_credentials(MECHANISM, str(e)) from e
        try:
            token = self._validator.validate(value)
        except TokenValidationError as e:
            self.validation_failure = e.description
            self._error = f'{{"status":"{e.status}"' + ("" if e.scope is None else f', "scope":"{e.scope}"') + (
                "" if e.openid_configuration is None else f', "openid-configuration":"{e.openid_configuration}"') + "}"
            return self._error.encode()
        except Exception as e:
            raise invalid_credentials(MECHANISM, "Authentication could not be performed due to an internal error "
                                                 f"on the server: {e}") from e
        if authzid and authzid != token.principal_name:
            raise SaslAuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different from "
                f"the token's principal name ({token.principal_name})")
        invalid = dict(self._extensions_validator(token, extensions)) if self._extensions_validator else {}
        if invalid:
            raise SaslAuthenticationFailed(f"Authentication failed: {len(invalid)} extensions are invalid! They are: "
                                           + "; ".join(f"{k}: {v}" for k, v in invalid.items()))
        self.token, self.extensions = token, extensions
        self._finish(token.principal_name, token.lifetime_ms, self._now())
        return b""


class OAuthBearerClient(SaslClient):
    """Kafka's OAuthBearerSaslClient: answers an error challenge with ^A (the server then fails the exchange);
    `server_error` keeps the challenge's JSON."""

    mechanism = MECHANISM

    def __init__(self, token: str, extensions: Mapping[str, str] | None = None, authorization_id: str = ""):
        self._extensions = dict(extensions or {})
        validate_extensions(self._extensions)
        self._token, self._authzid = token, authorization_id
        self._state, self.complete, self.server_error = "SEND_CLIENT_FIRST_MESSAGE", False, None

    def initial(self) -> bytes:
        authzid = f"a={self._authzid}" if self._authzid else ""
        ext = "".join(f"\x01{k}={v}" for k, v in self._extensions.items())
        self._state = "RECEIVE_SERVER_FIRST_MESSAGE"
        return f"n,{authzid},\x01auth=Bearer {self._token}{ext}\x01\x01".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._state != "RECEIVE_SERVER_FIRST_MESSAGE":
            raise SaslAuthenticationFailed(f"Unexpected challenge in Sasl client state {self._state}")
        if challenge:
            self.server_error = bytes(challenge).decode("utf-8", "replace")
            self._state = "RECEIVE_SERVER_MESSAGE_AFTER_FAILURE"
            return b"\x01"
        self._state, self.complete = "COMPLETE", True
        return None


def _b64decode(part: str, url_only: bool = False) -> bytes:
    alphabet = r"[A-Za-z0-9_-]*" if url_only else r"[A-Za-z0-9+/_-]*"
    if not re.fullmatch(alphabet + "={0,2}", part) or "=" in part and len(part) % 4 or len(part.rstrip("=")) % 4 == 1:
        raise ValueError("malformed Base64 URL encoded value")
    data = part.rstrip("=").replace("-", "+").replace("_", "/")
    return base64.b64decode(data + "=" * (-len(data) % 4))


def _reject_constant(name: str):
    raise ValueError(f"invalid JSON constant {name}")


def _json_object(part: str, url_only: bool = False) -> dict | None:
    """A JWS part as a JSON object, None for another JSON value, ValueError if not base64 JSON. For unsecured
    tokens text after the first JSON value is ignored, as Jackson's readTree does."""
    data = _b64decode(part, url_only)
    try:
        if url_only:
            value = json.loads(data, parse_constant=_reject_constant)
        else:
            text = data.decode(json.detect_encoding(data)).lstrip(" \t\r\n")
            value = json.JSONDecoder(parse_constant=_reject_constant).raw_decode(text)[0]
    except (ValueError, RecursionError) as e:
        raise ValueError("malformed JSON") from e
    return value if isinstance(value, dict) else None


# ---- unsecured (alg "none") tokens: OAuthBearerUnsecuredJws and its validator ----

def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _as_text(v) -> str:   # Jackson's JsonNode.asText()
    if isinstance(v, str):
        return v
    if isinstance(v, bool) or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    return java_double(v) if isinstance(v, float) else str(v) if isinstance(v, int) else ""


def _claim(claims: Mapping, name: str, kind: str):
    v = claims.get(name)
    if v is not None and not {"String": isinstance(v, str), "List": isinstance(v, list), "Number": _is_number(v)}[kind]:
        java_type = {str: "String", float: "Double", list: "ArrayList"}.get(type(v), "Long")
        raise TokenValidationError(f"The '{name}' claim was not of type {kind}: {java_type}")
    return v


def parse_unsecured_jws(value: str, principal_claim: str = "sub", scope_claim: str = "scope") -> OAuthBearerToken:
    """OAuthBearerUnsecuredJws. Claims are converted as Kafka does: arrays become lists of strings, numbers stay
    numbers, anything else becomes its text (true -> "true")."""
    def fail(why: str):
        raise TokenValidationError(why)
    if ".." in value:
        fail("Malformed compact serialization contains '..'")
    splits = java_split(value, ".") + ([""] if value.endswith(".") else [])
    if len(splits) != 3:
        fail("Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values")
    try:
        header, claims = (_json_object(splits[0]) or {}), (_json_object(splits[1]) or {})
    except ValueError as e:
        raise TokenValidationError(str(e)) from e
    claims = {k: [_as_text(e) for e in v] if isinstance(v, list) else v if _is_number(v) else _as_text(v)
              for k, v in claims.items()}
    if "alg" not in header:
        fail("JWS header must have an Algorithm value")
    if header["alg"] != "none":
        fail("Unsecured JWS must have 'none' for an algorithm")
    if splits[2]:
        fail("Unsecured JWS must not contain a digital signature")
    raw_scope = claims.get(scope_claim)
    items = [raw_scope] if isinstance(raw_scope, str) else _claim(claims, scope_claim, "List") or ()
    scope = frozenset(s.strip(_WS) for s in items) - {""}
    exp = _claim(claims, "exp", "Number")
    if exp is None:
        fail("No expiration time in JWT")
    principal = _claim(claims, principal_claim, "String")
    if principal is None or not principal.strip(_WS):
        fail(f"No principal name in JWT claim: {principal_claim}")
    iat = _claim(claims, "iat", "Number")
    start = None if iat is None else java_long(to_double(iat) * 1000, True)
    return OAuthBearerToken(value, principal, java_long(to_double(exp) * 1000, True), start, scope, claims)


def parse_scope(text: str) -> list[str]:
    """OAuthBearerScopeUtils.parseScope: space-separated scope tokens (RFC 6749 characters); ValueError."""
    items = [item for item in text.split(" ") if item]
    for item in items:
        if not _SCOPE_ITEM.fullmatch(item):
            raise ValueError(f"Invalid scope value: {item}")
    return items


class UnsecuredJwsValidator:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler with its JAAS options
    unsecuredValidator{PrincipalClaimName,ScopeClaimName,RequiredScope,AllowableClockSkewMs}; ValueError for bad
    options (Kafka raises OAuthBearerConfigException when the first token arrives)."""

    def __init__(self, options: Mapping[str, str] | None = None, now_ms: Callable[[], int] | None = None):
        o = options or {}
        self.principal_claim = trimmed_option(o, "unsecuredValidatorPrincipalClaimName", "sub")
        self.scope_claim = trimmed_option(o, "unsecuredValidatorScopeClaimName", "scope")
        self.required_scope = parse_scope(trimmed_option(o, "unsecuredValidatorRequiredScope", ""))
        skew = trimmed_option(o, "unsecuredValidatorAllowableClockSkewMs", "0")
        if not re.fullmatch(r"[+-]?[0-9]{1,10}", skew) or not -2 ** 31 <= int(skew) < 2 ** 31:
            raise ValueError(f'For input string: "{skew}"')
        if int(skew) < 0:
            raise ValueError(f"Allowable clock skew millis must not be negative: {skew}")
        self.clock_skew_ms, self._now = int(skew), now_ms or _wall_ms

    def validate(self, token: str) -> OAuthBearerToken:
        jws = parse_unsecured_jws(token, self.principal_claim, self.scope_claim)
        now, skew = self._now(), self.clock_skew_ms
        iat, exp = jws.claims.get("iat"), to_double(jws.claims["exp"])
        iat = None if iat is None else to_double(iat)
        if iat is not None and 1000 * iat > now + skew:
            raise TokenValidationError(f"The Issued At value ({iat:f} seconds) was after the indicated time ({now} "
                                       f"ms) plus allowable clock skew ({skew} ms)")
        if now - skew >= 1000 * exp:
            raise TokenValidationError(f"The indicated time ({now} ms) minus allowable clock skew ({skew} ms) was "
                                       f"on or after the Expiration Time value ({exp:f} seconds)")
        if iat is not None and exp <= iat:
            raise TokenValidationError(f"The Expiration Time time ({exp:f} seconds) was not after the Issued At "
                                       f"time ({iat:f} seconds)")
        for required in self.required_scope:
            if required not in jws.scope:
                listed = f"[{', '.join(self.required_scope)}]"
                raise TokenValidationError(f"The provided scope ([{', '.join(sorted(jws.scope))}]) was missing a "
                                           f"required scope ({required}).  All required scope elements: {listed}",
                                           "insufficient_scope", listed)
        return jws


def make_unsecured_token(sub: str, lifetime_s: int = 3600, scope: str | list[str] | None = None,
                         now: float | None = None) -> str:
    """An alg-none token for `sub`, as Kafka's unsecured login handler makes it; `now` in epoch seconds."""
    options = {"unsecuredLoginStringClaim_sub": sub, "unsecuredLoginLifetimeSeconds": str(int(lifetime_s))}
    if scope:
        options["unsecuredLoginListClaim_scope"] = " " + (scope if isinstance(scope, str) else " ".join(scope))
    return unsecured_token_from_options(options, None if now is None else round(now * 1000))


# ---- signed tokens checked against a JWKS (Kafka's secured validator) ----

_ALGS = {"RS256": ("RSA", 256), "RS384": ("RSA", 384), "RS512": ("RSA", 512), "PS256": ("RSA", 256),
         "PS384": ("RSA", 384), "PS512": ("RSA", 512), "ES256": ("P-256", 256), "ES384": ("P-384", 384),
         "ES512": ("P-521", 512)}
_EC_SIZE = {"P-256": 32, "P-384": 48, "P-521": 66}
_Jwk = NamedTuple("_Jwk", [("kid", object), ("kty", str), ("crv", object), ("use", object), ("key_ops", object),
                           ("alg", object), ("key", object)])


def _load_jwk(jwk: Mapping) -> _Jwk | None:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    kty, crv = jwk.get("kty"), jwk.get("crv")
    num = lambda name: int.from_bytes(_b64decode(jwk[name], url_only=True), "big")  # noqa: E731
    try:
        if kty == "RSA":
            key = rsa.RSAPublicNumbers(num("e"), num("n")).public_key()
        elif kty == "EC" and crv in _EC_SIZE:
            curve = {"P-256": ec.SECP256R1, "P-384": ec.SECP384R1, "P-521": ec.SECP521R1}[crv]()
            key = ec.EllipticCurvePublicNumbers(num("x"), num("y"), curve).public_key()
        else:
            return None            # jose4j skips key types it does not know
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"Invalid JWK {jwk.get('kid')!r}: {e}") from e
    return _Jwk(jwk.get("kid"), kty, crv, jwk.get("use"), jwk.get("key_ops"), jwk.get("alg"), key)


def _verify(jwk: _Jwk, alg: str, signature: bytes, data: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, utils
    h = {256: hashes.SHA256, 384: hashes.SHA384, 512: hashes.SHA512}[_ALGS[alg][1]]()
    try:
        if alg[0] == "E":   # JWS carries r||s, cryptography wants DER
            n = _EC_SIZE[jwk.crv]
            if len(signature) != 2 * n:
                return False
            r, s = int.from_bytes(signature[:n], "big"), int.from_bytes(signature[n:], "big")
            jwk.key.verify(utils.encode_dss_signature(r, s), data, ec.ECDSA(h))
        else:
            jwk.key.verify(signature, data, padding.PKCS1v15() if alg[0] == "R" else
                           padding.PSS(padding.MGF1(h), h.digest_size), h)
        return True
    except InvalidSignature:
        return False


def _checked_string(name: str, value) -> str:   # ClaimValidationUtils.validateString
    if value is None or not isinstance(value, str) or not value.strip(_WS):
        why = "non-null" if value is None else "a string" if not isinstance(value, str) else \
            "non-empty" if value == "" else "not contain only whitespace"
        raise TokenValidationError(f"{name} value must {'' if why.startswith('not') else 'be '}{why}")
    return value.strip(_WS)


class JwksValidator:
    """Kafka's secured validator: sasl.oauthbearer.{jwks.endpoint.url (a file), expected.audience, expected.issuer,
    sub.claim.name, scope.claim.name, clock.skew.seconds}. The signature must verify with a JWKS key, exp and iat
    are required, and an aud claim must match `expected_audience` - even when none is expected, jose4j's default.
    `jwks` is the JWKS object or the path of a JWKS JSON file (read once, here)."""

    def __init__(self, jwks: Mapping | str | Path, expected_audience: str | list[str] | None = None,
                 expected_issuer: str | None = None, sub_claim_name: str = "sub", clock_skew_s: int = 30,
                 scope_claim_name: str = "scope", now_ms: Callable[[], int] | None = None):
        if not isinstance(jwks, Mapping):
            jwks = json.loads(Path(jwks).read_text())
        self.update(jwks)
        aud = expected_audience
        self._audiences = frozenset([aud] if isinstance(aud, str) else aud or ())
        self._issuer, self._sub, self._scope = expected_issuer, sub_claim_name, scope_claim_name
        self._skew, self._now = clock_skew_s, now_ms or _wall_ms

    def update(self, jwks: Mapping) -> None:
        """Take a new key set (the broker refreshes a JWKS it fetches, Kafka's RefreshingHttpsJwks)."""
        if not isinstance(jwks.get("keys"), list):
            raise ValueError('A JWKS must be an object with a "keys" array')
        self._keys = [k for k in map(_load_jwk, jwks["keys"]) if k is not None]

    def _select(self, header: dict, alg: str) -> _Jwk | None:
        kind = _ALGS[alg][0]
        for k in self._keys:
            if ("kid" not in header or k.kid == header["kid"]) and k.use in (None, "sig") and k.alg in (None, alg) \
                    and (k.key_ops is None or isinstance(k.key_ops, list) and "verify" in k.key_ops) \
                    and (k.kty == kind if kind == "RSA" else k.kty == "EC" and k.crv == kind):
                return k
        return None

    def validate(self, token: str) -> OAuthBearerToken:
        def fail(why: str):
            raise TokenValidationError(f"Could not validate the access token: {why}")
        jwt = token.strip(_WS)
        parts = java_split(jwt, ".")
        if len(parts) != 3 or not all(p.strip(_WS) for p in parts):
            raise TokenValidationError(f"Malformed JWT provided ({jwt}); expected three sections (header, payload, "
                                       "and signature)")
        try:
            header, claims = _json_object(parts[0], True), _json_object(parts[1], True)
            signature = _b64decode(parts[2], url_only=True)
        except ValueError as e:
            fail(f"malformed JWS: {e}")
        if header is None or claims is None:
            fail("the JWS header and the JWT claims must be JSON objects")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in _ALGS:
            fail(f"'{alg}' is not a permitted algorithm")
        if "crit" in header:
            fail(f"Unrecognized header(s) marked as critical: {header['crit']}")
        key = self._select(header, alg)
        if key is None:
            fail(f"Unable to find a suitable verification key for JWS w/ header {json.dumps(header)}")
        if key.kty == "RSA" and key.key.key_size < 2048:
            fail(f"An RSA key of size 2048 bits or larger MUST be used (given key was {key.key.key_size} bits)")
        if not _verify(key, alg, signature, f"{parts[0]}.{parts[1]}".encode()):
            fail("JWS signature is invalid")
        for name in ("exp", "iat", "nbf"):
            if claims.get(name) is not None and not _is_number(claims[name]):
                fail(f"The value of the '{name}' claim is not the expected type")
        exp, iat, nbf = (None if claims.get(n) is None else java_long(claims[n]) for n in ("exp", "iat", "nbf"))
        aud = claims.get("aud")
        auds = [aud] if isinstance(aud, str) else aud
        if aud is not None and not (isinstance(auds, list) and all(isinstance(a, str) for a in auds)):
            fail("The value of the 'aud' claim is not the expected type")
        if aud is None and self._audiences:
            fail("No Audience (aud) claim present.")
        if aud is not None and not self._audiences.intersection(auds):
            fail(f"Audience (aud) claim {auds} " + ("doesn't contain an acceptable identifier." if self._audiences
                 else "present in the JWT but no expected audience value(s) were provided to the JWT Consumer."))
        if self._issuer is not None and claims.get("iss") != self._issuer:
            fail(f"Issuer (iss) claim value ({claims.get('iss')}) doesn't match expected value of {self._issuer}")
        now = self._now() // 1000
        if exp is None or iat is None:
            fail(f"No {'Expiration Time (exp)' if exp is None else 'Issued At (iat)'} claim present.")
        if now - self._skew >= exp:
            fail(f"The JWT is no longer valid - the evaluation time {now} is on or after the Expiration Time "
                 f"(exp={exp}) claim value")
        if exp < iat or (nbf is not None and exp < nbf):
            fail(f"The Expiration Time (exp={exp}) claim value cannot be before the Issued At or Not Before time")
        if nbf is not None and now + self._skew < nbf:
            fail(f"The JWT is not yet valid as the evaluation time {now} is before the Not Before (nbf={nbf})")
        raw_scope, scopes = claims.get(self._scope), set()
        for s in [raw_scope] if isinstance(raw_scope, str) else raw_scope if isinstance(raw_scope, list) else []:
            s = _checked_string(self._scope, s)
            if s in scopes:
                raise TokenValidationError(f"{self._scope} value must not contain duplicates - {s} already present")
            scopes.add(s)
        if exp < 0 or iat < 0:
            raise TokenValidationError(f"{'exp' if exp < 0 else 'iat'} value must be non-negative")
        sub = claims.get(self._sub)
        if sub is not None and not isinstance(sub, str):
            fail(f"Could not extract the '{self._sub}' claim from the access token")
        return OAuthBearerToken(token, _checked_string(self._sub, sub), exp * 1000, iat * 1000, frozenset(scopes),
                                claims)
