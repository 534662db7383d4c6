"""The StandardAuthorizer against Kafka's StandardAuthorizerTest (translated case by case), Kafka's property tests,
and a hypothesis comparison with a brute-force reading of the rules over random ACL sets."""
from __future__ import annotations

import time
import uuid
from types import MappingProxyType, SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.security import authorization
from broker.security.authorizer import (ALL_SUPPORTED, StandardAuthorizer, java_host, load_authorizer,
                                        parse_super_users)
from metadata.acls import AclOperation as Op, AclPermissionType as Perm, PatternType as Pat, ResourceType as RT, \
    StandardAcl

ALLOW, DENY, LITERAL, PREFIXED = Perm.ALLOW, Perm.DENY, Pat.LITERAL, Pat.PREFIXED
TOPIC, GROUP, CLUSTER = RT.TOPIC, RT.GROUP, RT.CLUSTER
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, ALL = (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE,
                                                     Op.ALL)
DESCRIBE_CONFIGS, ALTER_CONFIGS = Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS
LOCALHOST = "127.0.0.1"          # MockAuthorizableRequestContext's default client address (InetAddress.getLocalHost)


def make(acls=(), super_users=("User:superman",), allow=False) -> StandardAuthorizer:
    az = StandardAuthorizer(super_users, allow)
    az.load(MappingProxyType({uuid.uuid4().hex: a for a in acls}))
    return az


def check(az, user, actions, host=LOCALHOST):
    """Kafka's authorizer.authorize(context(user, host), [newAction(op, type, name), ...])."""
    return [az.authorize(f"User:{user}", host, op, rt, name) for op, rt, name in actions]


def foo_acl(op, perm):          # newFooAcl
    return StandardAcl(TOPIC, "foo_", PREFIXED, "User:bob", "*", op, perm)


def bar_acl(op, perm):          # newBarAcl
    return StandardAcl(GROUP, "bar", LITERAL, "User:*", "*", op, perm)


# ---- configuration ---------------------------------------------------------------------------------------------

def test_get_configured_super_users():
    assert parse_super_users(None) == set()
    assert parse_super_users(" ") == set()
    assert parse_super_users("User:bob;User:alice ") == {"User:bob", "User:alice"}
    assert parse_super_users(";  User:bob  ;  User:alice ") == {"User:bob", "User:alice"}
    with pytest.raises(ValueError, match="expected a string in format principalType:principalName but got bob"):
        parse_super_users("bob;:alice")


def test_get_default_result_and_configure():
    assert not StandardAuthorizer.from_config({}).allow_everyone_if_no_acl_found
    assert StandardAuthorizer.from_config({"allow.everyone.if.no.acl.found": "true"}).allow_everyone_if_no_acl_found
    off = StandardAuthorizer.from_config({"allow.everyone.if.no.acl.found": "false"})
    assert not off.allow_everyone_if_no_acl_found
    az = StandardAuthorizer.from_config({"super.users": "User:alice;User:chris",
                                         "allow.everyone.if.no.acl.found": "true"})
    assert az.super_users == {"User:alice", "User:chris"} and az.allow_everyone_if_no_acl_found


def test_load_authorizer():
    assert load_authorizer({"authorizer.class.name": ""}) is None
    assert load_authorizer({}) is None
    for name in ("org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer"):
        assert isinstance(load_authorizer({"authorizer.class.name": name, "super.users": "User:a"}), StandardAuthorizer)
    with pytest.raises(ValueError, match="com.example.MyAuthorizer.*not supported"):
        load_authorizer({"authorizer.class.name": "com.example.MyAuthorizer"})


def test_allow_everyone_if_no_acl_found_enabled():
    az = make([StandardAcl(TOPIC, "topic1", LITERAL, "User:Alice", "*", READ, ALLOW)],
              ("User:alice", "User:chris"), allow=True)
    assert check(az, "Bob", [(READ, TOPIC, "topic1")]) == [False]     # topic1 has an ACL (for someone else)
    assert check(az, "Bob", [(READ, TOPIC, "topic2")]) == [True]      # topic2 has none


