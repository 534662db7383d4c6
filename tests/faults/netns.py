"""Network faults for real broker processes (issue 26): every node in its own network namespace, joined by a full
mesh of veth pairs, so a test can cut any link: broker<->broker, broker<->object store, client<->broker.

Nodes are the brokers (ints 1..n), "store" (a moto S3 server, when the cluster keeps its metadata log in S3) and
"client": the test process itself, which stays in the root namespace. Node n has the address 10.77.<K>.<host> (host:
the broker id, 100 for the client, 200 for the store), K being a subnet this run claimed (an flock on
/tmp/strata-netns/<K>.lock held for the mesh's life, so concurrent runs never share addresses). A node's address is
on its namespace's loopback (the client's on each of its veth ends); each pair of nodes has its own veth pair, with
no link subnet: a host route to the peer's address through the veth, `src` the node's own address, and a permanent
neighbour entry naming the peer end's MAC, so no ARP is ever needed. Brokers bind and advertise their node address
(PLAINTEXT://10.77.K.i:9092; one listener for clients, the controller and replication), so every connection between
two nodes crosses exactly the veth pair of those two nodes.

A cut rewrites the neighbour entry of the link's end to a MAC nobody has (02:00:00:00:00:00): frames still leave,
the other end drops them as not addressed to it (PACKET_OTHERHOST). So a cut behaves like a firewall's DROP (what
Jepsen does with iptables, which this machine lacks): connect() and established connections time out, nothing is
refused or reset, and routes and links stay as they were. `ip link set <veth> down` was the first design, but the
kernel then deletes the down end's routes: that side gets an immediate ENETUNREACH while the other times out, and
in the root namespace a missing route sends the client's packets out through the default gateway instead. Healing
writes the true MAC back; connections that have not timed out meanwhile resume. Because each direction has its own
neighbour entry, `cut(a, b, one_way=True)` drops a->b only (for TCP that still breaks every connection between them,
as the handshake and acknowledgements need both ways; UDP shows the direction). A slow link is a token-bucket
qdisc (`tc qdisc ... tbf`) on the sending end of each direction, which caps its rate: `slow(a, b, rate)`, one way
or both; `heal` removes it too. Added latency, loss and reordering are not possible here: this kernel has no netem
(sch_netem) and no iptables/nft, so they would need a userspace proxy between the nodes; tbf adds only the queueing
delay of a full link.

Names: namespaces are strata-net-<K>-<pid>-<node> (unique per run), the client's veth ends in the root namespace
sn<K>x<host>. `cleanup_leftovers()` removes what a killed run left (any K whose lock is free): the processes inside its
namespaces, by pid, then its root links and namespaces. Needs root and `ip netns`; `netns_unavailable()` says why not.

API: NetCluster (tests/cluster/conftest.Cluster with NetBroker processes, optionally a NetMotoServer), its
cut/heal/isolate/heal_all/probe, the `net_cluster` fixture (a factory; everything torn down even when the test
fails), and `network_faults(net)` with fault kinds for tests/faults/nemesis.Nemesis."""
from __future__ import annotations

import ctypes
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

import pytest

from tests.cluster.conftest import Cluster
from tests.conftest import ROOT, BrokerProcess
from tests.faults.nemesis import Fault
from tests.moto_server import MotoServer

PREFIX = "strata-net-"
LOCK_DIR = Path(tempfile.gettempdir()) / "strata-netns"
BOGUS_MAC = "02:00:00:00:00:00"
CLIENT, STORE = "client", "store"
BROKER_PORT = 9092
STORE_PORT = 5000
# The S3 client's timeouts for a cluster whose store can be cut: a cut store must look like an outage within seconds.
S3_CLUSTER_OPTIONS = {"max_attempts": 3, "retry_base_delay": 0.05, "connect_timeout": 1, "read_timeout": 2}

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(RuntimeError):
    pass


