"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) exactly as Kafka's ScramSaslServer/ScramSaslClient.

Kafka-specific points kept on purpose (a Java client talking to us must see the same thing):
  * messages are matched with Kafka's ScramMessages regexes; only gs2 header "n" (no channel binding) is accepted,
    and the c= attribute of the client-final message is not checked (Kafka does not either);
  * the AuthMessage is rebuilt from the parsed fields, as Kafka's formatter does: a reserved m= attribute is dropped
    and extensions are re-joined in the order received;
  * an unknown user fails on the client-first message, with a generic error (the reason, "Invalid user credentials",
    is never sent: Kafka throws SaslException, which the authenticator replaces by a fixed text);
  * a client-final nonce must *end with* the server-first nonce (Kafka's check), credentials need >= 4096 iterations;
  * the "tokenauth" extension authenticates a delegation token when a `token_of` lookup is given; other extensions
    are ignored. Salt and nonces are random base-36 strings, like Kafka's (BigInteger(130, random).toString(36)).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from typing import Callable

import msgspec

from protocol.sasl import SaslAuthenticationFailed, SaslClient, SaslServer, invalid_credentials

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384   # Kafka's limit for AlterUserScramCredentials (not enforced here)

_SAFE = r"\x01-\x2b\x2d-\x3c\x3e-\x7f"            # [\x01-\x7F&&[^=,]]
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"                  # [\x01-\x7F&&[^,]]+
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"              # [\x21-\x7E&&[^,]]+
_SASLNAME = f"(?:[{_SAFE}]|=2C|=3D)+"
_B64 = "[a-zA-Z0-9/+]"
_BASE64 = f"(?:{_B64}{{4}})*(?:{_B64}{{3}}=|{_B64}{{2}}==)?"
_RESERVED = f"(?:m={_VALUE},)?"
_EXTENSIONS = f"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(f"n,(?:a=(?P<authzid>{_SASLNAME}))?,{_RESERVED}n=(?P<saslname>{_SASLNAME}),"
                           f"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS})")
_SERVER_FIRST = re.compile(f"{_RESERVED}r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),"
                           f"i=(?P<iterations>[0-9]+){_EXTENSIONS}")
_CLIENT_FINAL = re.compile(f"c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS},p=(?P<proof>{_BASE64})")
_SERVER_FINAL = re.compile(f"(?:e=(?P<error>[{_SAFE}]+))|(?:v=(?P<signature>{_BASE64})){_EXTENSIONS}")


class ScramCredential(msgspec.Struct, frozen=True):
    """What the broker stores per user and mechanism (Kafka's ScramCredential); never the password."""
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hash_name(mechanism: str) -> str:
    try:
        return HASHES[mechanism]
    except KeyError:
        raise ValueError(f"Unsupported SCRAM mechanism {mechanism!r}; supported: {', '.join(HASHES)}") from None


def _hmac(name: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, name).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def secure_random_string() -> str:
    """Kafka's ScramFormatter.secureRandomString: a 130-bit random number in base 36."""
    n, digits = secrets.randbits(130), "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) = PBKDF2-HMAC with one output block; the password is UTF-8 without SASLprep (Kafka's
    ScramFormatter.normalize)."""
    name = _hash_name(mechanism)
    return hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    if iterations <= 0:
        raise ValueError(f"iterations must be positive, got {iterations}")
    name = _hash_name(mechanism)
    salt = secure_random_string().encode() if salt is None else salt   # Kafka's salt is a random string's bytes
    salted = salted_password(mechanism, password, salt, iterations)
    client_key = _hmac(name, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(name, client_key).digest(), _hmac(name, salted, b"Server Key"),
                           iterations)


def sasl_name(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def username_of(saslname: str) -> str:
    """Kafka's ScramFormatter.username (same replacement order)."""
    name = saslname.replace("=2C", ",")
    if "=" in name.replace("=3D", ""):
        raise ValueError(f"Invalid username: {saslname}")
    return name.replace("=3D", "=")