def test_allow_everyone_if_no_acl_found_disabled():
    az = make([StandardAcl(TOPIC, "topic1", LITERAL, "User:Alice", "*", READ, ALLOW)], ("User:alice", "User:chris"))
    assert check(az, "Bob", [(READ, TOPIC, "topic1"), (READ, TOPIC, "topic2")]) == [False, False]


# ---- findResult ------------------------------------------------------------------------------------------------

def test_find_result_implication():
    from broker.security.authorizer import acl_result
    for op in (DESCRIBE, READ, WRITE, DELETE, ALTER):                 # these imply DESCRIBE
        assert acl_result(foo_acl(op, ALLOW), "User:bob", LOCALHOST, DESCRIBE) is True
    assert acl_result(foo_acl(CREATE, ALLOW), "User:bob", LOCALHOST, DESCRIBE) is None
    for op in (READ, WRITE, DELETE, ALTER):                            # DENY ACLs do no implication
        assert acl_result(foo_acl(op, DENY), "User:bob", LOCALHOST, DESCRIBE) is None
    assert acl_result(foo_acl(DESCRIBE, DENY), "User:bob", LOCALHOST, DESCRIBE) is False
    for op in (DESCRIBE_CONFIGS, ALTER_CONFIGS):
        assert acl_result(foo_acl(op, ALLOW), "User:bob", LOCALHOST, DESCRIBE_CONFIGS) is True
    assert acl_result(foo_acl(ALTER_CONFIGS, DENY), "User:bob", LOCALHOST, DESCRIBE_CONFIGS) is None
    assert acl_result(foo_acl(ALTER_CONFIGS, DENY), "User:bob", LOCALHOST, ALTER_CONFIGS) is False


def test_find_result_principal_matching():
    from broker.security.authorizer import acl_result
    assert acl_result(foo_acl(READ, ALLOW), "User:bob", LOCALHOST, READ) is True
    assert acl_result(foo_acl(READ, ALLOW), "User:alice", LOCALHOST, READ) is None
    assert acl_result(bar_acl(READ, DENY), "User:alice", LOCALHOST, READ) is False     # User:* matches anyone


# ---- authorize ---------------------------------------------------------------------------------------------------

def test_simple_authorizations():
    az = make([foo_acl(READ, ALLOW), foo_acl(WRITE, ALLOW), bar_acl(DESCRIBE_CONFIGS, ALLOW),
               bar_acl(ALTER_CONFIGS, ALLOW)])
    assert check(az, "bob", [(READ, TOPIC, "foo_")]) == [True]
    assert check(az, "fred", [(ALTER_CONFIGS, GROUP, "bar")]) == [True]


def test_deny_precedence_with_operation_all():
    az = make([StandardAcl(TOPIC, "foo", LITERAL, "User:alice", "*", ALL, DENY),
               StandardAcl(TOPIC, "foo", PREFIXED, "User:alice", "*", READ, ALLOW),
               StandardAcl(TOPIC, "foo", LITERAL, "User:*", "*", ALL, DENY),
               StandardAcl(TOPIC, "foo", PREFIXED, "User:*", "*", DESCRIBE, ALLOW)])
    assert check(az, "alice", [(WRITE, TOPIC, "foo"), (READ, TOPIC, "foo"), (DESCRIBE, TOPIC, "foo"),
                               (READ, TOPIC, "foobar")]) == [False, False, False, True]
    assert check(az, "bob", [(DESCRIBE, TOPIC, "foo"), (READ, TOPIC, "foo"), (WRITE, TOPIC, "foo"),
                             (DESCRIBE, TOPIC, "foobaz"), (READ, TOPIC, "foobaz")]) == \
        [False, False, False, True, False]


