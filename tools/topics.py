"""`strata topics`: Kafka's kafka-topics.sh verbs (--create, --list, --describe, --alter --partitions, --delete)."""
from __future__ import annotations

import argparse

from tools.admin_client import AdminClient, AdminError, error_name

DYNAMIC_TOPIC_CONFIG = 1


def add_parser(sub) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter and delete topics (like kafka-topics.sh)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    verb = p.add_mutually_exclusive_group(required=True)
    for v in ("create", "list", "describe", "alter", "delete"):
        verb.add_argument(f"--{v}", action="store_true")
    p.add_argument("--topic")
    p.add_argument("--partitions", type=int)
    p.add_argument("--replication-factor", type=int)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--if-not-exists", action="store_true")
    p.add_argument("--if-exists", action="store_true")
    p.add_argument("--exclude-internal", action="store_true")
    p.add_argument("--under-replicated-partitions", action="store_true")
    p.set_defaults(run=run)


def _configs(items: list[str]) -> list[dict]:
    out = []
    for item in items:
        if "=" not in item:
            raise AdminError(f"bad --config {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        out.append({"name": k.strip(), "value": v.strip()})
    return out


async def run(args: argparse.Namespace, out) -> None:
    if (args.create or args.alter or args.delete) and not args.topic:
        raise AdminError('Missing required argument "[topic]"')
    client = AdminClient.for_args(args)
    try:
        if args.create:
            await _create(client, args, out)
        elif args.list:
            md = await client.metadata()
            for t in sorted(md.topics, key=lambda t: t.name):
                if not (args.exclude_internal and t.is_internal) and (not args.topic or t.name == args.topic):
                    print(t.name, file=out)
        elif args.describe:
            await _describe(client, args, out)
        elif args.alter:
            if args.partitions is None:
                raise AdminError("--alter needs --partitions (topic configs are changed with `strata configs`)")
            resp = await client.send(37, 3, {"topics": [{"name": args.topic, "count": args.partitions,
                                                         "assignments": None}], "timeout": 30000,
                                             "validate_only": False})
            r = resp.results[0]
            if r.error_code:
                raise AdminError(r.error_message or error_name(r.error_code))
        elif args.delete:
            resp = await client.send(20, 6, {"topics": [{"name": args.topic}], "timeout": 30000})
            r = resp.responses[0]
            if r.error_code and not (args.if_exists and error_name(r.error_code) == "UNKNOWN_TOPIC_OR_PARTITION"):
                raise AdminError(r.error_message or f"Topic '{args.topic}' does not exist as expected"
                                 if error_name(r.error_code) == "UNKNOWN_TOPIC_OR_PARTITION"
                                 else error_name(r.error_code))
    finally:
        client.close()


async def _create(client: AdminClient, args, out) -> None:
    resp = await client.send(19, 7, {"topics": [{
        "name": args.topic, "num_partitions": -1 if args.partitions is None else args.partitions,
        "replication_factor": -1 if args.replication_factor is None else args.replication_factor,
        "assignments": [], "configs": _configs(args.config)}], "timeout": 30000, "validate_only": False})
    r = resp.topics[0]
    if r.error_code:
        if args.if_not_exists and error_name(r.error_code) == "TOPIC_ALREADY_EXISTS":
            return
        raise AdminError(r.error_message or error_name(r.error_code))
    print(f"Created topic {args.topic}.", file=out)


async def _describe(client: AdminClient, args, out) -> None:
    md = await client.metadata([args.topic] if args.topic else None)
    topics = sorted((t for t in md.topics if not (args.exclude_internal and t.is_internal)), key=lambda t: t.name)
    for t in topics:
        if t.error_code:
            raise AdminError(f"Topic '{t.name}' does not exist as expected" if
                             error_name(t.error_code) == "UNKNOWN_TOPIC_OR_PARTITION" else error_name(t.error_code))
    if not topics:
        return
    resp = await client.send(32, 4, {"resources": [{"resource_type": 2, "resource_name": t.name,
                                                     "configuration_keys": None} for t in topics],
                                     "include_synonyms": False, "include_documentation": False})
    configs = {r.resource_name: ",".join(f"{c.name}={c.value}" for c in r.configs
                                         if int(c.config_source) == DYNAMIC_TOPIC_CONFIG)
               for r in resp.results}
    for t in topics:
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        if args.under_replicated_partitions:
            parts = [p for p in parts if len(p.isr_nodes) < len(p.replica_nodes)]
            if not parts:
                continue
        else:
            rf = len(parts[0].replica_nodes) if parts else 0
            print(f"Topic: {t.name}\tTopicId: {_topic_id(t.topic_id)}\tPartitionCount: {len(t.partitions)}\t"
                  f"ReplicationFactor: {rf}\tConfigs: {configs.get(t.name, '')}", file=out)
        for p in parts:
            print(f"\tTopic: {t.name}\tPartition: {p.partition_index}\tLeader: "
                  f"{p.leader_id if p.leader_id >= 0 else 'none'}\tReplicas: {','.join(map(str, p.replica_nodes))}\t"
                  f"Isr: {','.join(map(str, p.isr_nodes))}", file=out)


def _topic_id(topic_id) -> str:
    import base64
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
