"""SCRAM credentials as the controller changes them (Kafka's ScramControlManager) and as DescribeUserScramCredentials
reads them (Kafka's ScramImage.describe). The client sends the salt and the salted password (RFC 5802's Hi(), so the
password never travels); the controller derives StoredKey and ServerKey from it as Kafka's ScramFormatter does and
writes those, never the salted password.

One deliberate difference from Kafka's KRaft controller, which refuses a second alteration of the same *user* in one
request: a user may alter each mechanism once per request (DUPLICATE_RESOURCE only for the same user and mechanism,
as Kafka's ZooKeeper-era AdminManager did), so kafka-configs.sh's documented
`--add-config 'SCRAM-SHA-256=[...],SCRAM-SHA-512=[...]'` works. A user whose alterations include a refused one has
none of them applied, and every request answers one result per user.
"""
from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from metadata.image import MetadataImage
from metadata.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from protocol.errors import ErrorCode

SCRAM_SHA_256, SCRAM_SHA_512 = 1, 2                  # Kafka's ScramMechanism type codes (the records keep them)
MECHANISMS: dict[int, tuple[str, str]] = {SCRAM_SHA_256: ("SCRAM-SHA-256", "sha256"),
                                          SCRAM_SHA_512: ("SCRAM-SHA-512", "sha512")}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
DUPLICATE = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")


def mechanism_name(mechanism: int) -> str:
    return MECHANISMS[mechanism][0] if mechanism in MECHANISMS else "UNKNOWN"


def mechanism_by_name(name: str) -> int | None:
    return next((m for m, (n, _) in MECHANISMS.items() if n == name), None)


def derive_keys(mechanism: int, salted: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) from a salted password: H(HMAC(salted, "Client Key")) and HMAC(salted, "Server Key")."""
    digest = MECHANISMS[mechanism][1]
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    return hashlib.new(digest, client_key).digest(), hmac.new(salted, b"Server Key", digest).digest()


@dataclass(frozen=True)
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True)
class ScramDeletion:
    name: str
    mechanism: int


def _check_name_and_mechanism(name: str, mechanism: int) -> tuple[int, str] | None:
    """Kafka's validateScramUsernameAndMechanism."""
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism not in MECHANISMS:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


def _check_upsertion(u: ScramUpsertion) -> tuple[int, str] | None:
    """Kafka's validateUpsertion; an empty salted password (Kafka fails deriving the keys) is refused too."""
    refused = _check_name_and_mechanism(u.name, u.mechanism)
    if refused is not None:
        return refused
    if u.iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if u.iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    if not u.salted_password:
        return ErrorCode.unacceptable_credential, "Salted password must not be empty"
    return None


def alter_credentials(deletions: list[ScramDeletion], upsertions: list[ScramUpsertion]):
    """AlterUserScramCredentials as a controller operation; answers (user, error code, message) once per user, in
    the order users first appear (deletions first). Deleting a credential the image lacks is RESOURCE_NOT_FOUND."""
    def operation(image: MetadataImage):
        errors: dict[str, tuple[int, str]] = {}
        users: dict[str, None] = {}
        seen: set[tuple[str, int]] = set()
        accepted: list = []
        for alteration in [*deletions, *upsertions]:
            name, key = alteration.name, (alteration.name, alteration.mechanism)
            users.setdefault(name)
            if name in errors:
                continue                       # the user's first refusal stands
            if key in seen:
                errors[name] = DUPLICATE
                continue
            seen.add(key)
            if isinstance(alteration, ScramDeletion):
                refused = _check_name_and_mechanism(*key)
                if refused is None and key not in image.scram_credentials:
                    refused = ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
            else:
                refused = _check_upsertion(alteration)
            if refused is not None:
                errors[name] = refused
            else:
                accepted.append(alteration)
        records: list = []
        for a in accepted:
            if a.name in errors:
                continue
            if isinstance(a, ScramDeletion):
                records.append(RemoveUserScramCredentialRecord(a.name, a.mechanism))
            else:
                stored_key, server_key = derive_keys(a.mechanism, a.salted_password)
                records.append(UserScramCredentialRecord(a.name, a.mechanism, bytes(a.salt), stored_key, server_key,
                                                         a.iterations))
        return records, [(user, *errors.get(user, (0, None))) for user in users]
    return operation


def describe_credentials(image: MetadataImage, users: list[str] | None) -> list[tuple[str, int, str | None, list]]:
    """DescribeUserScramCredentials from `image` (Kafka's ScramImage.describe): (user, error code, message,
    [(mechanism, iterations)]) per user; every user with a credential when `users` is None or empty, else each
    named user once: DUPLICATE_RESOURCE if named twice, RESOURCE_NOT_FOUND without any credential."""
    by_user: dict[str, list[tuple[int, int]]] = {}
    for (name, mechanism), c in sorted(image.scram_credentials.items()):
        by_user.setdefault(name, []).append((mechanism, c.iterations))
    if not users:
        return [(name, 0, None, infos) for name, infos in by_user.items()]
    out = []
    for name in dict.fromkeys(users):
        if users.count(name) > 1:
            out.append((name, ErrorCode.duplicate_resource,
                        f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}", []))
        elif name not in by_user:
            out.append((name, ErrorCode.resource_not_found,
                        f"Attempt to describe a user credential that does not exist: {name}", []))
        else:
            out.append((name, 0, None, by_user[name]))
    return out