def test_topic_acl_with_operation_all():
    az = make([StandardAcl(TOPIC, "foo", LITERAL, "User:*", "*", ALL, ALLOW),
               StandardAcl(TOPIC, "bar", PREFIXED, "User:alice", "*", ALL, ALLOW),
               StandardAcl(TOPIC, "baz", LITERAL, "User:bob", "*", ALL, ALLOW)])
    assert check(az, "alice", [(WRITE, TOPIC, "foo"), (DESCRIBE_CONFIGS, TOPIC, "bar"),
                               (DESCRIBE, TOPIC, "baz")]) == [True, True, False]
    assert check(az, "bob", [(WRITE, TOPIC, "foo"), (READ, TOPIC, "bar"), (DESCRIBE, TOPIC, "baz")]) == \
        [True, False, True]
    assert check(az, "malory", [(DESCRIBE, TOPIC, "foo"), (WRITE, TOPIC, "bar"), (READ, TOPIC, "baz")]) == \
        [True, False, False]


def test_host_address_acl_validation():
    host1, host2, local = "192.168.1.1", "192.168.1.2", LOCALHOST
    az = make([StandardAcl(TOPIC, "foo", LITERAL, "User:alice", host1, READ, DENY),
               StandardAcl(TOPIC, "foo", LITERAL, "User:alice", "*", READ, ALLOW),
               StandardAcl(TOPIC, "bar", LITERAL, "User:bob", host2, READ, ALLOW),
               StandardAcl(TOPIC, "bar", LITERAL, "User:*", local, DESCRIBE, ALLOW)])
    actions = [(READ, TOPIC, "foo"), (READ, TOPIC, "bar"), (DESCRIBE, TOPIC, "bar")]
    assert check(az, "alice", actions, local) == [True, False, True]
    assert check(az, "alice", actions, host1) == [False, False, False]
    assert check(az, "alice", actions, host2) == [True, False, False]
    assert check(az, "bob", actions, local) == [False, False, True]
    assert check(az, "bob", actions, host1) == [False, False, False]
    assert check(az, "bob", actions, host2) == [False, True, True]


MANY_ACLS = [StandardAcl(TOPIC, "green2", LITERAL, "User:*", "*", READ, ALLOW),
             StandardAcl(TOPIC, "green", PREFIXED, "User:bob", "*", READ, ALLOW),
             StandardAcl(TOPIC, "betamax4", LITERAL, "User:bob", "*", READ, ALLOW),
             StandardAcl(TOPIC, "betamax", LITERAL, "User:bob", "*", READ, ALLOW),
             StandardAcl(TOPIC, "beta", PREFIXED, "User:*", "*", READ, ALLOW),
             StandardAcl(TOPIC, "alpha", PREFIXED, "User:*", "*", READ, ALLOW),
             StandardAcl(TOPIC, "alp", PREFIXED, "User:bob", "*", READ, DENY),
             StandardAcl(GROUP, "*", LITERAL, "User:bob", "*", WRITE, ALLOW),
             StandardAcl(GROUP, "wheel", LITERAL, "User:*", "*", WRITE, DENY)]


def test_authorization_with_many_acls():
    az = make(MANY_ACLS)
    assert check(az, "bob", [(READ, TOPIC, "green1"), (WRITE, GROUP, "wheel")]) == [True, False]
    assert check(az, "bob", [(READ, TOPIC, "alpha"), (WRITE, GROUP, "arbitrary"), (READ, TOPIC, "ala")]) == \
        [False, True, False]


def test_super_users_bypass_acls():
    """testAuthorizationPriorToCompleteInitialLoad's super-user half: super users are allowed whatever the ACLs."""
    az = make(MANY_ACLS)
    assert check(az, "superman", [(READ, TOPIC, "green1"), (WRITE, GROUP, "wheel")]) == [True, True]


