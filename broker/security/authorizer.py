"""Kafka's StandardAuthorizer (KRaft's ACL authorizer) over the ACLs of the metadata image.

The rules, as Kafka's StandardAuthorizerData applies them to one action (operation on a LITERAL resource):

- a principal named in `super.users` ("User:a;User:b") may do anything;
- the ACLs that apply to a resource are its LITERAL ones, the LITERAL "*" (wildcard) ones of its type and the
  PREFIXED ones whose name begins its name; an ACL matches the request when its principal is the request's or
  "User:*", its host "*" or the client's address, and its operation the requested one, or ALL, or - for ALLOW only -
  one that implies it (READ, WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS);
- a matching DENY wins over any ALLOW; a matching ALLOW allows;
- nothing matching: `allow.everyone.if.no.acl.found` allows only when no ACL at all (of any principal) applies to the
  resource, so granting one user access to a topic closes it to everybody else.

The ACLs are indexed once per set of ACLs (not per request): literal ones by (type, name) and prefixed ones by
(type, prefix) with the prefix lengths in use, so one check costs a few dict lookups, and results are memoized per
index. ACL ids are never reused (Kafka's AclControlManager), so the set of ids tells whether the ACLs changed.
"""
from __future__ import annotations

import functools
import ipaddress
from types import MappingProxyType
from typing import Iterable, Mapping

from metadata.acls import AclOperation, AclPermissionType, PatternType, ResourceType, StandardAcl

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# ZooKeeper-era name of Kafka's ACL authorizer: same ACL semantics, accepted so old server.properties keep working
AUTHORIZER_ALIASES = frozenset({STANDARD_AUTHORIZER, "kafka.security.authorizer.AclAuthorizer"})

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

_ALL = AclOperation.ALL
_ALLOW = AclPermissionType.ALLOW
_DENY = AclPermissionType.DENY
_LITERAL = PatternType.LITERAL
_PREFIXED = PatternType.PREFIXED
_DESCRIBE = AclOperation.DESCRIBE
_DESCRIBE_CONFIGS = AclOperation.DESCRIBE_CONFIGS
# what an ALLOW of each operation grants beyond itself (never a DENY: denying READ does not deny DESCRIBE)
_IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                               AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

