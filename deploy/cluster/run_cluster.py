"""`make cluster`: three `strata broker` processes from deploy/cluster/broker-{1,2,3}.properties, in the foreground.

Each broker's output goes to <data dir>/broker-N.log and, prefixed with `broker-N |`, to stdout; its pid is in
<data dir>/broker-N.pid. Ctrl-C (SIGINT), SIGTERM or SIGHUP stops the brokers with SIGTERM (SIGKILL after 20 s or on a
second Ctrl-C) and exits 0. A broker that dies is reported and not restarted; restart it alone with the command printed.

The properties files are the configuration. For tests or a second cluster on the same machine, `--port-offset N` adds
N to every listener and metrics port, `--data-dir D` replaces ./data/cluster in every value, and `--override k=v`
sets a key on all three brokers; each becomes `--override` flags of `strata broker`.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]       # the repository: relative paths in the properties start here
CONFIG_DIR = Path(__file__).resolve().parent
DATA_DIR = "./data/cluster"                      # as written in the properties files
NODES = (1, 2, 3)
STOP_TIMEOUT = 20.0

_out_lock = threading.Lock()


def say(line: str, prefix: str = "cluster") -> None:
    with _out_lock:
        sys.stdout.write(f"{prefix:<8} | {line}\n")
        sys.stdout.flush()


def read_properties(path: Path) -> dict[str, str]:
    from broker.config import parse_properties
    return parse_properties(path.read_text())


def _shift_ports(listeners: str, offset: int) -> str:
    return re.sub(r":(\d+)(?=$|[,/\s])", lambda m: f":{int(m.group(1)) + offset}", listeners)


def broker_overrides(props: dict[str, str], port_offset: int, data_dir: str | None,
                     extra: list[str]) -> list[str]:
    """The `key=value` overrides that move one broker's ports and data dir, then the user's own."""
    out: dict[str, str] = {}
    if port_offset:
        for key in ("listeners", "advertised.listeners"):
            if props.get(key):
                out[key] = _shift_ports(props[key], port_offset)
        if int(props.get("metrics.port", "-1")) >= 0:
            out["metrics.port"] = str(int(props["metrics.port"]) + port_offset)
    if data_dir is not None:
        for key, value in props.items():
            if DATA_DIR in value:
                out[key] = out.get(key, value).replace(DATA_DIR, data_dir)
    return [f"{k}={v}" for k, v in out.items()] + list(extra)


def effective(props: dict[str, str], overrides: list[str]) -> dict[str, str]:
    return {**props, **dict(o.split("=", 1) for o in overrides)}


def listener_address(props: dict[str, str]) -> tuple[str, int]:
    first = props.get("listeners", "PLAINTEXT://127.0.0.1:9092").split(",")[0]
    host, _, port = first.split("://")[-1].rpartition(":")
    return (host or "127.0.0.1"), int(port)


def port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)     # as the broker and the metrics server bind
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def _die_with_parent() -> None:
    """In the child: SIGTERM when the launcher dies, even by kill -9, so no broker outlives it unnoticed (Linux)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG
    except Exception:
        pass


class BrokerChild:
    def __init__(self, node: int, config: Path, overrides: list[str], data_dir: Path):
        self.node = node
        self.config = config
        self.overrides = overrides
        self.props = effective(read_properties(config), overrides)
        self.log_path = data_dir / f"broker-{node}.log"
        self.pid_path = data_dir / f"broker-{node}.pid"
        self.proc: subprocess.Popen | None = None
        self.reader: threading.Thread | None = None
        self.reported = False

    @property
    def name(self) -> str:
        return f"broker-{self.node}"

    def command(self, strata: list[str]) -> list[str]:
        rel = os.path.relpath(self.config, ROOT)
        args = strata + ["broker", "--config", rel]
        for o in self.overrides:
            args += ["--override", o]
        return args

    def start(self, strata: list[str]) -> None:
        self.proc = subprocess.Popen(self.command(strata), cwd=ROOT, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                     start_new_session=True,            # Ctrl-C reaches the launcher only
                                     preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        self.pid_path.write_text(f"{self.proc.pid}\n")

    def start_reader(self) -> None:
        self.reader = threading.Thread(target=self._copy_output, name=self.name, daemon=True)
        self.reader.start()

    def _copy_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.log_path, "ab") as log:
            for raw in self.proc.stdout:
                log.write(raw)
                log.flush()
                say(raw.decode(errors="replace").rstrip("\n"), self.name)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def finish_output(self) -> None:
        if self.reader is not None:
            self.reader.join(2)
        self.pid_path.unlink(missing_ok=True)


def describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name} (exit code {rc})"
        except ValueError:
            return f"killed by signal {-rc} (exit code {rc})"
    return f"exit code {rc}"