def test_prefix_acls():
    az = make([StandardAcl(TOPIC, "fooa", PREFIXED, "User:alice", "*", ALL, ALLOW),
               StandardAcl(TOPIC, "foobar", LITERAL, "User:bob", "*", ALL, ALLOW),
               StandardAcl(TOPIC, "f", PREFIXED, "User:bob", "*", ALL, ALLOW)])
    assert check(az, "bob", [(WRITE, TOPIC, "foobarr"), (READ, TOPIC, "goobar"), (READ, TOPIC, "fooa")]) == \
        [True, False, True]
    assert check(az, "alice", [(DESCRIBE, TOPIC, "fooa"), (WRITE, TOPIC, "bar"), (READ, TOPIC, "baz")]) == \
        [True, False, False]


def test_reload_only_when_acls_change():
    """A new image with the same ACL ids keeps the index (and its memo); a changed set is indexed again."""
    a = StandardAcl(TOPIC, "t", LITERAL, "User:bob", "*", READ, ALLOW)
    az = StandardAuthorizer()
    az.load(MappingProxyType({"1": a}))
    index = az._index
    az.load(MappingProxyType({"1": a}))
    assert az._index is index and az.authorize("User:bob", LOCALHOST, READ, TOPIC, "t")
    az.load(MappingProxyType({}))
    assert az._index is not index and not az.authorize("User:bob", LOCALHOST, READ, TOPIC, "t")


def test_authorized_operations_and_by_resource_type():
    az = make([StandardAcl(TOPIC, "t", LITERAL, "User:bob", "*", READ, ALLOW),
               StandardAcl(TOPIC, "t", LITERAL, "User:bob", "*", ALTER_CONFIGS, ALLOW)])
    assert az.authorized_operations("User:bob", LOCALHOST, TOPIC, "t") == \
        (1 << READ) | (1 << DESCRIBE) | (1 << ALTER_CONFIGS) | (1 << DESCRIBE_CONFIGS)
    assert az.authorized_operations("User:superman", LOCALHOST, TOPIC, "t") == ALL_SUPPORTED[TOPIC]
    assert az.authorized_operations("User:eve", LOCALHOST, CLUSTER, "kafka-cluster") == 0
    # Kafka's AuthorizerTest.testAuthorizeByResourceType* cases
    assert az.authorize_by_resource_type("User:bob", LOCALHOST, READ, TOPIC)
    assert not az.authorize_by_resource_type("User:bob", LOCALHOST, WRITE, TOPIC)
    az = make([StandardAcl(TOPIC, "t", LITERAL, "User:bob", "*", WRITE, ALLOW),
               StandardAcl(TOPIC, "t", PREFIXED, "User:bob", "*", WRITE, DENY)])
    assert not az.authorize_by_resource_type("User:bob", LOCALHOST, WRITE, TOPIC)     # dominated by the prefix DENY
    az = make([StandardAcl(TOPIC, "t", LITERAL, "User:bob", "*", WRITE, ALLOW),
               StandardAcl(TOPIC, "*", LITERAL, "User:*", "*", ALL, DENY)])
    assert not az.authorize_by_resource_type("User:bob", LOCALHOST, WRITE, TOPIC)     # a wildcard DENY
    az = make([StandardAcl(TOPIC, "ab", PREFIXED, "User:bob", "*", WRITE, ALLOW),
               StandardAcl(TOPIC, "abc", PREFIXED, "User:bob", "*", WRITE, DENY)])
    assert az.authorize_by_resource_type("User:bob", LOCALHOST, WRITE, TOPIC)          # "ab..." is not all denied
    assert make(allow=True).authorize_by_resource_type("User:x", LOCALHOST, WRITE, TOPIC)
    assert make().authorize_by_resource_type("User:superman", LOCALHOST, WRITE, TOPIC)


def test_java_host():
    assert java_host("10.0.0.1") == "10.0.0.1"
    assert java_host("::1") == "0:0:0:0:0:0:0:1"
    assert java_host("::ffff:10.1.2.3") == "10.1.2.3"
    assert java_host("fe80::0a:1%eth0") == "fe80:0:0:0:0:0:a:1%eth0"


