"""ACLs in the metadata image and the controller's CreateAcls / DeleteAcls operations (metadata/acl_control.py):
Kafka's validation and messages, Kafka's AclBindingFilter matching (checked against a literal transcription of
ResourcePatternFilter.matches / AccessControlEntryFilter.matches with hypothesis), and snapshots."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.acl_control import (AclBindingFilter, by_resource, create_acls, delete_acls, matching_acls,
                                  validate_new_acl)
from metadata.acls import AclOperation as Op, AclPermissionType as Perm, PatternType as PT, ResourceType as RT, \
    StandardAcl
from metadata.image import MetadataImage
from metadata.records import (AccessControlEntryRecord, Envelope, MetadataSnapshot, RemoveAccessControlEntryRecord,
                              decode, encode)
from protocol.errors import ErrorCode


def acl(rtype=RT.TOPIC, name="orders", ptype=PT.LITERAL, principal="User:alice", host="*", op=Op.READ,
        perm=Perm.ALLOW) -> StandardAcl:
    return StandardAcl(rtype, name, ptype, principal, host, op, perm)


def run(image: MetadataImage, operation):
    """One controller operation: its records applied (validating them), and its answer."""
    records, answer = operation(image)
    return image.apply(records), records, answer


def with_acls(*acls: StandardAcl) -> MetadataImage:
    image, _, answer = run(MetadataImage(), create_acls(list(acls)))
    assert all(code == 0 for code, _ in answer), answer
    return image


# ---- validation ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("binding, message", [
    (acl(RT.CLUSTER, "my-cluster", op=Op.ALTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(name=""), "Invalid empty resource name"),
    (acl(RT.ANY), "Invalid resourceType ANY"),
    (acl(RT.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (acl(99), "Invalid resourceType UNKNOWN"),                 # a code Kafka lacks reads as UNKNOWN
    (acl(ptype=PT.MATCH), "Invalid patternType MATCH"),
    (acl(ptype=PT.ANY), "Invalid patternType ANY"),
    (acl(op=Op.ANY), "Invalid operation ANY"),
    (acl(op=Op.UNKNOWN), "Invalid operation UNKNOWN"),
    (acl(perm=Perm.ANY), "Invalid permissionType ANY"),
    (acl(principal="alice"), "Could not parse principal from `alice` (no colon is present separating the principal "
                             "type from the principal name)"),
])
def test_create_refuses_what_kafka_refuses(binding, message):
    image, records, answer = run(MetadataImage(), create_acls([binding, acl()]))
    assert answer == [(ErrorCode.invalid_request, message), (0, None)]
    assert list(image.acls.values()) == [acl()]               # the valid one of the request is created


def test_create_accepts_wildcards_and_prefixes():
    ok = [acl(name="*"), acl(principal="User:*"), acl(ptype=PT.PREFIXED, name="ord"),
          acl(RT.CLUSTER, "kafka-cluster", op=Op.IDEMPOTENT_WRITE), acl(RT.GROUP, "g", op=Op.DESCRIBE,
                                                                        perm=Perm.DENY, host="10.0.0.1")]
    image = with_acls(*ok)
    assert set(image.acls.values()) == set(ok)


def test_an_existing_binding_is_not_duplicated():
    image = with_acls(acl())
    image, records, answer = run(image, create_acls([acl(), acl(op=Op.WRITE), acl(op=Op.WRITE)]))
    assert answer == [(0, None)] * 3
    assert len(records) == 1 and len(image.acls) == 2


# ---- delete and describe -------------------------------------------------------------------------------------------
def test_delete_reports_per_filter_and_removes_once():
    a, b, c = acl(), acl(op=Op.WRITE), acl(RT.GROUP, "g")
    image = with_acls(a, b, c)
    filters = [AclBindingFilter(RT.TOPIC, "orders", PT.LITERAL), AclBindingFilter(operation=Op.WRITE),
               AclBindingFilter(RT.TOPIC, "nothing", PT.LITERAL), AclBindingFilter(RT.UNKNOWN),
               AclBindingFilter(permission_type=Perm.UNKNOWN)]
    image, records, answer = run(image, delete_acls(filters))
    assert answer == [(0, None, [a, b]), (0, None, [b]), (0, None, []),
                      (ErrorCode.invalid_request, "Unknown patternFilter.", []),
                      (ErrorCode.invalid_request, "Unknown entryFilter.", [])]
    assert len(records) == 2 and all(isinstance(r, RemoveAccessControlEntryRecord) for r in records)
    assert list(image.acls.values()) == [c]


def test_match_finds_the_acls_that_apply_to_a_resource():
    literal, wildcard, prefix, other_prefix, group = (acl(), acl(name="*"), acl(ptype=PT.PREFIXED, name="ord"),
                                                      acl(ptype=PT.PREFIXED, name="x"), acl(RT.GROUP, "orders"))
    image = with_acls(literal, wildcard, prefix, other_prefix, group)
    match = AclBindingFilter(RT.TOPIC, "orders", PT.MATCH)
    assert set(matching_acls(image, match)) == {literal, wildcard, prefix}
    # ANY: the exact name under any pattern type; LITERAL / PREFIXED: that pattern type only
    assert matching_acls(image, AclBindingFilter(RT.TOPIC, "ord", PT.ANY)) == [prefix]
    assert matching_acls(image, AclBindingFilter(RT.TOPIC, "orders", PT.PREFIXED)) == []
    assert set(matching_acls(image, AclBindingFilter(RT.ANY, "orders", PT.ANY))) == {literal, group}
    assert len(matching_acls(image, AclBindingFilter())) == 5
    # a MATCH filter without a name matches every pattern type
    assert set(matching_acls(image, AclBindingFilter(RT.TOPIC, None, PT.MATCH))) == {literal, wildcard, prefix,
                                                                                     other_prefix}


def test_by_resource_groups_bindings():
    a, b, c = acl(), acl(op=Op.WRITE), acl(RT.GROUP, "g")
    assert by_resource([c, b, a, a]) == {(RT.TOPIC, "orders", PT.LITERAL): [a, b], (RT.GROUP, "g", PT.LITERAL): [c]}


# ---- Kafka's matching, transcribed literally -----------------------------------------------------------------------
def kafka_matches(f: AclBindingFilter, b: StandardAcl) -> bool:
    """ResourcePatternFilter.matches && AccessControlEntryFilter.matches, statement by statement."""
    def pattern() -> bool:
        if f.resource_type != RT.ANY and f.resource_type != b.resource_type:
            return False
        if f.pattern_type != PT.ANY and f.pattern_type != PT.MATCH and f.pattern_type != b.pattern_type:
            return False
        if f.resource_name is None:
            return True
        if f.pattern_type == PT.ANY or f.pattern_type == b.pattern_type:
            return f.resource_name == b.resource_name
        if b.pattern_type == PT.LITERAL:
            return f.resource_name == b.resource_name or b.resource_name == "*"
        if b.pattern_type == PT.PREFIXED:
            return f.resource_name.startswith(b.resource_name)
        raise AssertionError("Unsupported PatternType")

    def entry() -> bool:
        if f.principal is not None and f.principal != b.principal:
            return False
        if f.host is not None and f.host != b.host:
            return False
        if f.operation != Op.ANY and f.operation != b.operation:
            return False
        return f.permission_type == Perm.ANY or f.permission_type == b.permission_type
    return pattern() and entry()


names = st.sampled_from(["*", "", "o", "or", "orders", "orders-eu", "x", "kafka-cluster"])
principals = st.sampled_from(["User:alice", "User:bob", "User:*"])
hosts = st.sampled_from(["*", "10.0.0.1"])
bindings = st.builds(StandardAcl, st.sampled_from([RT.TOPIC, RT.GROUP, RT.CLUSTER]), names,
                     st.sampled_from([PT.LITERAL, PT.PREFIXED]), principals, hosts,
                     st.sampled_from([Op.ALL, Op.READ, Op.WRITE]), st.sampled_from([Perm.ALLOW, Perm.DENY]))
filters = st.builds(AclBindingFilter, st.sampled_from([RT.ANY, RT.TOPIC, RT.GROUP, RT.CLUSTER]), st.none() | names,
                    st.sampled_from([PT.ANY, PT.MATCH, PT.LITERAL, PT.PREFIXED]), st.none() | principals,
                    st.none() | hosts, st.sampled_from([Op.ANY, Op.ALL, Op.READ, Op.WRITE]),
                    st.sampled_from([Perm.ANY, Perm.ALLOW, Perm.DENY]))


@settings(max_examples=300, deadline=None)
@given(st.lists(bindings, max_size=8), st.lists(filters, min_size=1, max_size=3))
def test_filters_match_as_kafkas(acls, fs):
    image = with_acls(*[a for a in acls if validate_new_acl(a) is None])
    for f in fs:
        assert set(matching_acls(image, f)) == {a for a in image.acls.values() if kafka_matches(f, a)}
    _, _, answer = run(image, delete_acls(fs))
    for f, (code, _, matched) in zip(fs, answer):
        assert code == 0 and set(matched) == {a for a in image.acls.values() if kafka_matches(f, a)}


# ---- the image -----------------------------------------------------------------------------------------------------
def test_acls_survive_a_snapshot_and_the_wire():
    image = with_acls(acl(), acl(RT.CLUSTER, "kafka-cluster", op=Op.ALTER), acl(ptype=PT.PREFIXED, name="o"))
    image, _, _ = run(image, delete_acls([AclBindingFilter(RT.CLUSTER)]))
    snapshot = MetadataSnapshot(image.offset, 0, image.to_records())
    again = MetadataImage().apply(snapshot.records)
    assert dict(again.acls) == dict(image.acls)
    for r in snapshot.records:
        assert decode(encode(Envelope(0, r))).record == r


def test_a_duplicate_id_or_an_unknown_removal_is_refused():
    image = with_acls(acl())
    (acl_id, a), = image.acls.items()
    with pytest.raises(ValueError, match="exists already"):
        image.apply([AccessControlEntryRecord(acl_id, a.resource_type, "other", a.pattern_type, a.principal,
                                              a.host, a.operation, a.permission_type)])
    with pytest.raises(ValueError, match="unknown ACL"):
        image.apply([RemoveAccessControlEntryRecord("0" * 32)])
    assert image.apply([RemoveAccessControlEntryRecord(acl_id)]).acls == {}


# ---- the handlers, against a stand-in broker -----------------------------------------------------------------------
class FakeBroker:
    """What the ACL and SCRAM handlers use: config, the image (broker.topics.image), the controller."""

    def __init__(self, authorizer: str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"):
        self.config = {"authorizer.class.name": authorizer}
        self.image = MetadataImage()
        self.topics = self
        self.controller = self

    async def run(self, operation):
        records, answer = operation(self.image)
        self.image = self.image.apply(records)
        return answer


async def call(module, broker, version: int, body: dict):
    """The handler `module` on one request; its decoded response."""
    import inspect

    from broker.handlers import Request
    from protocol.client import decode_response, encode_request
    req = Request(module.API_KEY, version, 1, "test", bytearray(encode_request(module.API_KEY, version, body)), 0,
                  version >= 2)
    out = module.handle(broker, req)
    return decode_response(module.API_KEY, version, await out if inspect.isawaitable(out) else out)


CREATION = {"resource_type": 2, "resource_name": "orders", "resource_pattern_type": 3, "principal": "User:alice",
            "host": "*", "operation": 3, "permission_type": 3}
ANY_FILTER = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
              "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_handlers_create_describe_delete(version):
    from broker.handlers import create_acls as create, delete_acls as delete, describe_acls as describe
    broker = FakeBroker()
    resp = await call(create, broker, version, {"creations": [CREATION, {**CREATION, "resource_type": 4}]})
    assert [(r.error_code, r.error_message) for r in resp.results] == [
        (0, None), (ErrorCode.invalid_request, "The only valid name for the CLUSTER resource is kafka-cluster")]
    resp = await call(describe, broker, version, ANY_FILTER)
    assert resp.error_code == 0 and [(r.resource_name, [a.principal for a in r.acls]) for r in resp.resources] == \
        [("orders", ["User:alice"])]
    resp = await call(delete, broker, version, {"filters": [ANY_FILTER]})
    assert [(m.resource_name, m.principal, m.operation) for m in resp.filter_results[0].matching_acls] == \
        [("orders", "User:alice", 3)]
    assert broker.image.acls == {}


async def test_handlers_without_an_authorizer_or_authorization(monkeypatch):
    from broker.handlers import create_acls as create, delete_acls as delete, describe_acls as describe
    off = FakeBroker(authorizer="")
    resp = await call(create, off, 3, {"creations": [CREATION, CREATION]})
    assert [(r.error_code, r.error_message) for r in resp.results] == \
        [(ErrorCode.security_disabled, "No Authorizer is configured.")] * 2
    resp = await call(describe, off, 3, ANY_FILTER)
    assert (resp.error_code, resp.error_message) == (ErrorCode.security_disabled,
                                                     "No Authorizer is configured on the broker")
    resp = await call(delete, off, 3, {"filters": [ANY_FILTER]})
    assert resp.filter_results[0].error_code == ErrorCode.security_disabled
    asked = []
    for module in (create, delete, describe):
        monkeypatch.setattr(module, "authorize", lambda b, r, op, rtype, name: asked.append((op, rtype, name)))
    broker = FakeBroker()
    resp = await call(create, broker, 3, {"creations": [CREATION, CREATION]})
    assert [r.error_code for r in resp.results] == [ErrorCode.cluster_authorization_failed] * 2
    resp = await call(delete, broker, 3, {"filters": [ANY_FILTER]})
    assert [r.error_code for r in resp.filter_results] == [ErrorCode.cluster_authorization_failed]
    resp = await call(describe, broker, 3, ANY_FILTER)
    assert resp.error_code == ErrorCode.cluster_authorization_failed
    assert asked == [(Op.ALTER, RT.CLUSTER, "kafka-cluster")] * 2 + [(Op.DESCRIBE, RT.CLUSTER, "kafka-cluster")]
    assert broker.image.acls == {}
