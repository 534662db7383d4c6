"""`strata acls`: Kafka's kafka-acls.sh (AclCommand) over the Kafka protocol: --add, --remove and --list of ACL
bindings on topics, groups, the cluster, transactional ids, delegation tokens and user principals, with its options
(--allow/--deny-principal, --allow/--deny-host, --operation, --resource-pattern-type, the --producer and --consumer
shortcuts and their expansions, --force), its checks and its output, so scripts written for Kafka work unchanged."""
from __future__ import annotations

import argparse
import sys

from tools.admin_client import AdminClient, AdminError, error_name

# Kafka's codes (org.apache.kafka.common.{resource,acl}); the tool speaks only the protocol, as kafka-acls.sh does
RESOURCE_TYPES = ["UNKNOWN", "ANY", "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "DELEGATION_TOKEN", "USER"]
PATTERN_TYPES = ["UNKNOWN", "ANY", "MATCH", "LITERAL", "PREFIXED"]
OPERATIONS = ["UNKNOWN", "ANY", "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
              "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "CREATE_TOKENS", "DESCRIBE_TOKENS"]
PERMISSIONS = ["UNKNOWN", "ANY", "DENY", "ALLOW"]
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 2, 3, 4, 5, 6, 7
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
OP = {name: code for code, name in enumerate(OPERATIONS)}
DENY, ALLOW = 2, 3
CLUSTER_FILTER = (CLUSTER, "kafka-cluster", LITERAL)
# AclEntry.supportedOperations, by resource type (ALL is valid everywhere)
SUPPORTED = {TOPIC: {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"},
             GROUP: {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"},
             CLUSTER: {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER",
                       "DESCRIBE"},
             TRANSACTIONAL_ID: {"DESCRIBE", "WRITE"}, DELEGATION_TOKEN: {"DESCRIBE"},
             USER: {"CREATE_TOKENS", "DESCRIBE_TOKENS"}}

Filter = tuple        # (resource type, name or None, pattern type)
Entry = tuple         # (principal, host, operation, permission type)


def pascal(name: str) -> str:
    """Kafka's SecurityUtils.toPascalCase: IDEMPOTENT_WRITE -> IdempotentWrite, how the tool names operations."""
    return "".join(part.capitalize() for part in name.split("_"))


def parse_operation(text: str) -> int:
    """Kafka's SecurityUtils.operation: the Pascal-case name or its upper case (UNKNOWN otherwise); Kafka's enum
    names (IDEMPOTENT_WRITE) are accepted too."""
    for code, name in enumerate(OPERATIONS):
        if text in (pascal(name), pascal(name).upper(), name):
            return code
    return 0


def parse_principal(text: str) -> str:
    """Kafka's SecurityUtils.parseKafkaPrincipal: "Type:name"."""
    text = text.strip()
    if ":" not in text:
        raise AdminError(f"expected a string in format principalType:principalName but got {text}")
    return text


def pattern_str(f: Filter) -> str:
    rtype, name, ptype = f
    return (f"ResourcePattern(resourceType={RESOURCE_TYPES[rtype]}, name={'<any>' if name is None else name}, "
            f"patternType={PATTERN_TYPES[ptype]})")


def entry_str(e: Entry) -> str:
    principal, host, op, perm = e
    return f"(principal={principal}, host={host}, operation={OPERATIONS[op]}, permissionType={PERMISSIONS[perm]})"


def _entries_block(entries) -> str:
    """Kafka's `$Newline ${acls.map("\t" + _).mkString(Newline)} $Newline`."""
    return "\n " + "\n".join("\t" + entry_str(e) for e in sorted(entries)) + " \n"


def add_parser(sub) -> None:
    p = sub.add_parser("acls", help="add, remove and list ACLs (like kafka-acls.sh)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    p.add_argument("--add", action="store_true", help="add ACLs")
    p.add_argument("--remove", action="store_true", help="remove ACLs")
    p.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--topic", action="append", help="a topic ('*' for all)")
    p.add_argument("--group", action="append", help="a consumer group ('*' for all)")
    p.add_argument("--cluster", action="store_true", help="the cluster")
    p.add_argument("--transactional-id", action="append", help="a transactional id ('*' for all)")
    p.add_argument("--delegation-token", action="append", help="a delegation token ('*' for all)")
    p.add_argument("--user-principal", action="append", help="a user principal as the resource")
    p.add_argument("--resource-pattern-type", default="literal", metavar="ANY|MATCH|LITERAL|PREFIXED",
                   help="literal or prefixed when adding; any or match are filters for --list and --remove")
    p.add_argument("--allow-principal", action="append", metavar="TYPE:NAME")
    p.add_argument("--deny-principal", action="append", metavar="TYPE:NAME")
    p.add_argument("--allow-host", action="append")
    p.add_argument("--deny-host", action="append")
    p.add_argument("--principal", action="append", metavar="TYPE:NAME", help="with --list: only this principal's")
    p.add_argument("--operation", action="append",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens or All (the default)")
    p.add_argument("--producer", action="store_true", help="WRITE, DESCRIBE and CREATE on --topic")
    p.add_argument("--consumer", action="store_true", help="READ and DESCRIBE on --topic, READ on --group")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    p.add_argument("--force", action="store_true", help="remove without asking")
    p.set_defaults(run=run)


def check_args(args) -> None:
    """AclCommandOptions.checkArgs."""
    if [args.add, args.remove, args.list].count(True) != 1:
        raise AdminError("Command must include exactly one action: --list, --add, --remove. ")
    given = {k for k, v in vars(args).items() if v not in (None, False, [])}

    def invalid_with(used: str, *others: str) -> None:
        for o in others:
            if o in given:
                raise AdminError(f'Option "[{used.replace("_", "-")}]" can\'t be used with option '
                                 f'"[{o.replace("_", "-")}]"')
    if args.list:
        invalid_with("list", "producer", "consumer", "allow_host", "allow_principal", "deny_host", "deny_principal")
    for shortcut in ("producer", "consumer"):
        if shortcut in given:
            invalid_with(shortcut, "operation", "deny_principal", "deny_host")
    if args.principal and not args.list:
        raise AdminError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise AdminError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise AdminError("The --idempotent option is only available if --producer is set")
    if args.consumer and (not args.topic or not args.group or
                          (not args.producer and (args.cluster or args.transactional_id))):
        raise AdminError("With --consumer you must specify a --topic and a --group and no --cluster or "
                         "--transactional-id option should be specified.")


def pattern_type(args) -> int:
    name = args.resource_pattern_type.strip().upper()
    if name not in PATTERN_TYPES[1:]:
        raise AdminError(f"Unknown resource-pattern-type: {args.resource_pattern_type}")
    return PATTERN_TYPES.index(name)


def resource_filters(args, die_if_none: bool = True) -> list[Filter]:
    """AclCommand.getResourceFilter: the resources named, with the --resource-pattern-type."""
    ptype = pattern_type(args)
    out: list[Filter] = [(TOPIC, t.strip(), ptype) for t in args.topic or []]
    if ptype == LITERAL and (args.cluster or args.idempotent):
        out.append(CLUSTER_FILTER)
    out += [(GROUP, g.strip(), ptype) for g in args.group or []]
    out += [(TRANSACTIONAL_ID, t, ptype) for t in args.transactional_id or []]
    out += [(DELEGATION_TOKEN, t.strip(), ptype) for t in args.delegation_token or []]
    out += [(USER, u.strip(), ptype) for u in args.user_principal or []]
    if not out and die_if_none:
        raise AdminError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
                         "--delegation-token <Delegation Token ID>")
    return list(dict.fromkeys(out))


def entries(args, operations: set[int]) -> set[Entry]:
    """AclCommand.getAcl: every (principal, host, operation) of the allowed and the denied principals; hosts
    default to "*" for the principals given."""
    out: set[Entry] = set()
    for principals, hosts, perm in ((args.allow_principal, args.allow_host, ALLOW),
                                    (args.deny_principal, args.deny_host, DENY)):
        if not principals:
            continue
        hosts = {h.strip() for h in hosts} if hosts else {"*"}
        out |= {(parse_principal(p), h, op, perm) for p in principals for h in hosts for op in operations}
    return out


def filters_to_entries(args) -> dict[Filter, set[Entry]]:
    """AclCommand.getResourceFilterToAcls: the CLI's own operations, or the --producer / --consumer expansions."""
    out: dict[Filter, set[Entry]] = {}
    if not args.producer and not args.consumer:
        ops = {parse_operation(o.strip()) for o in args.operation or ["All"]}
        out = {f: entries(args, ops) for f in resource_filters(args)}
    if args.producer:
        filters = resource_filters(args)
        for f in filters:
            if f[0] == TOPIC:
                out[f] = entries(args, {OP["WRITE"], OP["DESCRIBE"], OP["CREATE"]})
            elif f[0] == TRANSACTIONAL_ID:
                out[f] = entries(args, {OP["WRITE"], OP["DESCRIBE"]})
        if args.idempotent:
            out[CLUSTER_FILTER] = entries(args, {OP["IDEMPOTENT_WRITE"]})
    if args.consumer:
        for f in resource_filters(args):
            if f[0] == TOPIC:
                out[f] = out.get(f, set()) | entries(args, {OP["READ"], OP["DESCRIBE"]})
            elif f[0] == GROUP:
                out[f] = out.get(f, set()) | entries(args, {OP["READ"]})
    for f, es in out.items():                      # AclCommand.validateOperation
        valid = SUPPORTED[f[0]] | {"ALL"}
        if any(OPERATIONS[e[2]] not in valid for e in es):
            names = ", ".join(pascal(o) for o in OPERATIONS if o in valid)
            raise AdminError(f"ResourceType {RESOURCE_TYPES[f[0]]} only supports operations {names}")
    return out


def _check(code: int, message: str | None) -> None:
    if code:
        raise AdminError(message or error_name(code))


async def add(client: AdminClient, args, out) -> None:
    ptype = pattern_type(args)
    if ptype not in (LITERAL, PREFIXED):
        raise AdminError(f"A '--resource-pattern-type' value of '{PATTERN_TYPES[ptype]}' is not valid when adding "
                         f"acls.")
    todo = filters_to_entries(args)
    if any(not es for es in todo.values()):
        raise AdminError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    for (rtype, name, ptype), es in todo.items():
        print(f"Adding ACLs for resource `{pattern_str((rtype, name, ptype))}`: {_entries_block(es)}", file=out)
        creations = [{"resource_type": rtype, "resource_name": name, "resource_pattern_type": ptype,
                      "principal": p, "host": h, "operation": op, "permission_type": perm}
                     for p, h, op, perm in sorted(es)]
        resp = await client.send(30, 3, {"creations": creations})
        for r in resp.results:
            _check(r.error_code, r.error_message)


def _confirm(args, question: str, out) -> bool:
    if args.force:
        return True
    print(question, file=out)
    out.flush()
    return sys.stdin.readline().strip().lower() == "y"


def _filter_body(f: Filter, e: tuple) -> dict:
    (rtype, name, ptype), (principal, host, op, perm) = f, e
    return {"resource_type_filter": rtype, "resource_name_filter": name, "pattern_type_filter": ptype,
            "principal_filter": principal, "host_filter": host, "operation": op, "permission_type": perm}


ANY_ENTRY = (None, None, ANY, ANY)


async def remove(client: AdminClient, args, out) -> None:
    for f, es in filters_to_entries(args).items():
        if not es:
            question = f"Are you sure you want to delete all ACLs for resource filter `{pattern_str(f)}`? (y/n)"
        else:
            question = (f"Are you sure you want to remove ACLs: {_entries_block(es)} from resource filter "
                        f"`{pattern_str(f)}`? (y/n)")
        if not _confirm(args, question, out):
            continue
        filters = [_filter_body(f, e) for e in sorted(es)] if es else [_filter_body(f, ANY_ENTRY)]
        resp = await client.send(31, 3, {"filters": filters})
        for r in resp.filter_results:
            _check(r.error_code, r.error_message)


async def describe(client: AdminClient, filters: list[Filter]) -> dict[Filter, set[Entry]]:
    """The ACLs each filter matches (every ACL without filters), by resource pattern."""
    found: dict[Filter, set[Entry]] = {}
    for f in filters or [(ANY, None, ANY)]:
        resp = await client.send(29, 3, _filter_body(f, ANY_ENTRY))
        _check(resp.error_code, resp.error_message)
        for r in resp.resources:
            found.setdefault((int(r.resource_type), r.resource_name, int(r.pattern_type)), set()).update(
                (a.principal, a.host, int(a.operation), int(a.permission_type)) for a in r.acls)
    return found


def _print_acls(found: dict[Filter, set[Entry]], out) -> None:
    for f in sorted(found):
        print(f"Current ACLs for resource `{pattern_str(f)}`: {_entries_block(found[f])}", file=out)


async def list_acls(client: AdminClient, args, out) -> None:
    found = await describe(client, resource_filters(args, die_if_none=False))
    if not args.principal:
        _print_acls(found, out)
        return
    for principal in dict.fromkeys(parse_principal(p) for p in args.principal):
        print(f"ACLs for principal `{principal}`", file=out)
        _print_acls({f: {e for e in es if e[0] == principal} for f, es in found.items()
                     if any(e[0] == principal for e in es)}, out)


async def run(args: argparse.Namespace, out) -> None:
    check_args(args)
    client = AdminClient.for_args(args)
    try:
        await (add if args.add else remove if args.remove else list_acls)(client, args, out)
    finally:
        client.close()