def test_request_helpers():
    """authorization.py on a broker without an authorizer allows everything at the cost of one attribute test; with
    one it reads the image's ACLs and the request's principal and address."""
    req = SimpleNamespace(principal="User:bob", client_host="/10.0.0.7")
    none = SimpleNamespace(authorizer=None)
    assert authorization.authorize(none, req, WRITE, TOPIC, "t")
    assert authorization.name_checker(none, req, WRITE) is None
    assert authorization.authorized_operations(none, req, GROUP, "g") == ALL_SUPPORTED[GROUP]
    acls = MappingProxyType({"1": StandardAcl(TOPIC, "t", LITERAL, "User:bob", "10.0.0.7", WRITE, ALLOW),
                             "2": StandardAcl(CLUSTER, "kafka-cluster", LITERAL, "User:bob", "*", DESCRIBE, ALLOW)})
    broker = SimpleNamespace(authorizer=StandardAuthorizer(), topics=SimpleNamespace(image=SimpleNamespace(acls=acls)))
    assert authorization.authorize(broker, req, WRITE, TOPIC, "t")
    assert not authorization.authorize(broker, SimpleNamespace(principal="User:bob", client_host="/10.0.0.8"),
                                       WRITE, TOPIC, "t")
    assert authorization.filter_authorized(broker, req, DESCRIBE, TOPIC, ["t", "u", "t"]) == {"t"}
    allowed = authorization.name_checker(broker, req, WRITE)
    assert allowed("t") and not allowed("u")
    assert authorization.cluster_authorized_operations(broker, req) == 1 << DESCRIBE
    assert authorization.config_resource_error(broker, req, Op.DESCRIBE_CONFIGS, 4, "1") == 31
    assert authorization.config_resource_error(broker, req, Op.DESCRIBE_CONFIGS, 2, "t") == 29


def test_a_thousand_acls_cost_microseconds():
    acls = [StandardAcl(TOPIC, f"topic-{i}", LITERAL if i % 2 else PREFIXED, f"User:u{i % 37}", "*",
                        (READ, WRITE, DESCRIBE, ALL)[i % 4], ALLOW if i % 5 else DENY) for i in range(1000)]
    az = make(acls)
    names = [f"topic-{i}" for i in range(0, 1000, 7)]
    start = time.perf_counter()
    n = 0
    for _ in range(20):
        for name in names:
            az._index.memo.clear()             # the cost of a decision, not of the memo
            az.authorize("User:u3", "10.0.0.1", WRITE, TOPIC, name)
            n += 1
    per_check = (time.perf_counter() - start) / n
    assert per_check < 100e-6, f"{per_check * 1e6:.1f} µs per check"


# ---- Kafka's StandardAuthorizerPropertyTest ----------------------------------------------------------------------

topic_chars = st.text(alphabet="abcdefgh_-.09", min_size=1, max_size=12)


def _prefix_rules(topic, suffixes, perm, keep):
    patterns = {topic[:i] + s for i in range(len(topic)) for s in suffixes}
    return [StandardAcl(TOPIC, p, PREFIXED, "User:*", "*", WRITE, perm) for p in patterns if keep(p)]


@settings(max_examples=300, deadline=None)
@given(topic_chars, st.data(), st.sets(topic_chars, max_size=10))
def test_matching_prefix_deny_overrides_all_allow_rules(topic, data, suffixes):
    prefix = topic[:data.draw(st.integers(0, len(topic) - 1))]
    acls = [StandardAcl(TOPIC, prefix, PREFIXED, "User:*", "*", WRITE, DENY)]
    acls += _prefix_rules(topic, suffixes, ALLOW, lambda p: p != "")
    assert not make(acls, ()).authorize("User:user", LOCALHOST, WRITE, TOPIC, topic)