def strata_command() -> list[str]:
    script = Path(sys.executable).parent / "strata"
    return [str(script)] if script.exists() else [sys.executable, "-m", "broker.cli"]


def restart_hint(b: BrokerChild) -> str:
    exe = Path(sys.executable).parent / "strata"
    shown = str(exe.relative_to(ROOT)) if exe.is_relative_to(ROOT) else str(exe)
    return shlex.join(b.command([shown]))


def report_deaths(brokers: list[BrokerChild]) -> None:
    for b in brokers:
        if b.proc is not None and not b.reported and not b.alive():
            b.reported = True
            b.finish_output()
            say(f"{b.name} (pid {b.proc.pid}) died: {describe_exit(b.proc.returncode)}; not restarted, the "
                f"others keep running. Restart it alone with: {restart_hint(b)}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port-offset", type=int, metavar="N",
                   default=int(os.environ.get("STRATA_CLUSTER_PORT_OFFSET", "0")),
                   help="add N to every listener and metrics port (default 0: 9092-9094, metrics 9101-9103)")
    p.add_argument("--data-dir", metavar="D", default=os.environ.get("STRATA_CLUSTER_DATA_DIR"),
                   help=f"use D instead of {DATA_DIR} for logs, metadata log, remote tier, pid and log files")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="set a config key on all three brokers (repeatable)")
    args = p.parse_args(argv)
    for o in args.override:
        if "=" not in o:
            p.error(f"--override expects key=value, got {o!r}")

    data_dir_value = os.path.abspath(args.data_dir) if args.data_dir else None
    data_dir = Path(data_dir_value) if data_dir_value else ROOT / DATA_DIR
    data_dir.mkdir(parents=True, exist_ok=True)

    brokers = []
    for node in NODES:
        config = CONFIG_DIR / f"broker-{node}.properties"
        overrides = broker_overrides(read_properties(config), args.port_offset, data_dir_value, args.override)
        brokers.append(BrokerChild(node, config, overrides, data_dir))

    busy = []
    for b in brokers:
        host, port = listener_address(b.props)
        ports = [port] + ([int(b.props["metrics.port"])] if int(b.props.get("metrics.port", "-1")) > 0 else [])
        busy += [f"{host}:{p}" for p in ports if not port_free(host, p)]
    if busy:
        say(f"not starting: {', '.join(busy)} already in use (another `make cluster` or `make run`? "
            f"--port-offset N moves the cluster)")
        return 1

    signals: list[int] = []

    def on_signal(signum, _frame):
        signals.append(signum)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    strata = strata_command()
    for b in brokers:                           # all forks first, then the reader threads (preexec_fn and threads)
        b.start(strata)
    for b in brokers:
        b.start_reader()
        host, port = listener_address(b.props)
        say(f"started {b.name} (pid {b.proc.pid}) on {host}:{port}, rack {b.props.get('broker.rack') or '-'}, "
            f"metrics port {b.props.get('metrics.port', '-1')}, log {b.log_path}")

    ready = False
    while not signals:
        report_deaths(brokers)
        if all(b.reported for b in brokers):
            say("all brokers have exited; stopping")
            return 1
        if not ready and all(_listening(b) for b in brokers if b.alive()) and not any(b.reported for b in brokers):
            ready = True
            bootstrap = ",".join("%s:%d" % listener_address(b.props) for b in brokers)
            say(f"all three brokers are listening: bootstrap.servers={bootstrap}; Ctrl-C stops them")
        time.sleep(0.2)

    say(f"{signal.Signals(signals[0]).name}: stopping the brokers")
    return stop_all(brokers, signals)


def _listening(b: BrokerChild) -> bool:
    try:
        with socket.create_connection(listener_address(b.props), timeout=0.2):
            return True
    except OSError:
        return False


def stop_all(brokers: list[BrokerChild], signals: list[int]) -> int:
    report_deaths(brokers)
    live = [b for b in brokers if b.alive()]
    for b in live:
        try:
            b.proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    seen = len(signals)
    deadline = time.monotonic() + STOP_TIMEOUT
    while any(b.alive() for b in live):
        if time.monotonic() > deadline or len(signals) > seen:
            why = "a second signal" if len(signals) > seen else f"{STOP_TIMEOUT:.0f} s"
            for b in live:
                if b.alive():
                    say(f"{b.name} (pid {b.proc.pid}) still running after {why}: SIGKILL")
                    b.proc.kill()
            for b in live:
                b.proc.wait()
            break
        time.sleep(0.1)
    for b in brokers:
        if b.proc is not None:
            b.finish_output()
            if b in live:
                say(f"{b.name} stopped ({describe_exit(b.proc.returncode)})")
    say("cluster stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
