"""SCRAM credentials in the metadata image and the controller's AlterUserScramCredentials operation
(metadata/scram_control.py): the keys derived as RFC 5802 / Kafka's ScramFormatter derive them (checked against RFC
7677's SCRAM-SHA-256 exchange), Kafka's error codes and messages, DescribeUserScramCredentials, snapshots."""
from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from metadata.image import MetadataImage
from metadata.records import Envelope, RemoveUserScramCredentialRecord, decode, encode
from metadata.scram_control import (MECHANISMS, SCRAM_SHA_256, SCRAM_SHA_512, ScramDeletion, ScramUpsertion,
                                    alter_credentials, derive_keys, describe_credentials)
from protocol.errors import ErrorCode
from protocol.sasl.scram import make_credential, salted_password as hi


def salted_password(mechanism: int, password: bytes, salt: bytes, iterations: int) -> bytes:
    """What the client sends (the admin tools use protocol.sasl.scram too)."""
    return hi(MECHANISMS[mechanism][0], password.decode(), salt, iterations)

NONE = (0, None)
DUP = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")


def upsert(name="alice", mechanism=SCRAM_SHA_256, iterations=4096, password=b"secret", salt=b"salt"):
    return ScramUpsertion(name, mechanism, iterations, salt, salted_password(mechanism, password, salt, iterations)
                          if mechanism in (1, 2) else b"x")


def run(image: MetadataImage, deletions=(), upsertions=()):
    records, answer = alter_credentials(list(deletions), list(upsertions))(image)
    return image.apply(records), records, answer