def _parse_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(",") if text else ():
        k, _, v = item.partition("=")
        out[k] = v
    return out


def _bare(saslname: str, nonce: str, extensions: dict[str, str]) -> str:
    ext = ",".join(f"{k}={v}" for k, v in extensions.items())
    return f"n={saslname},r={nonce}" + (f",{ext}" if ext else "")


TokenLookup = Callable[[str], "tuple[str, ScramCredential | None, int | None] | None"]


class ScramServer(SaslServer):
    """`credential_of(username)` returns the stored credential or None. `token_of(token_id)`, for delegation tokens,
    returns (owner, credential, expiry epoch ms) or None. `server_nonce` is a test hook (RFC vectors)."""

    def __init__(self, mechanism: str, credential_of: Callable[[str], ScramCredential | None], *,
                 token_of: TokenLookup | None = None, server_nonce: Callable[[], str] | None = None):
        super().__init__()
        self._hash = _hash_name(mechanism)
        self.mechanism = mechanism
        self._credential_of, self._token_of = credential_of, token_of
        self._server_nonce = server_nonce or secure_random_string
        self._state = "RECEIVE_CLIENT_FIRST_MESSAGE"
        self.extensions: dict[str, str] = {}
        self.token_authenticated = False

    def _fail(self, detail: str) -> SaslAuthenticationFailed:
        return invalid_credentials(self.mechanism, detail)

    def _step(self, token: bytes) -> bytes:
        message = token.decode("utf-8", "replace")
        if self._state == "RECEIVE_CLIENT_FIRST_MESSAGE":
            return self._client_first(message)
        return self._client_final(message)

    def _client_first(self, message: str) -> bytes:
        m = _CLIENT_FIRST.fullmatch(message)
        if not m:
            raise self._fail(f"Invalid SCRAM client first message format: {message}")
        ext = m["extensions"]
        self.extensions = _parse_map(ext[1:]) if ext.startswith(",") else {}
        username = username_of(m["saslname"])
        expiry = None
        try:
            if self.extensions.get("tokenauth", "").lower() == "true":
                found = self._token_of(username) if self._token_of else None
                if found is None or found[0] is None:
                    raise self._fail(f"Token Authentication failed: Invalid tokenId : {username}")
                authorization_id, credential, expiry = found
                self.token_authenticated = True
            else:
                authorization_id, credential = username, self._credential_of(username)
        except SaslAuthenticationFailed:
            raise
        except Exception as e:
            raise self._fail(f"Authentication failed: Credentials could not be obtained ({e!r})") from e
        if credential is None:
            raise self._fail("Authentication failed: Invalid user credentials")
        authzid = m["authzid"] or ""
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username")
        if credential.iterations < MIN_ITERATIONS:
            raise self._fail(f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} "
                             f"for {self.mechanism.replace('-', '_')}")
        self._authorization_id, self._credential, self._expiry = authorization_id, credential, expiry
        self._client_first_bare = _bare(m["saslname"], m["nonce"], self.extensions)
        self._nonce = m["nonce"] + self._server_nonce()
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = "RECEIVE_CLIENT_FINAL_MESSAGE"
        return self._server_first.encode()

    def _client_final(self, message: str) -> bytes:
        m = _CLIENT_FINAL.fullmatch(message)
        if not m:
            raise self._fail(f"Invalid SCRAM client final message format: {message}")
        if not m["nonce"].endswith(self._nonce):
            raise self._fail("Invalid client nonce in the final client message.")
        channel, proof = base64.b64decode(m["channel"]), base64.b64decode(m["proof"])
        auth = f"{self._client_first_bare},{self._server_first},c={_b64(channel)},r={m['nonce']}".encode()
        credential = self._credential
        client_signature = _hmac(self._hash, credential.stored_key, auth)
        if len(proof) != len(client_signature):   # Kafka: IllegalArgumentException from xor
            raise self._fail("Invalid client credentials (proof has the wrong length)")
        computed = hashlib.new(self._hash, _xor(client_signature, proof)).digest()
        if not hmac.compare_digest(computed, credential.stored_key):
            raise self._fail("Invalid client credentials")
        signature = _hmac(self._hash, credential.server_key, auth)
        self._credential = None
        self._finish(self._authorization_id, self._expiry)
        return f"v={_b64(signature)}".encode()


