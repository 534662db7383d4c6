"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer and the JDK's PLAIN client do it.

The message is [authzid] NUL authcid NUL passwd. Every failure is a SaslAuthenticationException in Kafka, so its
text reaches the client as is ("Authentication failed: Invalid username or password"); that includes the token
count check, which Kafka does by splitting on at most four NULs. Where passwords come from is the broker's business:
the server takes a `verify(username, password)` callback; `plain_users_from_jaas` + `users_verifier` give Kafka's
PlainServerCallbackHandler behaviour (user_<name>="<password>" options of PlainLoginModule).
"""
from __future__ import annotations

import hmac
from typing import Callable, Mapping

from protocol.sasl import SaslAuthenticationFailed, SaslClient, SaslServer

_USER_PREFIX = "user_"


def plain_users_from_jaas(options: Mapping[str, str]) -> dict[str, str]:
    """{user: password} from PlainLoginModule options such as user_admin="admin-secret"."""
    return {k[len(_USER_PREFIX):]: v for k, v in options.items() if k.startswith(_USER_PREFIX)}


def users_verifier(users: Mapping[str, str]) -> Callable[[str, str], bool]:
    """A `verify` for PlainServer over a fixed user table, comparing in constant time as Kafka does."""
    def verify(username: str, password: str) -> bool:
        expected = users.get(username)
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())
    return verify


class PlainServer(SaslServer):
    mechanism = "PLAIN"

    def __init__(self, verify: Callable[[str, str], bool]):
        super().__init__()
        self._verify = verify

    def _step(self, token: bytes) -> bytes:
        tokens = token.decode("utf-8", "replace").split("\0", 3)   # Kafka's extractTokens stops after 4
        if len(tokens) != 3:
            raise SaslAuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = tokens
        if not username:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        try:
            ok = bool(self._verify(username, password))
        except Exception as e:
            raise SaslAuthenticationFailed("Authentication failed: credentials for user could not be verified",
                                           f"{type(e).__name__}: {e}") from e
        if not ok:
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username")
        self._finish(username)
        return b""


class PlainClient(SaslClient):
    """Sends everything in the initial response; complete once it is produced (the server answers with an empty
    token or an error, which the caller reads from SaslAuthenticateResponse)."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str, authorization_id: str = ""):
        self._message = f"{authorization_id}\0{username}\0{password}".encode()
        self.complete = False

    def initial(self) -> bytes:
        self.complete = True
        return self._message

    def evaluate(self, challenge: bytes) -> bytes | None:
        if not self.complete:
            raise SaslAuthenticationFailed("PLAIN: initial() must be sent first")
        return None