def test_keys_follow_rfc_7677():
    """RFC 7677's example: user "user", password "pencil"; the server signature and the client proof it gives
    check out against the keys the controller stores."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = salted_password(SCRAM_SHA_256, b"pencil", salt, 4096)
    stored_key, server_key = derive_keys(SCRAM_SHA_256, salted)
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    auth = f"n=user,r=rOprNGfwEbeRWgbNEkqO,r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r={nonce}".encode()
    assert base64.b64encode(hmac.new(server_key, auth, "sha256").digest()) == \
        b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    signature = hmac.new(stored_key, auth, "sha256").digest()
    assert hashlib.sha256(bytes(a ^ b for a, b in zip(proof, signature))).digest() == stored_key


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_the_controller_stores_what_the_sasl_server_checks(mechanism):
    """Keys derived from the salted password the client sent equal the credential the SASL/SCRAM server would
    make from the password itself."""
    name = MECHANISMS[mechanism][0]
    expected = make_credential(name, "pässword", 4096, b"salt")
    assert derive_keys(mechanism, hi(name, "pässword", b"salt", 4096)) == (expected.stored_key, expected.server_key)


def test_upsert_describe_replace_delete():
    image, records, answer = run(MetadataImage(), upsertions=[upsert(), upsert(mechanism=SCRAM_SHA_512, iterations=8192)])
    assert answer == [("alice", *NONE)]                       # both mechanisms of one user in one request
    assert len(records) == 2 and b"secret" not in encode(Envelope(0, records[0]))
    cred = image.scram_credentials[("alice", SCRAM_SHA_256)]
    assert (cred.salt, cred.iterations) == (b"salt", 4096)
    assert (cred.stored_key, cred.server_key) == derive_keys(SCRAM_SHA_256, upsert().salted_password)
    assert describe_credentials(image, None) == [("alice", 0, None, [(SCRAM_SHA_256, 4096), (SCRAM_SHA_512, 8192)])]

    image, _, answer = run(image, upsertions=[upsert(iterations=10000)])
    assert answer == [("alice", *NONE)] and image.scram_credentials[("alice", 1)].iterations == 10000
    image, records, answer = run(image, deletions=[ScramDeletion("alice", SCRAM_SHA_512)])
    assert answer == [("alice", *NONE)] and records == [RemoveUserScramCredentialRecord("alice", SCRAM_SHA_512)]
    assert describe_credentials(image, []) == [("alice", 0, None, [(SCRAM_SHA_256, 10000)])]


@pytest.mark.parametrize("deletions, upsertions, error", [
    ([ScramDeletion("alice", SCRAM_SHA_512)], [],
     (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")),
    ([ScramDeletion("alice", 3)], [], (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")),
    ([], [upsert(mechanism=0)], (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")),
    ([], [upsert(iterations=4095)], (ErrorCode.unacceptable_credential, "Too few iterations")),
    ([], [upsert(iterations=16385)], (ErrorCode.unacceptable_credential, "Too many iterations")),
    ([], [ScramUpsertion("alice", 1, 4096, b"s", b"")],
     (ErrorCode.unacceptable_credential, "Salted password must not be empty")),
    ([ScramDeletion("alice", SCRAM_SHA_256)], [upsert()], DUP),
    ([], [upsert(), upsert(password=b"other")], DUP),
    ([ScramDeletion("alice", SCRAM_SHA_256), ScramDeletion("alice", SCRAM_SHA_256)], [], DUP),
])
def test_refusals(deletions, upsertions, error):
    """A refused alteration fails its user as a whole (the valid ones of that user are not applied); other users
    are unaffected."""
    start, _, _ = run(MetadataImage(), upsertions=[upsert(), upsert("bob")])
    image, records, answer = run(start, deletions=deletions,
                                 upsertions=[*upsertions, upsert(mechanism=SCRAM_SHA_512), upsert("carol")])
    assert answer == [("alice", *error), ("carol", *NONE)]
    assert [r.name for r in records] == ["carol"]
    assert image.scram_credentials[("alice", SCRAM_SHA_256)] == start.scram_credentials[("alice", SCRAM_SHA_256)]


def test_empty_user_name():
    _, records, answer = run(MetadataImage(), deletions=[ScramDeletion("", 1)], upsertions=[upsert("")])
    assert answer == [("", ErrorCode.unacceptable_credential, "Username must not be empty")] and records == []


def test_describe_errors():
    image, _, _ = run(MetadataImage(), upsertions=[upsert(), upsert("bob", iterations=5000)])
    assert describe_credentials(image, ["bob", "nobody", "alice", "alice"]) == [
        ("bob", 0, None, [(SCRAM_SHA_256, 5000)]),
        ("nobody", ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist: nobody",
         []),
        ("alice", ErrorCode.duplicate_resource,
         "Cannot describe SCRAM credentials for the same user twice in a single request: alice", [])]


def test_credentials_survive_a_snapshot_and_the_wire():
    image, _, _ = run(MetadataImage(), upsertions=[upsert(), upsert("bob", SCRAM_SHA_512)])
    records = image.to_records()
    assert dict(MetadataImage().apply(records).scram_credentials) == dict(image.scram_credentials)
    assert [decode(encode(Envelope(0, r))).record for r in records] == records
    with pytest.raises(ValueError, match="unknown SCRAM credential"):
        image.apply([RemoveUserScramCredentialRecord("bob", SCRAM_SHA_256)])


async def test_handlers(monkeypatch):
    from broker.handlers import alter_user_scram_credentials as alter, describe_user_scram_credentials as describe
    from tests.unit.test_acl_control import FakeBroker, call
    broker = FakeBroker(authorizer="")                 # SCRAM does not need an authorizer
    u = upsert()
    resp = await call(alter, broker, 0, {"deletions": [{"name": "bob", "mechanism": 2}], "upsertions": [
        {"name": u.name, "mechanism": u.mechanism, "iterations": u.iterations, "salt": u.salt,
         "salted_password": u.salted_password}]})
    assert [(r.user, r.error_code) for r in resp.results] == [("bob", ErrorCode.resource_not_found), ("alice", 0)]
    resp = await call(describe, broker, 0, {"users": None})
    assert [(r.user, [(c.mechanism, c.iterations) for c in r.credential_infos]) for r in resp.results] == \
        [("alice", [(1, 4096)])]
    resp = await call(describe, broker, 0, {"users": [{"name": "alice"}, {"name": "nobody"}]})
    assert [(r.user, r.error_code) for r in resp.results] == [("alice", 0), ("nobody", ErrorCode.resource_not_found)]

    for module in (alter, describe):
        monkeypatch.setattr(module, "authorize", lambda b, r, op, rtype, name: False)
    resp = await call(describe, broker, 0, {"users": [{"name": "alice"}]})
    assert resp.error_code == ErrorCode.cluster_authorization_failed and resp.results[0].error_code == 31
    resp = await call(alter, broker, 0, {"deletions": [{"name": "alice", "mechanism": 1}], "upsertions": []})
    assert [(r.user, r.error_code) for r in resp.results] == [("alice", ErrorCode.cluster_authorization_failed)]
    assert ("alice", 1) in broker.image.scram_credentials
