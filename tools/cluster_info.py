"""`strata cluster`: the cluster id, the active controller, each registered broker with its rack and whether it is
fenced (DescribeCluster v2 with include_fenced_brokers, KIP-1073), and the metadata log position (DescribeQuorum)."""
from __future__ import annotations

import argparse

from tools.admin_client import AdminClient, AdminError, error_name


def add_parser(sub) -> None:
    p = sub.add_parser("cluster", help="brokers, racks, the controller and fenced brokers")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    p.set_defaults(run=run)


async def run(args: argparse.Namespace, out) -> None:
    client = AdminClient.for_args(args)
    try:
        dc = await client.send(60, 2, {"include_cluster_authorized_operations": False, "endpoint_type": 1,
                                       "include_fenced_brokers": True})
        if dc.error_code:
            raise AdminError(dc.error_message or error_name(dc.error_code))
        quorum = await client.send(55, 2, {"topics": [{"topic_name": "__cluster_metadata",
                                                       "partitions": [{"partition_index": 0}]}]})
    finally:
        client.close()
    print(f"Cluster id: {dc.cluster_id}", file=out)
    print(f"Controller: {dc.controller_id}", file=out)
    for b in sorted(dc.brokers, key=lambda b: b.broker_id):
        print(f"Broker {b.broker_id}\t{b.host}:{b.port}\track: {b.rack or '-'}\t"
              f"{'fenced' if b.is_fenced else 'unfenced'}", file=out)
    _print_metadata_log(quorum, out)


def _print_metadata_log(quorum, out) -> None:
    """The metadata log's end at the controller and how far each broker has applied it (kafka-metadata-quorum.sh
    describe --replication): its log end offset and lag, from its last heartbeat."""
    if quorum.error_code or not quorum.topics:
        print(f"Metadata log: unknown ({error_name(quorum.error_code)})", file=out)
        return
    p = quorum.topics[0].partitions[0]
    print(f"Metadata log: high watermark {p.high_watermark}, controller epoch {p.leader_epoch}", file=out)
    for r in sorted([*p.current_voters, *p.observers], key=lambda r: r.replica_id):
        role = "controller" if r.replica_id == p.leader_id else "observer"
        lag = "-" if r.log_end_offset < 0 else str(max(0, p.high_watermark - r.log_end_offset))
        end = "-" if r.log_end_offset < 0 else str(r.log_end_offset)
        print(f"  node {r.replica_id}\t{role}\tlog end offset {end}\tlag {lag}", file=out)