# Kafka's AclEntry.supportedOperations: the operations KIP-430's authorized-operations bitfields report per type
SUPPORTED_OPERATIONS: dict[int, tuple[int, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}
ALL_SUPPORTED: dict[int, int] = {t: sum(1 << op for op in ops) for t, ops in SUPPORTED_OPERATIONS.items()}

_MEMO_LIMIT = 65536
_EMPTY: Mapping = MappingProxyType({})


def parse_super_users(value: str | None) -> frozenset[str]:
    """`super.users` as Kafka's StandardAuthorizer.getConfiguredSuperUsers reads it: semicolon-separated principals,
    blanks ignored, each "Type:name" (a malformed one fails at start-up with Kafka's message)."""
    out = set()
    for part in (value or "").split(";"):
        p = part.strip()
        if p:
            if len(p.split(":", 1)) != 2:
                raise ValueError(f"expected a string in format principalType:principalName but got {p}")
            out.add(p)
    return frozenset(out)


@functools.lru_cache(maxsize=4096)
def java_host(address: str) -> str:
    """A client address as Kafka's InetAddress.getHostAddress() writes it, which is what ACL hosts are compared
    with: IPv4 as is, an IPv4-mapped IPv6 address as IPv4, other IPv6 addresses in full lowercase groups without
    leading zeros and without "::" ("0:0:0:0:0:0:0:1")."""
    if ":" not in address:
        return address
    addr, _, scope = address.partition("%")
    try:
        ip = ipaddress.IPv6Address(addr)
    except ValueError:
        return address
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    full = ":".join(format(int(g, 16), "x") for g in ip.exploded.split(":"))
    return f"{full}%{scope}" if scope else full


class _AclIndex:
    """One set of ACLs, indexed for lookups by resource, with a memo of answers (valid as long as the ACLs)."""
    __slots__ = ("ids", "literal", "prefixed", "prefix_lengths", "by_type", "memo")

    def __init__(self, acls: Mapping):
        self.ids = frozenset(acls)
        literal: dict[tuple[int, str], list] = {}
        prefixed: dict[tuple[int, str], list] = {}
        lengths: dict[int, set[int]] = {}
        by_type: dict[int, list] = {}
        for acl in acls.values():
            by_type.setdefault(acl.resource_type, []).append(acl)
            key = (acl.resource_type, acl.resource_name)
            if acl.pattern_type == _LITERAL:
                literal.setdefault(key, []).append(acl)
            elif acl.pattern_type == _PREFIXED:
                prefixed.setdefault(key, []).append(acl)
                lengths.setdefault(acl.resource_type, set()).add(len(acl.resource_name))
        self.literal = {k: tuple(v) for k, v in literal.items()}
        self.prefixed = {k: tuple(v) for k, v in prefixed.items()}
        self.prefix_lengths = {t: tuple(sorted(v)) for t, v in lengths.items()}
        self.by_type = {t: tuple(v) for t, v in by_type.items()}
        self.memo: dict[tuple, bool] = {}

    def applicable(self, resource_type: int, name: str) -> list[tuple[StandardAcl, ...]]:
        """The groups of ACLs that apply to the resource: exact literal, wildcard literal, and each matching prefix."""
        out = []
        hit = self.literal.get((resource_type, name))
        if hit:
            out.append(hit)
        if name != WILDCARD:
            hit = self.literal.get((resource_type, WILDCARD))
            if hit:
                out.append(hit)
        n = len(name)
        for length in self.prefix_lengths.get(resource_type, ()):
            if length > n:
                break
            hit = self.prefixed.get((resource_type, name[:length]))
            if hit:
                out.append(hit)
        return out


def acl_result(acl: StandardAcl, principal: str, host: str, operation: int) -> bool | None:
    """Kafka's StandardAuthorizerData.findResult for an ACL whose resource matches: True (allow), False (deny) or
    None (does not apply to this principal, host and operation). Only ALLOW ACLs imply other operations; an ACL
    whose permission is not ALLOW denies (as Kafka reads it)."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    op = acl.operation
    if op != _ALL:
        if acl.permission_type == _ALLOW:
            if operation == _DESCRIBE:
                if op not in _IMPLIES_DESCRIBE:
                    return None
            elif operation == _DESCRIBE_CONFIGS:
                if op not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif op != operation:
                return None
        elif op != operation:
            return None
    return acl.permission_type == _ALLOW


class StandardAuthorizer:
    """Decides actions for principals against the ACLs last given to `load` (the broker passes its image's ACLs
    before each check; an unchanged set costs an identity test)."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False):
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = bool(allow_everyone_if_no_acl_found)
        self._source: Mapping = _EMPTY
        self._index = _AclIndex(_EMPTY)

    @classmethod
    def from_config(cls, config) -> "StandardAuthorizer":
        get = config.get
        allow = (get("allow.everyone.if.no.acl.found") or "").strip().lower() == "true"
        return cls(parse_super_users(get("super.users")), allow)

    # ---- the ACLs ------------------------------------------------------------------------------------------------
    def load(self, acls: Mapping | None) -> None:
        """Use `acls` (id -> StandardAcl, the image's `acls`) from now on; re-indexed only when the ids changed."""
        if acls is self._source:
            return
        if acls is None:
            acls = _EMPTY
        if acls.keys() != self._index.ids:
            self._index = _AclIndex(acls)
        self._source = acls

    @property
    def acl_count(self) -> int:
        return len(self._index.ids)

    # ---- decisions -------------------------------------------------------------------------------------------------
    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        """Whether `principal` from `host` (an IP as Kafka writes it, see java_host) may do `operation` on the
        literal resource (`resource_type`, `name`)."""
        if principal in self.super_users:
            return True
        index = self._index
        key = (principal, host, operation, resource_type, name)
        hit = index.memo.get(key)
        if hit is not None:
            return hit
        result = self._decide(index, principal, host, operation, resource_type, name)
        if len(index.memo) >= _MEMO_LIMIT:
            index.memo.clear()
        index.memo[key] = result
        return result

    def _decide(self, index: _AclIndex, principal, host, operation, resource_type, name) -> bool:
        groups = index.applicable(resource_type, name)
        allowed = False
        for group in groups:
            for acl in group:
                r = acl_result(acl, principal, host, operation)
                if r is None:
                    continue
                if not r:
                    return False                        # DENY wins
                allowed = True
        if allowed:
            return True
        # no matching ALLOW: the default applies only to resources no ACL at all names (Kafka's hasResourceAcls)
        return self.allow_everyone_if_no_acl_found and not groups

    def authorized_operations(self, principal: str, host: str, resource_type: int, name: str) -> int:
        """KIP-430's bitfield (bit `1 << code`) of the operations the type supports that the principal may do."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits

    def authorize_by_resource_type(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Kafka's Authorizer.authorizeByResourceType (the default method StandardAuthorizer inherits): whether the
        principal may do `operation` on at least one resource of the type - some ALLOW (exact operation or ALL)
        not dominated by a DENY of the same literal name or of a prefix of it; a wildcard DENY refuses outright.
        Used for idempotent producers (WRITE on any topic, KIP-679)."""
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN) or operation in (AclOperation.ANY,
                                                                                        AclOperation.UNKNOWN):
            raise ValueError("authorize_by_resource_type needs a concrete operation and resource type")
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True                                 # super users, and the allow-if-no-ACL default
        deny_literal, deny_prefix, allow_literal, allow_prefix = set(), set(), set(), set()
        wildcard_allow = False
        for acl in self._index.by_type.get(resource_type, ()):
            if acl.host != host and acl.host != WILDCARD:
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation != operation and acl.operation != _ALL:
                continue
            if acl.permission_type == _DENY:
                if acl.pattern_type == _LITERAL:
                    if acl.resource_name == WILDCARD:
                        return False
                    deny_literal.add(acl.resource_name)
                elif acl.pattern_type == _PREFIXED:
                    deny_prefix.add(acl.resource_name)
            elif acl.permission_type == _ALLOW:
                if acl.pattern_type == _LITERAL:
                    if acl.resource_name == WILDCARD:
                        wildcard_allow = True
                    else:
                        allow_literal.add(acl.resource_name)
                elif acl.pattern_type == _PREFIXED:
                    allow_prefix.add(acl.resource_name)
        if wildcard_allow:
            return True

        def dominated(name: str) -> bool:
            return any(name[:i] in deny_prefix for i in range(1, len(name) + 1))

        if any(n not in deny_literal and not dominated(n) for n in allow_literal):
            return True
        return any(not dominated(n) for n in allow_prefix)


def load_authorizer(config) -> StandardAuthorizer | None:
    """The authorizer `authorizer.class.name` names: None when empty (everything allowed, Kafka's default), Kafka's
    StandardAuthorizer (or the legacy AclAuthorizer name for it); any other class fails start-up."""
    name = (config.get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if name not in AUTHORIZER_ALIASES:
        raise ValueError(f"authorizer.class.name={name!r} is not supported: Strata implements "
                         f"{STANDARD_AUTHORIZER} (also accepted as kafka.security.authorizer.AclAuthorizer); "
                         f"leave it empty to allow every request")
    return StandardAuthorizer.from_config(config)
