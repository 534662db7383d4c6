"""`strata cluster`: the cluster id, the active controller, and each registered broker with its rack and whether it
is fenced (DescribeCluster v2 with include_fenced_brokers, KIP-1073)."""
from __future__ import annotations

import argparse

from broker.tools.admin_client import AdminClient, AdminError, error_name


def add_parser(sub) -> None:
    p = sub.add_parser("cluster", help="brokers, racks, the controller and fenced brokers")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    p.set_defaults(run=run)


async def run(args: argparse.Namespace, out) -> None:
    client = AdminClient(args.bootstrap_server)
    try:
        dc = await client.send(60, 2, {"include_cluster_authorized_operations": False, "endpoint_type": 1,
                                       "include_fenced_brokers": True})
        if dc.error_code:
            raise AdminError(dc.error_message or error_name(dc.error_code))
    finally:
        client.close()
    print(f"Cluster id: {dc.cluster_id}", file=out)
    print(f"Controller: {dc.controller_id}", file=out)
    for b in sorted(dc.brokers, key=lambda b: b.broker_id):
        print(f"Broker {b.broker_id}\t{b.host}:{b.port}\track: {b.rack or '-'}\t"
              f"{'fenced' if b.is_fenced else 'unfenced'}", file=out)