@settings(max_examples=300, deadline=None)
@given(topic_chars, st.sets(topic_chars, max_size=10))
def test_matching_literal_deny_overrides_all_allow_rules(topic, suffixes):
    acls = [StandardAcl(TOPIC, topic, LITERAL, "User:*", "*", WRITE, DENY)]
    acls += _prefix_rules(topic, suffixes, ALLOW, lambda p: p != "")
    assert not make(acls, ()).authorize("User:user", LOCALHOST, WRITE, TOPIC, topic)


@settings(max_examples=300, deadline=None)
@given(topic_chars, st.data(), st.sets(topic_chars, max_size=10), st.booleans())
def test_matching_allow_with_no_matching_deny_rules(topic, data, suffixes, literal):
    name = topic if literal else topic[:data.draw(st.integers(0, len(topic) - 1))]
    acls = [StandardAcl(TOPIC, name, LITERAL if literal else PREFIXED, "User:*", "*", WRITE, ALLOW)]
    acls += _prefix_rules(topic, suffixes, DENY, lambda p: p != "" and not topic.startswith(p))
    assert make(acls, ()).authorize("User:user", LOCALHOST, WRITE, TOPIC, topic)


# ---- brute force: the rules read literally, one ACL at a time ----------------------------------------------------

IMPLIED = {DESCRIBE: {DESCRIBE, READ, WRITE, DELETE, ALTER}, DESCRIBE_CONFIGS: {DESCRIBE_CONFIGS, ALTER_CONFIGS}}


def brute_force(acls, super_users, allow_default, principal, host, op, rtype, name) -> bool:
    if principal in super_users:
        return True

    def names_resource(a):
        if a.resource_type != rtype:
            return False
        if a.pattern_type == LITERAL:
            return a.resource_name in (name, "*")
        return a.pattern_type == PREFIXED and name.startswith(a.resource_name)

    def applies(a):
        if a.principal not in (principal, "User:*") or a.host not in (host, "*"):
            return False
        if a.operation == ALL or a.operation == op:
            return True
        return a.permission_type == ALLOW and a.operation in IMPLIED.get(op, ())

    relevant = [a for a in acls if names_resource(a)]
    matching = [a for a in relevant if applies(a)]
    if any(a.permission_type != ALLOW for a in matching):
        return False
    if matching:
        return True
    return allow_default and not relevant


NAMES = ["a", "ab", "abc", "b", "ba", "*", "abd", "c"]
OPS = [READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS, ALL]
acl_strategy = st.builds(StandardAcl, st.sampled_from([TOPIC, GROUP]), st.sampled_from(NAMES),
                         st.sampled_from([LITERAL, PREFIXED]), st.sampled_from(["User:alice", "User:bob", "User:*"]),
                         st.sampled_from(["*", "10.0.0.1", "10.0.0.2"]), st.sampled_from(OPS),
                         st.sampled_from([ALLOW, DENY]))


@settings(max_examples=400, deadline=None)
@given(st.lists(acl_strategy, max_size=25), st.booleans(), st.booleans(),
       st.lists(st.tuples(st.sampled_from(["User:alice", "User:bob", "User:carol"]),
                          st.sampled_from(["10.0.0.1", "10.0.0.2"]), st.sampled_from(OPS[:-1]),
                          st.sampled_from([TOPIC, GROUP]), st.sampled_from(NAMES + ["abcd", "zz", ""])),
                min_size=1, max_size=20))
def test_matches_brute_force(acls, allow_default, alice_super, actions):
    supers = ("User:alice",) if alice_super else ()
    az = make(acls, supers, allow_default)
    for principal, host, op, rtype, name in actions:
        expected = brute_force(acls, supers, allow_default, principal, host, op, rtype, name)
        assert az.authorize(principal, host, op, rtype, name) == expected, (principal, host, op, rtype, name)
        assert az.authorize(principal, host, op, rtype, name) == expected      # the memoized answer too