def ip(*args, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["ip"] + (["-n", ns] if ns else []) + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise NetnsError(f"`{' '.join(cmd)}` failed ({r.returncode}): {r.stderr.strip()}")
    return r


def tc(*args, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["tc"] + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise NetnsError(f"`{' '.join(cmd)}` failed ({r.returncode}): {r.stderr.strip()}")
    return r


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be used here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"{PREFIX}probe-{os.getpid()}"
    try:
        r = ip("netns", "add", probe, check=False)
    except FileNotFoundError:
        return "no `ip` command (iproute2)"
    if r.returncode != 0:
        return f"`ip netns add` failed: {r.stderr.strip()}"
    try:
        r = ip("link", "add", "name", "v0", "type", "veth", "peer", "name", "v1", ns=probe, check=False)
        if r.returncode != 0:
            return f"cannot create a veth pair: {r.stderr.strip()}"
    finally:
        ip("netns", "del", probe, check=False)
    return None


def _ns_pids(name: str) -> list[int]:
    r = ip("netns", "pids", name, check=False)
    return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []


def _remove_run(k: int, namespaces: list[str]) -> None:
    """Remove subnet K's namespaces (their processes first, by pid) and its root-side links."""
    for name in namespaces:
        for pid in _ns_pids(name):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    links = ip("-o", "link", "show", check=False).stdout
    for dev in re.findall(rf"^\d+: (sn{k}x\d+)[@:]", links, re.M):
        ip("link", "del", dev, check=False)
    for name in namespaces:
        deadline = time.monotonic() + 5
        while _ns_pids(name) and time.monotonic() < deadline:      # killed processes leave the namespace
            time.sleep(0.05)
        ip("netns", "del", name, check=False)


def _our_namespaces(k: int | None = None) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for line in ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = re.match(rf"{re.escape(PREFIX)}(\d+)-", name)
        if m and (k is None or int(m.group(1)) == k):
            out.setdefault(int(m.group(1)), []).append(name)
    return out


def _try_lock(k: int):
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    f = open(LOCK_DIR / f"{k}.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    return f


def cleanup_leftovers() -> list[str]:
    """Remove the namespaces (and their processes and root links) of runs that are gone: those whose subnet lock
    nobody holds. Returns the namespaces removed."""
    removed = []
    for k, names in _our_namespaces().items():
        lock = _try_lock(k)
        if lock is None:
            continue                # a live run owns K
        try:
            _remove_run(k, names)
            removed += names
        finally:
            lock.close()
    return removed


def _run_in_netns(ns: str | None, fn: Callable):
    """fn() in a thread that entered `ns` (None: here). Sockets created there stay in that namespace, whichever
    thread uses them later."""
    if ns is None:
        return fn()
    out: dict = {}

    def run() -> None:
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
            try:
                if _libc.setns(fd, _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns({ns})")
            finally:
                os.close(fd)
            out["result"] = fn()
        except BaseException as e:      # noqa: BLE001 - re-raised in the caller's thread
            out["error"] = e
    t = threading.Thread(target=run, name=f"netns-{ns}", daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["result"]


def _host(node) -> int:
    if node == CLIENT:
        return 100
    if node == STORE:
        return 200
    assert isinstance(node, int) and 1 <= node < 100, f"not a node: {node!r}"
    return node


class Mesh:
    """The namespaces and veth pairs of one run; see the module docstring."""

    def __init__(self, nodes):
        self.nodes = [CLIENT] + [n for n in nodes if n != CLIENT]
        self.k, self._lock = self._claim()
        self.tag = f"{PREFIX}{self.k}-{os.getpid()}-"
        self.cuts: set[tuple] = set()          # directed (from, to) pairs whose frames are dropped
        self.slowed: set[tuple] = set()        # directed (from, to) pairs under a rate cap
        self.closed = False

    @staticmethod
    def _claim():
        for k in range(1, 255):
            lock = _try_lock(k)
            if lock is not None:
                leftovers = _our_namespaces(k).get(k, [])
                _remove_run(k, leftovers)        # a dead run's, or root links a killed run left behind
                return k, lock
        raise NetnsError(f"all 254 subnets are locked ({LOCK_DIR})")

    def ns(self, node) -> str | None:
        if node == CLIENT:
            return None
        _host(node)
        return f"{self.tag}{'b%d' % node if isinstance(node, int) else node}"

    def addr(self, node) -> str:
        return f"10.77.{self.k}.{_host(node)}"

    def dev(self, a, b) -> str:
        """The name of a's end of the a-b veth pair."""
        return f"sn{self.k}x{_host(b)}" if a == CLIENT else f"to{_host(b)}"

    def mac(self, a, b) -> str:
        return "02:77:%02x:%02x:%02x:01" % (self.k, _host(a), _host(b))

    def build(self) -> "Mesh":
        for n in self.nodes[1:]:
            ns = self.ns(n)
            ip("netns", "add", ns)
            ip("link", "set", "lo", "up", ns=ns)
            ip("addr", "add", f"{self.addr(n)}/32", "dev", "lo", ns=ns)
        for i, a in enumerate(self.nodes):
            for b in self.nodes[i + 1:]:
                ip("link", "add", self.dev(a, b), "address", self.mac(a, b), "type", "veth", "peer", "name",
                   self.dev(b, a), "address", self.mac(b, a), "netns", self.ns(b), ns=self.ns(a))
                for x, y in ((a, b), (b, a)):
                    ns = self.ns(x)
                    if x == CLIENT:          # the route's src must be local: the client's address on each veth end
                        ip("addr", "add", f"{self.addr(x)}/32", "dev", self.dev(x, y), ns=ns)
                    ip("link", "set", self.dev(x, y), "up", ns=ns)
                    ip("route", "add", f"{self.addr(y)}/32", "dev", self.dev(x, y), "src", self.addr(x), ns=ns)
                    self._neigh(x, y, self.mac(y, x))
        self._wait_up()
        return self

    def _wait_up(self, timeout: float = 10) -> None:
        """Until every veth end is operationally up: the kernel brings a new link's carrier up asynchronously
        (linkwatch), and drops what is sent before."""
        deadline = time.monotonic() + timeout
        while True:
            down = []
            for n in self.nodes:
                ends = {self.dev(n, m) for m in self.nodes if m != n}
                for line in ip("-o", "link", "show", ns=self.ns(n)).stdout.splitlines():
                    m = re.match(r"\d+: ([^@:]+)[@:].*\bstate (\S+)", line)
                    if m and m.group(1) in ends and m.group(2) != "UP":
                        down.append((n, m.group(1), m.group(2)))
            if not down:
                return
            if time.monotonic() > deadline:
                raise NetnsError(f"veth ends not up after {timeout}s: {down}")
            time.sleep(0.02)

    def _neigh(self, x, y, mac: str) -> None:
        ip("neigh", "replace", self.addr(y), "lladdr", mac, "nud", "permanent", "dev", self.dev(x, y), ns=self.ns(x))

    def _check(self, a, b) -> None:
        for n in (a, b):
            if n not in self.nodes:
                raise ValueError(f"no node {n!r} in this mesh ({self.nodes})")
        if a == b:
            raise ValueError(f"cannot cut {a!r} from itself")

    def cut(self, a, b, one_way: bool = False) -> None:
        """Drop every frame from a to b, and from b to a unless one_way."""
        self._check(a, b)
        for x, y in [(a, b)] if one_way else [(a, b), (b, a)]:
            self._neigh(x, y, BOGUS_MAC)
            self.cuts.add((x, y))

    def slow(self, a, b, rate_bytes: int, one_way: bool = False) -> None:
        """Cap a->b (and b->a unless one_way) at `rate_bytes` per second: a token bucket with a burst of 16 KiB and
        at most 200 ms of queue (what overflows it is dropped, and TCP slows down to the rate)."""
        self._check(a, b)
        for x, y in [(a, b)] if one_way else [(a, b), (b, a)]:
            tc("qdisc", "replace", "dev", self.dev(x, y), "root", "tbf", "rate", f"{rate_bytes * 8}bit",
               "burst", "16kb", "latency", "200ms", ns=self.ns(x))
            self.slowed.add((x, y))

    def heal(self, a, b) -> None:
        """Both directions of a-b carry frames again, at full speed."""
        self._check(a, b)
        for x, y in ((a, b), (b, a)):
            self._neigh(x, y, self.mac(y, x))
            self.cuts.discard((x, y))
            if (x, y) in self.slowed:
                tc("qdisc", "del", "dev", self.dev(x, y), "root", ns=self.ns(x), check=False)
                self.slowed.discard((x, y))

    def isolate(self, a) -> None:
        for b in self.nodes:
            if b != a:
                self.cut(a, b)

    def heal_node(self, a) -> None:
        for x, y in sorted(self.cuts | self.slowed, key=str):
            if a in (x, y):
                self.heal(x, y)

    def heal_all(self) -> None:
        for x, y in sorted(self.cuts | self.slowed, key=str):
            self.heal(x, y)

    def run_in(self, node, fn: Callable):
        return _run_in_netns(self.ns(node), fn)

    def socket(self, node, type: int = socket.SOCK_STREAM) -> socket.socket:
        """A socket of `node`'s namespace (usable from any thread)."""
        return self.run_in(node, lambda: socket.socket(socket.AF_INET, type))

    def probe(self, src, dst, port: int, timeout: float = 1.0) -> bool:
        """Whether a TCP connection from src to dst's address:port is established within `timeout`."""
        s = self.socket(src)
        s.settimeout(timeout)
        try:
            s.connect((self.addr(dst), port))
            return True
        except OSError:
            return False
        finally:
            s.close()

    def popen(self, node, args: list[str], **kw) -> subprocess.Popen:
        """A process in node's namespace. `ip netns exec` execs the command, so the Popen's pid is the process's."""
        ns = self.ns(node)
        return subprocess.Popen((["ip", "netns", "exec", ns] if ns else []) + list(args), **kw)

    def namespaces(self) -> list[str]:
        return [l.split()[0] for l in ip("netns", "list", check=False).stdout.splitlines()
                if l.startswith(self.tag)]

    def close(self) -> None:
        """Kill what still runs in the namespaces (by pid), delete the links and namespaces, release the subnet."""
        if self.closed:
            return
        self.closed = True
        try:
            _remove_run(self.k, [self.ns(n) for n in self.nodes[1:]])
            left = self.namespaces()
            if left:
                raise NetnsError(f"namespaces left after teardown: {left}")
        finally:
            self._lock.close()


class NetBroker(BrokerProcess):
    """A BrokerProcess inside broker i's namespace, listening on (and advertising) its node address. start(),
    stop(), kill9(), restart() and alive() work as for BrokerProcess (the Popen pid is the broker's own)."""

    def __init__(self, mesh: Mesh, node_id: int, data_dir: Path, overrides: dict[str, str] | None = None):
        super().__init__(data_dir, overrides)
        self.mesh, self.node_id = mesh, node_id
        self.host, self.port = mesh.addr(node_id), BROKER_PORT
        self.overrides["node.id"] = str(node_id)
        self.overrides["listeners"] = f"PLAINTEXT://{self.host}:{self.port}"
        self.log_level: str | None = None       # `strata broker --log-level` (e.g. "DEBUG") at the next start

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30) -> "NetBroker":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "broker.cli", "broker"]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        if self.log_level:
            args += ["--log-level", self.log_level]
        self._log = open(self.log_path, "ab")
        self.proc = self.mesh.popen(self.node_id, args, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
            # from inside its own namespace: a broker whose client link is cut still counts as started
            if self.mesh.probe(self.node_id, self.node_id, self.port, timeout=0.5):
                return self
            time.sleep(0.05)
        raise RuntimeError(f"broker did not listen within {timeout}s:\n{self.log_text()[-3000:]}")


class NetMotoServer(MotoServer):
    """tests/moto_server.MotoServer in the "store" namespace, on the store's node address."""

    def __init__(self, mesh: Mesh, log_path: Path | None = None):
        super().__init__(log_path, port=STORE_PORT)
        self.mesh = mesh

    @property
    def endpoint(self) -> str:
        return f"http://{self.mesh.addr(STORE)}:{self.port}"

    def start(self, timeout: float = 30) -> "NetMotoServer":
        assert self.proc is None, "already running"
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
        self.proc = self.mesh.popen(STORE, [sys.executable, "-m", "moto.server", "-H", self.mesh.addr(STORE),
                                            "-p", str(self.port)],
                                    stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        if out is not subprocess.DEVNULL:
            out.close()

        def answers() -> bool:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=1) as r:
                    return r.status == 200
            except OSError:
                return False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                rc, self.proc = self.proc.returncode, None
                raise RuntimeError(f"moto_server exited with {rc}; log: {self.log_path}")
            if self.mesh.run_in(STORE, answers):          # asked from inside: client<->store cuts do not matter
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto_server did not answer within {timeout}s")

    def create_bucket(self, name: str) -> str:
        req = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")

        def put() -> str:
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200, r.status
            return name
        return self.mesh.run_in(STORE, put)


class NetCluster(Cluster):
    """tests/cluster/conftest.Cluster whose brokers (and, with s3=True, a moto S3 server holding the metadata log)
    each run in their own network namespace; the test's clients are the "client" node. Nodes: 1..size, "store",
    "client". `close()` tears everything down (the `net_cluster` fixture calls it)."""

    def __init__(self, root: Path, size: int = 3, s3: bool = False, overrides: dict | None = None,
                 store_options: dict | None = None):
        self.mesh = Mesh(list(range(1, size + 1)) + ([STORE] if s3 else []))
        self.moto: NetMotoServer | None = None
        self.brokers = {}
        try:
            self.mesh.build()
            root.mkdir(parents=True, exist_ok=True)
            store_url = None
            if s3:
                self.moto = NetMotoServer(self.mesh, root / "moto.log").start()
                store_url = f"s3://{self.moto.new_bucket()}/cluster"
                store_options = self.moto.store_options(**{**S3_CLUSTER_OPTIONS, **(store_options or {})})
            super().__init__(root, size, store_url, overrides, store_options)
            self.brokers = {i: NetBroker(self.mesh, i, b.data_dir, b.overrides) for i, b in self.brokers.items()}
        except BaseException:
            self.close()
            raise

    @property
    def nodes(self) -> list:
        return list(self.mesh.nodes)

    def addr(self, node) -> str:
        return self.mesh.addr(node)

    def cut(self, a, b, one_way: bool = False) -> None:
        self.mesh.cut(a, b, one_way)

    def slow(self, a, b, rate_bytes: int, one_way: bool = False) -> None:
        self.mesh.slow(a, b, rate_bytes, one_way)

    def heal(self, a, b) -> None:
        self.mesh.heal(a, b)

    def isolate(self, a) -> None:
        """Cut `a` from every other node: the other brokers, the store, the clients."""
        self.mesh.isolate(a)

    def heal_node(self, a) -> None:
        self.mesh.heal_node(a)

    def heal_all(self) -> None:
        self.mesh.heal_all()

    def probe(self, src, dst, port: int | None = None, timeout: float = 1.0) -> bool:
        """TCP connect from src to dst (a broker's port by default, the S3 port for "store")."""
        if port is None:
            port = STORE_PORT if dst == STORE else BROKER_PORT
        return self.mesh.probe(src, dst, port, timeout)

    def close(self) -> None:
        """Stop brokers and store, remove namespaces and links; every step is tried, the first error raised."""
        errors = []
        for b in self.brokers.values():
            try:
                b.stop()
            except Exception as e:          # noqa: BLE001
                errors.append(e)
        if self.moto is not None:
            try:
                self.moto.stop()
            except Exception as e:          # noqa: BLE001
                errors.append(e)
        try:
            self.mesh.close()
        except Exception as e:              # noqa: BLE001
            errors.append(e)
        if errors:
            raise errors[0]


@pytest.fixture
def net_cluster(tmp_path):
    """A factory: net_cluster(size=3, s3=False, overrides=None, store_options=None, start=True) -> NetCluster.
    Skips where namespaces cannot be made; removes a dead run's leftovers first; closes every cluster it made."""
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    cleanup_leftovers()
    made: list[NetCluster] = []

    def factory(size: int = 3, s3: bool = False, overrides: dict | None = None, store_options: dict | None = None,
                start: bool = True) -> NetCluster:
        c = NetCluster(tmp_path / f"net{len(made)}", size, s3, overrides, store_options)
        made.append(c)
        return c.start() if start else c
    yield factory
    errors = []
    for c in made:
        try:
            c.close()
        except Exception as e:              # noqa: BLE001
            errors.append(e)
    if errors:
        raise errors[0]


def network_faults(net: NetCluster, leader_of: Callable[[int], int] | None = None) -> dict[str, Callable[[int], Fault]]:
    """Fault kinds for tests/faults/nemesis.Nemesis (target: a broker id).

    partition_leader: cut the broker from every other broker, keeping its links to the store and the clients (a
      leader partitioned from its followers; with `leader_of`, e.g. `lambda t: net.leader(topic, t % partitions)`,
      the target picks a partition and its leader at apply time is the one cut off).
    isolate: cut the broker from everything: brokers, store, clients.
    slow_links: cap the broker's links to every other broker at 64 KiB/s each way (replication, heartbeats).
    cut_store: cut the broker from the S3 store only (only with a NetCluster(s3=True); absent otherwise, since the
      brokers of a file:// store share a directory)."""
    pick = leader_of or (lambda t: t)

    def partition_leader(target: int) -> Fault:
        chosen: list[int] = []

        def apply() -> None:
            i = pick(target)
            chosen.append(i)
            for j in net.brokers:
                if j != i:
                    net.cut(i, j)

        def heal() -> None:
            for i in chosen:
                for j in net.brokers:
                    if j != i:
                        net.heal(i, j)
        return Fault(apply=apply, heal=heal)

    def isolate(target: int) -> Fault:
        return Fault(apply=lambda: net.isolate(target), heal=lambda: net.heal_node(target))

    def slow_links(target: int) -> Fault:
        others = [j for j in net.brokers if j != target]
        return Fault(apply=lambda: [net.slow(target, j, 64 * 1024) for j in others],
                     heal=lambda: [net.heal(target, j) for j in others])

    kinds = {"partition_leader": partition_leader, "isolate": isolate, "slow_links": slow_links}
    if STORE in net.nodes:
        kinds["cut_store"] = lambda target: Fault(apply=lambda: net.cut(target, STORE),
                                                  heal=lambda: net.heal(target, STORE))
    return kinds
