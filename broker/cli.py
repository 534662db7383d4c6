"""The server's commands: `strata broker --config FILE [--env-prefix STRATA_] [--override key=value ...]
[--print-config]` and `strata check --bootstrap HOST:PORT` (an ApiVersions round trip: the container image's health
check). `python -m broker.cli broker ...` runs a broker without the admin tools; the `strata` command
(tools/cli.py) adds them."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import ssl
import signal
import sys

from broker.config import BrokerConfig, env_properties


def parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """The `broker` and `check` commands; the caller may add more subcommands to the second value."""
    p = argparse.ArgumentParser(prog="strata", description="Strata: a Kafka-compatible log broker")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("broker", help="run one broker")
    b.add_argument("--config", help="server.properties-style file")
    b.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config value (repeatable)")
    b.add_argument("--env-prefix", metavar="PREFIX", help="also read settings from environment variables with this "
                   "prefix, mapped as Kafka's image maps KAFKA_* (STRATA_NODE_ID -> node.id); the file < these < "
                   "--override")
    b.add_argument("--print-config", action="store_true", help="print the settings given (not the defaults) and exit")
    b.add_argument("--log-level", default="INFO")
    c = sub.add_parser("check", help="exit 0 if a broker answers ApiVersions")
    c.add_argument("--bootstrap", default="127.0.0.1:9092", metavar="HOST:PORT")
    c.add_argument("--timeout", type=float, default=5.0)
    c.add_argument("--command-config", metavar="CONFIG-FILE",
                   help="client properties (security.protocol, ssl.*, sasl.*) to check an SSL or SASL listener")
    return p, sub


async def _check(bootstrap: str, timeout: float, command_config: str | None = None) -> int:
    from protocol.client import BrokerConnection
    from protocol.client_security import ClientSecurity, load_properties
    host, _, port = bootstrap.rpartition(":")
    try:
        security = ClientSecurity.from_properties(load_properties(command_config))
    except (OSError, ValueError) as e:
        print(f"strata check: --command-config: {e}", file=sys.stderr)
        return 2
    conn = BrokerConnection(host or "127.0.0.1", int(port), client_id="strata-check", security=security)
    try:
        resp = await conn.send(18, 3, {"client_software_name": "strata-check", "client_software_version": "1"},
                               timeout=timeout)
        return 0 if resp.error_code == 0 else 1
    except Exception as e:
        print(f"strata check: {bootstrap}: {e}", file=sys.stderr)
        return 1
    finally:
        conn.close()


async def _run_broker(config: BrokerConfig) -> int:
    """Run until SIGINT/SIGTERM (exit 0) or until the log dir fails (exit 1: Kafka halts the broker then, and a
    supervisor restarts it once the disk is fixed)."""
    from broker.broker_server import Broker
    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(broker.log_dir_failed.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for w in waits:
        w.cancel()
    failed = broker.log_dir_failed.is_set()
    logging.getLogger("strata").log(logging.ERROR if failed else logging.INFO, "shutting down%s",
                                    ": the log directory failed" if failed else "")
    await broker.stop()
    return 1 if failed or broker.log_dir_failed.is_set() else 0     # also a disk error while stopping


def main(argv: list[str] | None = None) -> int:
    return run(parser()[0].parse_args(argv))


def raise_open_file_limit() -> None:
    """Lift the soft limit on open files to the hard one, as the Go runtime and systemd services do: a broker holds
    a file per hosted partition and a socket per connection, and the soft limit (often 1,024) is a shell default."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:        # the kernel's own bound (Linux: fs.nr_open) is the most it grants
        try:
            target = int(open("/proc/sys/fs/nr_open").read())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:
            logging.getLogger("strata.broker").warning("open-file limit stays %d (hard %d): %s", soft, hard, e)


def return_large_buffers() -> None:
    """Have glibc's malloc map every buffer of 256 KiB or more on its own and unmap it when freed. Left to itself,
    malloc raises that threshold to the largest buffer it has freed (up to 32 MiB), after which remote-read chunks
    come from the heap, whose free space a process rarely gives back: the broker's memory would grow past
    remote.fetch.max.memory.bytes (docs/tiered-storage.md) although the chunks it holds stay within it."""
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt(-3, 256 << 10)            # M_MMAP_THRESHOLD (a fixed value ends the dynamic one)
    except (OSError, AttributeError, TypeError):
        pass                                   # not glibc (musl maps large buffers anyway): nothing to set


def run(args: argparse.Namespace) -> int:
    """Run a parsed `broker` or `check` command."""
    if args.command == "check":
        return asyncio.run(_check(args.bootstrap, args.timeout, args.command_config))
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        env = env_properties(dict(os.environ), args.env_prefix) if args.env_prefix else None
        config = BrokerConfig.load(args.config, args.override, env)
        from broker.security.authorizer import load_authorizer
        from broker.security.broker_security import BrokerSecurity
        load_authorizer(config)          # an unknown authorizer.class.name or a malformed super.users: one line
        if not args.print_config:
            BrokerSecurity(config)       # listeners, TLS stores, SASL credentials for other brokers
    except (OSError, ValueError, ssl.SSLError) as e:
        print(f"strata: bad configuration: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        from broker.config import is_sensitive
        for k in sorted(config.props):
            print(f"{k}={'[hidden]' if is_sensitive(k) else config.props[k]}")
        return 0
    raise_open_file_limit()
    return_large_buffers()
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_run_broker(config))
    return uvloop.run(_run_broker(config))


if __name__ == "__main__":
    sys.exit(main())
