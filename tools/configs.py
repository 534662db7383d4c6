"""`strata configs`: Kafka's kafka-configs.sh verbs (--describe, --alter --add-config/--delete-config) for topics,
brokers (one broker, or --entity-default for the cluster-wide default), groups (KIP-848 group configs) and users'
SCRAM credentials (KIP-554, salted on the client as Kafka's admin client does) and client quotas of users, clients
and ips (tools/quota_configs.py), with its options, shortcuts (--topic,
--broker, --broker-defaults, --group, --user) and output."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from protocol.sasl.scram import salted_password, secure_random_string
from tools import quota_configs
from tools.admin_client import AdminClient, AdminError, error_name

TYPES = {"topics": 2, "brokers": 4, "groups": 32}
KAFKA_TYPES = ("users", "clients", "brokers", "broker-loggers", "topics", "ips", "client-metrics", "groups")
SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
           7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
# the source `--describe` shows without --all, by entity (Kafka's ConfigCommand)
DYNAMIC = {"topics": 1, "brokers": 2, "groups": 8}
SET, DELETE = 0, 1


def add_parser(sub) -> None:
    p = sub.add_parser("configs", help="describe and alter topic, broker and group configs (like kafka-configs.sh)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    verb = p.add_mutually_exclusive_group()
    verb.add_argument("--describe", action="store_true")
    verb.add_argument("--alter", action="store_true")
    p.add_argument("--entity-type", choices=None, metavar="topics|brokers|groups|users|clients|ips")
    p.add_argument("--entity-name")
    p.add_argument("--entity-default", action="store_true", help="the cluster-wide default (brokers), the default user, client-id or ip (quotas)")
    p.add_argument("--topic")
    p.add_argument("--broker")
    p.add_argument("--broker-defaults", action="store_true")
    p.add_argument("--group")
    p.add_argument("--user", help="a user's SCRAM credentials (as --entity-type users --entity-name)")
    p.add_argument("--all", action="store_true", help="with --describe: every config, not only dynamic ones")
    p.add_argument("--add-config", metavar="K1=V1,K2=[V2,V3]")
    p.add_argument("--add-config-file", metavar="FILE")
    p.add_argument("--delete-config", metavar="K1,K2")
    p.set_defaults(run=run)


def _entity(args) -> tuple[str, str | None]:
    """(entity type, name or "" for the default or None for all), from --entity-* or the shortcuts."""
    shortcuts = [(t, n) for t, n in (("topics", args.topic), ("brokers", args.broker), ("groups", args.group),
                                     ("users", args.user))
                 if n is not None] + ([("brokers", "")] if args.broker_defaults else [])
    if args.entity_type is not None or args.entity_name is not None or args.entity_default:
        if shortcuts:
            raise AdminError("--entity-type/--entity-name cannot be combined with --topic, --broker, "
                             "--broker-defaults or --group")
        if args.entity_type is None:
            raise AdminError("an entity type must be specified with --entity-name or --entity-default")
        if args.entity_type not in KAFKA_TYPES:
            raise AdminError(f"Invalid entity type {args.entity_type}, the entity type must be one of "
                             f"{', '.join(KAFKA_TYPES)}")
        if args.entity_type not in TYPES and args.entity_type not in quota_configs.ENTITY_TYPES:
            raise AdminError(f"entity type {args.entity_type} is not supported by Strata (topics, brokers, groups, "
                             f"users, clients, ips)")
        if args.entity_name is not None and args.entity_default:
            raise AdminError("--entity-name and --entity-default cannot be used together")
        if args.entity_default and args.entity_type not in ("brokers", *quota_configs.ENTITY_TYPES):
            raise AdminError(f"--entity-default is not supported for {args.entity_type}")
        return args.entity_type, "" if args.entity_default else args.entity_name
    if len(shortcuts) != 1:
        raise AdminError("Exactly one entity must be specified: --entity-type with --entity-name or "
                         "--entity-default, or one of --topic, --broker, --broker-defaults, --group")
    return shortcuts[0]


def _parse_add(text: str) -> dict[str, str]:
    """Kafka's --add-config syntax: k1=v1,k2=[v2,v3] (brackets keep a list value's commas)."""
    out, item, depth = {}, "", 0
    for ch in text + ",":
        if ch == "," and depth == 0:
            if item.strip():
                if "=" not in item:
                    raise AdminError(f"Invalid entity config: all configs to be added must be in the format "
                                     f"\"key=val\"; got {item.strip()!r}")
                k, v = item.split("=", 1)
                v = v.strip()
                out[k.strip()] = v[1:-1] if v.startswith("[") and v.endswith("]") else v
            item = ""
            continue
        depth += (ch == "[") - (ch == "]")
        item += ch
    return out


async def run(args: argparse.Namespace, out) -> None:
    if not (args.describe or args.alter):
        raise AdminError("Command must include exactly one action: --describe, --alter")
    etype, name = _entity(args)
    if args.describe and (args.add_config or args.add_config_file or args.delete_config):
        raise AdminError("--add-config, --add-config-file and --delete-config need --alter")
    client = AdminClient.for_args(args)
    try:
        if args.describe:
            await _describe(client, etype, name, args.all, out)
        else:
            await _alter(client, etype, name, args, out)
    finally:
        client.close()


def _title(etype: str, name: str, all_configs: bool) -> str:
    singular = etype[:-1]
    if name == "":
        return "Default configs for brokers in the cluster are:"
    return f"{'All' if all_configs else 'Dynamic'} configs for {singular} {name} are:"


async def _describe_one(client: AdminClient, etype: str, name: str) -> list:
    body = {"resources": [{"resource_type": TYPES[etype], "resource_name": name, "configuration_keys": None}],
            "include_synonyms": True, "include_documentation": False}
    if etype == "brokers" and name != "":
        if not name.isdigit():
            raise AdminError(f"The entity name for brokers must be a valid integer broker id, but it is: {name}")
        resp = await client.send_to_node(int(name), 32, 4, body)
    else:
        resp = await client.send(32, 4, body)
    r = resp.results[0]
    if r.error_code:
        raise AdminError(r.error_message or error_name(r.error_code))
    return r.configs


async def _describe(client: AdminClient, etype: str, name: str | None, all_configs: bool, out) -> None:
    if etype in quota_configs.ENTITY_TYPES:
        # Kafka's describeClientQuotaAndUserScramCredentialConfigs: the quotas, then a user's SCRAM credentials
        await quota_configs.describe_and_print(client, etype, name, out)
        if etype == "users" and name != "":
            await _describe_users(client, name, out)
        return
    if name is None:
        md = await client.metadata(None if etype == "topics" else [])
        if etype == "topics":
            names = sorted(t.name for t in md.topics)
        elif etype == "brokers":
            names = [str(b.node_id) for b in sorted(md.brokers, key=lambda b: b.node_id)] + [""]
        else:
            raise AdminError("an entity name must be specified with --describe of groups")
    else:
        names = [name]
    for n in names:
        configs = await _describe_one(client, etype, n)
        print(_title(etype, n, all_configs), file=out)
        wanted = None if all_configs or n == "" else DYNAMIC[etype]
        for c in sorted(configs, key=lambda c: c.name):
            if wanted is not None and int(c.config_source) != wanted:
                continue
            synonyms = ", ".join(f"{SOURCES.get(int(s.source), s.source)}:{s.name}={s.value}" for s in c.synonyms)
            value = "null" if c.is_sensitive else c.value
            print(f"  {c.name}={value} sensitive={str(c.is_sensitive).lower()} synonyms={{{synonyms}}}", file=out)


async def _alter(client: AdminClient, etype: str, name: str | None, args, out) -> None:
    if name is None:
        raise AdminError(f"an entity name must be specified with --alter of {etype}")
    add = _parse_add(args.add_config or "")
    if args.add_config_file:
        from broker.config import parse_properties
        try:
            add.update(parse_properties(Path(args.add_config_file).read_text()))
        except (OSError, ValueError) as e:
            raise AdminError(f"cannot read --add-config-file: {e}") from None
    delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if not add and not delete:
        raise AdminError("At least one of --add-config, --add-config-file, or --delete-config must be specified "
                         "with --alter")
    if etype in quota_configs.ENTITY_TYPES:
        scram = [k for k in [*add, *delete] if k in SCRAM_MECHANISMS]
        if etype != "users" or not scram:
            return await quota_configs.alter(client, etype, name, add, delete, out)
        if len(scram) < len(add) + len(delete):
            raise AdminError("Only quota configs can be added for 'users' together with SCRAM credential configs "
                             "in separate commands")
        if name == "":
            raise AdminError("The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                             "Credentials using --bootstrap-server.")
        return await _alter_users(client, name, add, delete, out)
    if delete:
        current = {c.name for c in await _describe_one(client, etype, name)
                   if int(c.config_source) in (DYNAMIC[etype], 3 if name == "" else -1)}
        missing = [k for k in delete if k not in current]
        if missing:
            raise AdminError(f"Invalid config(s): {','.join(missing)}")
    ops = [{"name": k, "config_operation": SET, "value": v} for k, v in add.items()]
    ops += [{"name": k, "config_operation": DELETE, "value": None} for k in delete]
    resp = await client.send(44, 1, {"resources": [{"resource_type": TYPES[etype], "resource_name": name,
                                                    "configs": ops}], "validate_only": False})
    r = resp.responses[0]
    if r.error_code:
        raise AdminError(r.error_message or error_name(r.error_code))
    if name == "":
        print("Completed updating default config for brokers in the cluster.", file=out)
    else:
        print(f"Completed updating config for {etype[:-1]} {name}.", file=out)


# ---- users: SCRAM credentials (Kafka's ConfigCommand.alterUserScramCredentialConfigs and describe) ----------------
SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}    # Kafka's ScramMechanism type codes
DEFAULT_SCRAM_ITERATIONS, MIN_SCRAM_ITERATIONS = 4096, 4096
RESOURCE_NOT_FOUND = 91


def scram_upsertion(user: str, mechanism: str, text: str) -> dict:
    """One AlterUserScramCredentials upsertion from `iterations=N,password=P` (iterations optional, 4096 by
    default): the password is salted here (RFC 5802's Hi(), PBKDF2) and never sent, as Kafka's admin client does."""
    m = re.fullmatch(r"(?:iterations=(-?[0-9]*),)?password=(.*)", text, re.DOTALL)
    if m is None or m[1] == "":
        raise AdminError(f"Invalid credential property {mechanism}={text}")
    iterations = int(m[1]) if m[1] not in (None, "-1") else DEFAULT_SCRAM_ITERATIONS
    if iterations < MIN_SCRAM_ITERATIONS:
        raise AdminError(f"Iterations {iterations} is less than the minimum {MIN_SCRAM_ITERATIONS} required for "
                         f"{mechanism}")
    if not m[2]:
        raise AdminError("Password must not be empty")
    salt = secure_random_string().encode()        # Kafka's ScramFormatter.secureRandomBytes
    return {"name": user, "mechanism": SCRAM_MECHANISMS[mechanism], "iterations": iterations, "salt": salt,
            "salted_password": salted_password(mechanism, m[2], salt, iterations)}


async def _alter_users(client: AdminClient, name: str, add: dict[str, str], delete: list[str], out) -> None:
    for what, names in (("added", list(add)), ("deleted", delete)):
        unexpected = [k for k in names if k not in SCRAM_MECHANISMS]
        if unexpected:
            raise AdminError(f"Only SCRAM credential configs can be {what} for 'users' using --bootstrap-server. "
                             f"Unexpected config names: {', '.join(unexpected)}")
    body = {"deletions": [{"name": name, "mechanism": SCRAM_MECHANISMS[k]} for k in delete],
            "upsertions": [scram_upsertion(name, k, v) for k, v in add.items()]}
    resp = await client.send(51, 0, body)
    for r in resp.results:
        if r.error_code:
            raise AdminError(r.error_message or error_name(r.error_code))
    print(f"Completed updating config for user {name}.", file=out)


async def _describe_users(client: AdminClient, name: str | None, out) -> None:
    """Each user's mechanisms and iterations; users without credentials are left out, as kafka-configs.sh does."""
    resp = await client.send(50, 0, {"users": [] if name is None else [{"name": name}]})
    if resp.error_code:
        raise AdminError(resp.error_message or error_name(resp.error_code))
    names = {code: n for n, code in SCRAM_MECHANISMS.items()}
    for r in resp.results:
        if r.error_code == RESOURCE_NOT_FOUND:
            continue
        if r.error_code:
            print(f"Error retrieving SCRAM credential configs for user-principal '{r.user}': "
                  f"{error_name(r.error_code)}: {r.error_message}", file=out)
            continue
        described = ", ".join(f"{names.get(int(c.mechanism), c.mechanism)}=iterations={c.iterations}"
                              for c in r.credential_infos)
        print(f"SCRAM credential configs for user-principal '{r.user}' are {described}", file=out)