class ScramClient(SaslClient):
    """Kafka's ScramSaslClient. `nonce` is a test hook; `extensions` (e.g. {"tokenauth": "true"}) are sent in the
    client-first message."""

    def __init__(self, mechanism: str, username: str, password: str, extensions: dict[str, str] | None = None,
                 *, nonce: str | None = None):
        self._hash = _hash_name(mechanism)
        self.mechanism = mechanism
        self._username, self._password = username, password
        self._extensions = dict(extensions or {})
        self._nonce = nonce or secure_random_string()
        self._state = "SEND_CLIENT_FIRST_MESSAGE"
        self.complete = False

    def _fail(self, detail: str) -> SaslAuthenticationFailed:
        self._state = "FAILED"
        return SaslAuthenticationFailed(detail)

    def initial(self) -> bytes:
        if self._state != "SEND_CLIENT_FIRST_MESSAGE":
            raise self._fail(f"Unexpected challenge in Sasl client state {self._state}")
        self._bare = _bare(sasl_name(self._username), self._nonce, self._extensions)
        self._state = "RECEIVE_SERVER_FIRST_MESSAGE"
        return f"n,,{self._bare}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        message = bytes(challenge).decode("utf-8", "replace")
        name = self.mechanism.replace("-", "_")
        if self._state == "RECEIVE_SERVER_FIRST_MESSAGE":
            m = _SERVER_FIRST.fullmatch(message)
            if not m:
                raise self._fail(f"Invalid SCRAM server first message format: {message}")
            digits = m["iterations"].lstrip("0")
            iterations = int(digits or "0") if len(digits) <= 10 else 2 ** 31   # Java: Integer.parseInt
            if not 0 < iterations < 2 ** 31:
                raise self._fail(f"Invalid SCRAM server first message format: invalid iterations {iterations}")
            if not m["nonce"].startswith(self._nonce):
                raise self._fail("Invalid server nonce: does not start with client nonce")
            if iterations < MIN_ITERATIONS:
                raise self._fail(f"Requested iterations {iterations} is less than the minimum {MIN_ITERATIONS} "
                                 f"for {name}")
            salt = base64.b64decode(m["salt"])
            self._salted = salted_password(self.mechanism, self._password, salt, iterations)
            without_proof = f"c=biws,r={m['nonce']}"
            self._auth = f"{self._bare},r={m['nonce']},s={_b64(salt)},i={iterations},{without_proof}".encode()
            client_key = _hmac(self._hash, self._salted, b"Client Key")
            stored_key = hashlib.new(self._hash, client_key).digest()
            proof = _xor(client_key, _hmac(self._hash, stored_key, self._auth))
            self._state = "RECEIVE_SERVER_FINAL_MESSAGE"
            return f"{without_proof},p={_b64(proof)}".encode()
        if self._state == "RECEIVE_SERVER_FINAL_MESSAGE":
            m = _SERVER_FINAL.fullmatch(message)
            if not m:
                raise self._fail(f"Invalid SCRAM server final message format: {message}")
            if m["error"] is not None:
                raise self._fail(f"Sasl authentication using {name} failed with error: {m['error']}")
            server_key = _hmac(self._hash, self._salted, b"Server Key")
            if not hmac.compare_digest(base64.b64decode(m["signature"]), _hmac(self._hash, server_key, self._auth)):
                raise self._fail("Invalid server signature in server final message")
            self._state, self.complete = "COMPLETE", True
            return None
        raise self._fail(f"Unexpected challenge in Sasl client state {self._state}")
