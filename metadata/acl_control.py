"""ACLs as the controller changes them (Kafka's AclControlManager) and as DescribeAcls reads them: CreateAcls and
DeleteAcls are controller operations (the latest image in, AccessControlEntryRecord / RemoveAccessControlEntryRecord
out), so two requests never decide from the same state; the filter matching is Kafka's AclBindingFilter
(ResourcePatternFilter + AccessControlEntryFilter), which DeleteAcls and DescribeAcls share.

Validation and messages follow Kafka's AclApis.handleCreateAcls (the CLUSTER resource's name, an empty name) and then
AclControlManager.validateNewAcl; a code the enums lack reads as UNKNOWN, as Kafka's fromCode does.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Iterable

from metadata.acls import (CLUSTER_NAME, WILDCARD, AclOperation, AclPermissionType, PatternType, ResourceType,
                           StandardAcl)
from metadata.image import MetadataImage
from metadata.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from protocol.errors import ErrorCode

MAX_RECORDS_PER_USER_OP = 10_000     # Kafka's QuorumController bound on one operation's records
TOO_LARGE = (ErrorCode.policy_violation, "Unable to perform excessively large batch operation.")


def known(enum_cls, code: int):
    """`code` as a member of `enum_cls`, UNKNOWN (0) for a code it lacks (Kafka's fromCode)."""
    try:
        return enum_cls(code)
    except ValueError:
        return enum_cls(0)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: None names, principals and hosts match everything, as ANY does for the codes;
    pattern type MATCH matches the bindings that apply to the named resource (literal, "*" and prefixes of it)."""
    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission_type: int = AclPermissionType.ANY

    def unknown_part(self) -> str | None:
        """Kafka's AclControlManager.validateFilter: why this filter cannot be used, or None."""
        if known(ResourceType, self.resource_type) == ResourceType.UNKNOWN or \
                known(PatternType, self.pattern_type) == PatternType.UNKNOWN:
            return "Unknown patternFilter."
        if known(AclOperation, self.operation) == AclOperation.UNKNOWN or \
                known(AclPermissionType, self.permission_type) == AclPermissionType.UNKNOWN:
            return "Unknown entryFilter."
        return None

    def matches_pattern(self, acl: StandardAcl) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        wildcard_types = (PatternType.ANY, PatternType.MATCH)
        if self.pattern_type not in wildcard_types and self.pattern_type != acl.pattern_type:
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type == PatternType.ANY or self.pattern_type == acl.pattern_type:
            return self.resource_name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:         # MATCH from here on
            return self.resource_name == acl.resource_name or acl.resource_name == WILDCARD
        if acl.pattern_type == PatternType.PREFIXED:
            return self.resource_name.startswith(acl.resource_name)
        return False                                        # Kafka throws: no stored ACL has another pattern type

    def matches_entry(self, acl: StandardAcl) -> bool:
        """Kafka's AccessControlEntryFilter.matches."""
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and (self.operation == AclOperation.ANY or self.operation == acl.operation)
                and (self.permission_type == AclPermissionType.ANY or self.permission_type == acl.permission_type))

    def matches(self, acl: StandardAcl) -> bool:
        return self.matches_pattern(acl) and self.matches_entry(acl)


def validate_new_acl(acl: StandardAcl) -> tuple[int, str] | None:
    """Why `acl` cannot be created (INVALID_REQUEST and Kafka's message), or None: AclApis' checks of the resource
    name, then AclControlManager.validateNewAcl's of the codes and the principal ("Type:name")."""
    rtype, ptype = known(ResourceType, acl.resource_type), known(PatternType, acl.pattern_type)
    op, perm = known(AclOperation, acl.operation), known(AclPermissionType, acl.permission_type)
    why = None
    if rtype == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        why = f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    elif not acl.resource_name:
        why = "Invalid empty resource name"
    elif rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
        why = f"Invalid resourceType {rtype.name}"
    elif ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        why = f"Invalid patternType {ptype.name}"
    elif op in (AclOperation.UNKNOWN, AclOperation.ANY):
        why = f"Invalid operation {op.name}"
    elif perm not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        why = f"Invalid permissionType {perm.name}"
    elif ":" not in (acl.principal or ""):
        why = (f"Could not parse principal from `{acl.principal}` (no colon is present separating the principal "
               f"type from the principal name)")
    return None if why is None else (ErrorCode.invalid_request, why)


def _record(acl_id: str, acl: StandardAcl) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(acl_id, int(acl.resource_type), acl.resource_name, int(acl.pattern_type),
                                    acl.principal, acl.host, int(acl.operation), int(acl.permission_type))


def create_acls(bindings: list[StandardAcl]):
    """CreateAcls as a controller operation; answers one (error code, message) per binding, in order. A binding
    that exists already (or twice in the request) succeeds without a second record, as in Kafka."""
    def operation(image: MetadataImage):
        existing = set(image.acls.values())
        taken: set[str] = set()
        records: list = []
        results: list[tuple[int, str | None]] = []
        for acl in bindings:
            refused = validate_new_acl(acl)
            if refused is not None:
                results.append(refused)
                continue
            if acl not in existing:
                existing.add(acl)
                acl_id = uuid.uuid4().hex
                while acl_id in image.acls or acl_id in taken:     # Kafka's newAclId
                    acl_id = uuid.uuid4().hex
                taken.add(acl_id)
                records.append(_record(acl_id, acl))
            results.append((0, None))
        if len(records) > MAX_RECORDS_PER_USER_OP:
            return [], [TOO_LARGE] * len(bindings)
        return records, results
    return operation


def delete_acls(filters: list[AclBindingFilter]):
    """DeleteAcls as a controller operation; answers one (error code, message, matched ACLs) per filter. Each
    filter matches against the image the operation starts from, so an ACL two filters match is reported by both
    and removed once (Kafka's deleteAcls)."""
    def operation(image: MetadataImage):
        removed: dict[str, None] = {}
        results: list[tuple[int, str | None, list[StandardAcl]]] = []
        for f in filters:
            why = f.unknown_part()
            if why is not None:
                results.append((ErrorCode.invalid_request, why, []))
                continue
            matched = [(acl_id, acl) for acl_id, acl in image.acls.items() if f.matches(acl)]
            removed.update(dict.fromkeys(acl_id for acl_id, _ in matched))
            results.append((0, None, [acl for _, acl in matched]))
        if len(removed) > MAX_RECORDS_PER_USER_OP:
            return [], [(*TOO_LARGE, [])] * len(filters)
        return [RemoveAccessControlEntryRecord(acl_id) for acl_id in removed], results
    return operation


def matching_acls(image: MetadataImage, f: AclBindingFilter) -> list[StandardAcl]:
    """The ACLs of `image` that `f` matches (DescribeAcls, Kafka's Authorizer.acls(filter))."""
    return [acl for acl in image.acls.values() if f.matches(acl)]


def by_resource(acls: Iterable[StandardAcl]) -> dict[tuple[int, str, int], list[StandardAcl]]:
    """ACLs grouped by resource pattern (type, name, pattern type), sorted, as DescribeAcls answers them."""
    out: dict[tuple[int, str, int], list[StandardAcl]] = {}
    for acl in sorted(set(acls), key=lambda a: (a.resource_type, a.resource_name, a.pattern_type, a.principal,
                                                a.host, a.operation, a.permission_type)):
        out.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    return out
