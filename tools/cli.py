"""The `strata` command: the server's commands (broker/cli.py) and the admin tools with Kafka's verbs:
`strata topics` (kafka-topics.sh), `strata groups` (kafka-consumer-groups.sh), `strata configs` (kafka-configs.sh),
`strata reassign` (kafka-reassign-partitions.sh), `strata perf` (kafka-producer/consumer-perf-test.sh),
`strata transactions` (kafka-transactions.sh),
`strata cluster`. The tools speak the Kafka protocol to `--bootstrap-server`, as Kafka's own do."""
from __future__ import annotations

import asyncio
import sys

from broker import cli as server_cli
from tools import acls, cluster_info, configs, groups, perf, reassign, topics, transactions
from tools.admin_client import AdminError


def parser():
    p, sub = server_cli.parser()
    for tool in (topics, groups, configs, reassign, perf, cluster_info, transactions, acls):   # acls: kafka-acls.sh
        tool.add_parser(sub)
    _add_command_config(sub)
    return p


def _add_command_config(sub) -> None:
    """Every tool that talks to brokers takes Kafka's `--command-config` (client properties, security included)."""
    import argparse
    for tool in sub.choices.values():
        parsers = [tool] + [a for act in tool._actions if isinstance(act, argparse._SubParsersAction)
                            for a in act.choices.values()]
        for p in parsers:
            options = {o for act in p._actions for o in act.option_strings}
            if "--bootstrap-server" in options and "--command-config" not in options:
                p.add_argument("--command-config", metavar="CONFIG-FILE",
                               help="client properties (security.protocol, ssl.*, sasl.*) as Kafka's tools take")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not hasattr(args, "run"):
        return server_cli.run(args)
    try:
        asyncio.run(args.run(args, sys.stdout))
    except AdminError as e:
        print(f"Error while executing {args.command} command : {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
