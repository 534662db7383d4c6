"""`strata transactions`: kafka-transactions.sh's verbs, over the Kafka protocol (so it works against Apache Kafka too).

    list                      ListTransactions on every broker: TransactionalId, Coordinator, ProducerId, state
    describe                  DescribeTransactions at the id's coordinator
    describe-producers        DescribeProducers at a partition's leader (or --broker-id)
    abort                     an ABORT marker for a partition's open transaction (WriteTxnMarkers to its leader),
                              found by --start-offset or given by --producer-id/--producer-epoch/--coordinator-epoch
    find-hanging              open transactions older than --max-transaction-timeout (minutes) whose producer's
                              coordinator does not list the partition: what `abort` then ends

Tables are printed as Kafka's tool prints them (ToolsUtils.prettyPrintTable: padded columns, each followed by a tab).
"""
from __future__ import annotations

import argparse
import time

from tools.admin_client import AdminClient, AdminError, error_name

_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
           "PrepareEpochFence")


def add_parser(sub) -> None:
    p = sub.add_parser("transactions", help="list, describe, find and abort transactions (like kafka-transactions.sh)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    verbs = p.add_subparsers(dest="verb", required=True)
    verbs.add_parser("list", help="list transactions").add_argument("--duration-filter", type=int, default=-1,
                                                                   metavar="MS")
    d = verbs.add_parser("describe", help="describe the state of an active transactional-id")
    d.add_argument("--transactional-id", required=True)
    dp = verbs.add_parser("describe-producers", help="describe the states of active producers for a partition")
    dp.add_argument("--broker-id", type=int)
    dp.add_argument("--topic", required=True)
    dp.add_argument("--partition", type=int, required=True)
    a = verbs.add_parser("abort", help="abort a hanging transaction")
    a.add_argument("--topic", required=True)
    a.add_argument("--partition", type=int, required=True)
    a.add_argument("--start-offset", type=int)
    a.add_argument("--producer-id", type=int)
    a.add_argument("--producer-epoch", type=int)
    a.add_argument("--coordinator-epoch", type=int)
    f = verbs.add_parser("find-hanging", help="find hanging transactions")
    f.add_argument("--broker-id", type=int)
    f.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES")
    f.add_argument("--topic")
    f.add_argument("--partition", type=int)
    p.set_defaults(run=run, parser=p, command="transactions")


def table(headers: list[str], rows: list[list[str]], out) -> None:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for row in [headers] + rows:
        out.write("".join(v.ljust(w) + "\t" for v, w in zip(row, widths)) + "\n")


async def run(args: argparse.Namespace, out) -> None:
    admin = AdminClient.for_args(args)
    try:
        await {"list": _list, "describe": _describe, "describe-producers": _describe_producers, "abort": _abort,
               "find-hanging": _find_hanging}[args.verb](admin, args, out)
    finally:
        admin.close()


async def _brokers(admin: AdminClient):
    return sorted((await admin.metadata([])).brokers, key=lambda b: b.node_id)


async def _list(admin: AdminClient, args, out) -> None:
    rows = []
    for b in await _brokers(admin):
        r = await admin.send_to(b.host, b.port, 66, 1, {"state_filters": [], "producer_id_filters": [],
                                                        "duration_filter": args.duration_filter})
        if r.error_code:
            raise AdminError(f"Failed to list transactions on broker {b.node_id}: {error_name(r.error_code)}")
        rows += [[t.transactional_id, str(b.node_id), str(t.producer_id), t.transaction_state]
                 for t in r.transaction_states]
    table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows, out)


async def _coordinator(admin: AdminClient, tid: str):
    for _ in range(50):
        r = await admin.send(10, 4, {"key_type": 1, "coordinator_keys": [tid]})
        c = r.coordinators[0]
        if c.error_code == 0:
            return c
        time.sleep(0.1)
    raise AdminError(f"no coordinator for transactional-id `{tid}`: {error_name(c.error_code)}")


async def _describe_one(admin: AdminClient, tid: str):
    c = await _coordinator(admin, tid)
    r = await admin.send_to(c.host, c.port, 65, 0, {"transactional_ids": [tid]})
    return c.node_id, r.transaction_states[0]


async def _describe(admin: AdminClient, args, out) -> None:
    node, s = await _describe_one(admin, args.transactional_id)
    if s.error_code:
        raise AdminError(f"Failed to describe transaction state of transactional-id `{args.transactional_id}`: "
                         f"{error_name(s.error_code)}")
    start = int(s.transaction_start_time.timestamp() * 1000)
    started = start > 0 and s.transaction_state not in ("Empty", "CompleteCommit", "CompleteAbort")
    now = int(time.time() * 1000)
    table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
           "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
          [[str(node), args.transactional_id, str(s.producer_id), str(s.producer_epoch), s.transaction_state,
            str(int(s.transaction_timeout.total_seconds() * 1000)), str(start) if started else "None",
            str(now - start) if started else "None",
            ",".join(f"{t.topic}-{p}" for t in s.topics for p in t.partitions)]], out)


