"""`strata broker --config FILE [--override key=value ...]`"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from broker.config import BrokerConfig


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="strata", description="Strata: a Kafka-compatible log broker")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("broker", help="run one broker")
    b.add_argument("--config", help="server.properties-style file")
    b.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config value (repeatable)")
    b.add_argument("--log-level", default="INFO")
    return p


async def _run_broker(config: BrokerConfig) -> None:
    from broker.broker_server import Broker
    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger("strata").info("shutting down")
    await broker.stop()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = BrokerConfig.load(args.config, args.override)
    except (OSError, ValueError) as e:
        print(f"strata: bad configuration: {e}", file=sys.stderr)
        return 2
    try:
        import uvloop
        uvloop.run(_run_broker(config))
    except ImportError:
        asyncio.run(_run_broker(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