async def _leader(admin: AdminClient, topic: str, partition: int):
    md = await admin.metadata([topic])
    t = md.topics[0]
    if t.error_code or not any(p.partition_index == partition for p in t.partitions):
        raise AdminError(f"Topic partition {topic}-{partition} does not exist")
    lead = next(p.leader_id for p in t.partitions if p.partition_index == partition)
    b = next((b for b in md.brokers if b.node_id == lead), None)
    if b is None:
        raise AdminError(f"{topic}-{partition} has no leader")
    return b


async def _producers(admin: AdminClient, topic: str, partition: int, broker_id: int | None = None):
    if broker_id is None:
        b = await _leader(admin, topic, partition)
        r = await admin.send_to(b.host, b.port, 61, 0, {"topics": [{"name": topic,
                                                                    "partition_indexes": [partition]}]})
    else:
        r = await admin.send_to_node(broker_id, 61, 0, {"topics": [{"name": topic, "partition_indexes": [partition]}]})
    p = r.topics[0].partitions[0]
    if p.error_code:
        where = f"broker {broker_id}" if broker_id is not None else "leader"
        raise AdminError(f"Failed to describe producers for partition {topic}-{partition} on {where}: "
                         f"{error_name(p.error_code)}")
    return p.active_producers


async def _describe_producers(admin: AdminClient, args, out) -> None:
    rows = [[str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch), str(s.last_sequence),
             str(s.last_timestamp), str(s.current_txn_start_offset) if s.current_txn_start_offset >= 0 else "None"]
            for s in await _producers(admin, args.topic, args.partition, args.broker_id)]
    table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
           "CurrentTransactionStartOffset"], rows, out)


async def _abort(admin: AdminClient, args, out) -> None:
    if args.start_offset is not None:
        found = [s for s in await _producers(admin, args.topic, args.partition)
                 if s.current_txn_start_offset == args.start_offset]
        if not found:
            raise AdminError(f"Could not find any open transactions starting at offset {args.start_offset} on "
                             f"partition {args.topic}-{args.partition}")
        pid, epoch, coordinator_epoch = found[0].producer_id, found[0].producer_epoch, found[0].coordinator_epoch
    elif None not in (args.producer_id, args.producer_epoch, args.coordinator_epoch):
        pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    else:
        raise AdminError("abort needs --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch")
    b = await _leader(admin, args.topic, args.partition)
    r = await admin.send_to(b.host, b.port, 27, 1, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
        "coordinator_epoch": max(coordinator_epoch, 0),
        "topics": [{"name": args.topic, "partition_indexes": [args.partition]}]}]})
    err = r.markers[0].topics[0].partitions[0].error_code
    if err:
        raise AdminError(f"Failed to abort the transaction of producer {pid} on {args.topic}-{args.partition}: "
                         f"{error_name(err)}")


async def _find_hanging(admin: AdminClient, args, out) -> None:
    if args.topic is None and args.broker_id is None:
        raise AdminError("The `find-hanging` command requires either --topic or --broker-id to limit the scope of "
                         "the search")
    if args.partition is not None and args.topic is None:
        raise AdminError("The --partition argument requires --topic to be provided")
    md = await admin.metadata(None if args.topic is None else [args.topic])
    tps = [(t.name, p.partition_index) for t in md.topics for p in t.partitions
           if (args.partition is None or p.partition_index == args.partition)
           and (args.broker_id is None or args.broker_id in p.replica_nodes)]
    now = int(time.time() * 1000)
    max_age = args.max_transaction_timeout * 60_000
    hanging = []
    for topic, partition in sorted(tps):
        for s in await _producers(admin, topic, partition, args.broker_id):
            if s.current_txn_start_offset < 0 or now - s.last_timestamp < max_age:
                continue
            hanging.append((topic, partition, s))
    if hanging:                      # those whose coordinator lists the partition are not hanging (Kafka's filter)
        ids: dict[int, str] = {}
        for b in await _brokers(admin):
            r = await admin.send_to(b.host, b.port, 66, 1, {"state_filters": [], "duration_filter": -1,
                                                            "producer_id_filters": sorted({s.producer_id
                                                                                           for *_, s in hanging})})
            ids.update({t.producer_id: t.transactional_id for t in r.transaction_states})
        listed = {}
        for tid in set(ids.values()):
            _, d = await _describe_one(admin, tid)
            listed[tid] = set() if d.error_code else {(t.topic, p) for t in d.topics for p in t.partitions}
        hanging = [(t, p, s) for t, p, s in hanging if (t, p) not in listed.get(ids.get(s.producer_id, ""), set())]
    rows = []
    for topic, partition, s in hanging:
        rows.append([topic, str(partition), str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch),
                     str(s.current_txn_start_offset), str(s.last_timestamp), str((now - s.last_timestamp) // 60_000)])
    table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
           "Duration(min)"], rows, out)
