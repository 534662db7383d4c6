"""Consumer-group rebalance benchmark: how long a group of three consumers on a 12-partition topic takes to settle,
against a real Strata broker process (`python -m broker.cli broker`, i.e. `strata broker`) on a free loopback port.

Clients ("kinds"; every round uses a new group):

  range        confluent-kafka, group.protocol=classic, partition.assignment.strategy=range (eager)
  coop-sticky  confluent-kafka, group.protocol=classic, partition.assignment.strategy=cooperative-sticky (KIP-429)
  consumer     confluent-kafka, group.protocol=consumer (KIP-848: the broker assigns, default server assignor)
  kafka-python kafka-python's KafkaConsumer, its default assignors (range first; eager)

Scenarios, in this order per round, on one group:

  join   three members subscribe(); from the first subscribe() call until the three own all 12 partitions, each
         exactly once, 4 apiece
  add    a 4th member subscribes; from its subscribe() call until the four own every partition exactly once, 3 apiece
  leave  the first of the original three close()s; from its close() call until the remaining three own all 12
         partitions exactly once, 4 apiece

"Own" means what the application was told: every member's set of partitions is kept from its assign / revoke / lost
callbacks (confluent-kafka on_assign/on_revoke/on_lost; kafka-python's ConsumerRebalanceListener), with the time of
each callback. The end of a scenario is the callback after which the target state held and no further callback came
for --settle-window seconds (1 s + the heartbeat interval): a rebalance that lands in the right state and then moves
partitions again is not counted as finished early. Because that window has a fixed length, (b) and (c) start after
a further random pause of 0 to max(1 s, heartbeat interval): otherwise every round would start at the same phase of
the members' heartbeat schedule, and the members of a stable group learn of a change only from a heartbeat response
(librdkafka with heartbeat.interval.ms=300 heartbeats alternately 0.37 s and 0.63 s apart, so its schedule repeats
every ~1 s). Every callback is checked for overlap (a partition handed to a member while another member has not
given it up); overlaps, lost partitions and client errors are reported. "Rebalance steps" is the most assign
callbacks one member got in the scenario: one per rebalance (generation) it took part in for the classic protocols
(librdkafka's cooperative callbacks come with an empty list too), one per reconciliation that changed its assignment
for KIP-848.

Threads: every member runs on its own thread, which creates the client, subscribes, polls and closes it; the main
thread only sends commands and waits. librdkafka delivers rebalance callbacks from poll(), and with the eager
protocols a member cannot rejoin until its application has served the revoke; kafka-python starts a (re)join only
from poll(). One thread per member makes each member react as soon as its event arrives (confluent-kafka's poll(0.05)
releases the GIL and wakes on the event). Round-robin polling in one thread would add up to (members - 1) x the poll
timeout to each step and serialise the callbacks, i.e. it would measure the benchmark's loop rather than the broker.
Clients are not shared across threads (close() runs on the polling thread too).

kafka-python is polled with poll(timeout_ms=1000) and fetch_max_wait_ms=100. With short poll timeouts (50-200 ms)
kafka-python 3.0.12 wedged a group leader in about one initial join in five (delay 0): the leader rejoins because its
first assignment was computed before it had the topic's metadata, poll()'s timer expires while that JoinGroup/
SyncGroup is in flight, and once the new assignment makes need_rejoin() false the finished join is never picked up
(heartbeats stay disabled, the assignment is never applied); the broker expires the member after session.timeout.ms
and it stays without partitions. A 1 s poll timeout avoids it; the lower fetch wait keeps the poll loop, which starts
a rejoin only between fetches, from adding up to 500 ms to each step.

Before subscribe() each member has connected and fetched the topic's metadata (list_topics / partitions_for_topic),
so the numbers are the group protocol, not the bootstrap. One unmeasured warm-up round per kind precedes the rounds
on each broker. Broker configurations (a fresh broker each, the kinds interleaved within a round):

  fast      group.initial.rebalance.delay.ms=0; classic clients heartbeat.interval.ms=300, session.timeout.ms=6000
            (the broker's group.min.session.timeout.ms); KIP-848: group.consumer.heartbeat.interval.ms=300,
            group.consumer.session.timeout.ms=6000 on the broker. All three scenarios. The headline.
  delay     the same with group.initial.rebalance.delay.ms=3000 (Kafka's default): join only.
  defaults  Kafka's and the clients' defaults throughout: delay 3000; classic heartbeat 3000 ms / session 45 s;
            KIP-848 heartbeat 5000 ms / session 45 s. All three scenarios, --default-rounds rounds.

    .venv/bin/python bench/rebalance.py --smoke           # one round of the fast configuration, about 20 s
    .venv/bin/python bench/rebalance.py                   # full run (about 15 minutes)
    .venv/bin/python bench/rebalance.py --write           # same, and replace the results block in docs/benchmarks.md
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import queue
import random
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import produce_fetch as pf  # noqa: E402
from benchdoc import write_results  # noqa: E402
from confluent_kafka import Consumer, KafkaError  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- rebalance:results:begin -->", "<!-- rebalance:results:end -->"
PARTITIONS = 12
KAFKA_PYTHON_POLL_MS = 1000      # see the docstring: shorter poll timeouts can wedge a kafka-python 3.0 group leader
KAFKA_PYTHON_FETCH_WAIT_MS = 100  # its poll loop starts a rejoin only between fetches (default fetch wait 500 ms)
KINDS = ("range", "coop-sticky", "consumer", "kafka-python")
SCENARIOS = ("join", "add", "leave")
KIND_LABEL = {"range": "classic, range (eager)", "coop-sticky": "classic, cooperative-sticky",
              "consumer": "consumer (KIP-848), server assignor", "kafka-python": "kafka-python, classic, range"}

# Broker configurations. `hb` is the heartbeat interval (ms) the members end up with, for the settle window.
CONFIGS = {
    "fast": {"broker": {"group.initial.rebalance.delay.ms": "0", "group.consumer.heartbeat.interval.ms": "300",
                        "group.consumer.session.timeout.ms": "6000"},
             "classic": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300},
             "hb": {"classic": 300, "consumer": 300}, "scenarios": SCENARIOS},
    "delay": {"broker": {"group.initial.rebalance.delay.ms": "3000", "group.consumer.heartbeat.interval.ms": "300",
                         "group.consumer.session.timeout.ms": "6000"},
              "classic": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300},
              "hb": {"classic": 300, "consumer": 300}, "scenarios": ("join",)},
    "defaults": {"broker": {"group.initial.rebalance.delay.ms": "3000", "group.consumer.heartbeat.interval.ms": "5000",
                            "group.consumer.session.timeout.ms": "45000"},
                 "classic": {},
                 "hb": {"classic": 3000, "consumer": 5000}, "scenarios": SCENARIOS},
}
CONFIG_TITLE = {"fast": "group.initial.rebalance.delay.ms=0, 300 ms heartbeats (headline)",
                "delay": "group.initial.rebalance.delay.ms=3000 (Kafka's default), 300 ms heartbeats",
                "defaults": "Kafka and client defaults (delay 3000 ms; heartbeats 3000 ms classic, 5000 ms KIP-848)"}


class ScenarioTimeout(Exception):
    pass


# ---- who owns what -----------------------------------------------------------------------------------------------
class Tracker:
    """Every member's partitions as its callbacks reported them, with the time of each callback."""

    def __init__(self, partitions: int):
        self.n = partitions
        self.cond = threading.Condition()
        self.owned: dict[str, set[int]] = {}
        self.active: list[str] = []
        self.events: list[tuple[float, str, str, tuple[int, ...]]] = []
        self.overlaps: list[str] = []
        self.errors: list[str] = []
        self.last_event = 0.0

    def activate(self, name: str) -> None:
        with self.cond:
            self.owned.setdefault(name, set())
            self.active.append(name)

    def deactivate(self, name: str) -> None:
        """No longer counted for the target state; its partitions still count for overlap until released."""
        with self.cond:
            if name in self.active:
                self.active.remove(name)

    def release(self, name: str) -> None:
        with self.cond:
            self.owned[name] = set()
            self.cond.notify_all()

    def record(self, name: str, kind: str, parts) -> None:
        t = time.perf_counter()
        parts = set(parts)
        with self.cond:
            mine = self.owned.setdefault(name, set())
            if kind == "assign":
                for other, theirs in self.owned.items():
                    if other != name and theirs & parts:
                        self.overlaps.append(f"{name} assigned {sorted(theirs & parts)} still owned by {other}")
                mine |= parts
            else:
                mine -= parts
            self.events.append((t, name, kind, tuple(sorted(parts))))
            self.last_event = t
            self.cond.notify_all()

    def error(self, name: str, what: str) -> None:
        with self.cond:
            self.errors.append(f"{name}: {what}")

    def _target_locked(self) -> bool:
        sets = [self.owned[m] for m in self.active]
        if not sets or not all(sets):
            return False
        sizes = [len(s) for s in sets]
        return sum(sizes) == self.n and set().union(*sets) == set(range(self.n)) and max(sizes) - min(sizes) <= 1

    def snapshot(self) -> str:
        with self.cond:
            return ", ".join(f"{m}{'' if m in self.active else '(inactive)'}={sorted(s)}"
                             for m, s in self.owned.items())

    def wait_target(self, since: float, timeout: float, settle: float) -> float:
        """Time of the callback that completed the target state, once it has held for `settle` seconds."""
        deadline = time.perf_counter() + timeout
        with self.cond:
            while True:
                now = time.perf_counter()
                if self._target_locked():
                    last = max(self.last_event, since)
                    if now - last >= settle:
                        return last
                    self.cond.wait(settle - (now - last))
                    continue
                if now >= deadline:
                    break
                self.cond.wait(min(deadline - now, 0.5))
        raise ScenarioTimeout(f"no stable target state after {timeout:.0f} s: {self.snapshot()}")

    def count(self, since: float, until: float) -> dict:
        """Callbacks in [since, until]; `rebalances` is the most assign callbacks one member got (each member gets
        one per rebalance it takes part in, librdkafka's cooperative ones with an empty list too)."""
        with self.cond:
            ev = [e for e in self.events if since <= e[0] <= until + 1e-9]
        out = {k: sum(1 for e in ev if e[2] == k) for k in ("assign", "revoke", "lost")}
        per_member: dict[str, int] = {}
        for e in ev:
            if e[2] == "assign":
                per_member[e[1]] = per_member.get(e[1], 0) + 1
        out["rebalances"] = max(per_member.values(), default=0)
        return out

    def timeline(self, t0: float) -> list[str]:
        with self.cond:
            return [f"{1000 * (t - t0):8.1f} ms {name} {kind} {list(parts)}" for t, name, kind, parts in self.events]


# ---- members -----------------------------------------------------------------------------------------------------
class Member:
    """One group member on its own thread; the thread creates, polls and closes the client."""

    def __init__(self, name: str, kind: str, bootstrap: str, group: str, topic: str, cfg: dict, tracker: Tracker):
        self.name, self.kind, self.bootstrap, self.group, self.topic = name, kind, bootstrap, group, topic
        self.cfg, self.tracker = cfg, tracker
        self.commands: queue.Queue = queue.Queue()
        self.ready = threading.Event()
        self.failure: BaseException | None = None
        self.subscribed_at: float | None = None
        self.close_started: float | None = None
        self.close_seconds: float | None = None
        self.thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    # -- commands from the main thread --
    def start(self, timeout: float = 30) -> "Member":
        self.thread.start()
        if not self.ready.wait(timeout):
            raise RuntimeError(f"{self.name}: client not ready after {timeout} s")
        if self.failure is not None:
            raise RuntimeError(f"{self.name}: {self.failure!r}")
        return self

    def subscribe(self) -> None:
        self.commands.put("subscribe")

    def close(self) -> None:
        self.commands.put("close")

    # -- the member thread --
    def _run(self) -> None:
        subscribed = False
        try:
            self._create()
            self.ready.set()
            while True:
                if subscribed:
                    try:
                        cmd = self.commands.get_nowait()
                    except queue.Empty:
                        cmd = None
                else:
                    cmd = self.commands.get()
                if cmd == "subscribe":
                    self.subscribed_at = time.perf_counter()
                    self._subscribe()
                    subscribed = True
                elif cmd == "close":
                    self.close_started = time.perf_counter()
                    self._close()
                    self.close_seconds = time.perf_counter() - self.close_started
                    self.tracker.release(self.name)
                    return
                if subscribed:
                    self._poll()
        except BaseException as e:   # reported by the main thread
            self.failure = e
            self.tracker.error(self.name, repr(e))
            self.ready.set()

    def _create(self) -> None:
        if self.kind == "kafka-python":
            from kafka import KafkaConsumer
            conf = {"session_timeout_ms": self.cfg["session.timeout.ms"],
                    "heartbeat_interval_ms": self.cfg["heartbeat.interval.ms"]} if self.cfg else {}
            self.client = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                                        enable_auto_commit=False, auto_offset_reset="latest",
                                        fetch_max_wait_ms=KAFKA_PYTHON_FETCH_WAIT_MS, **conf)
            self.client.partitions_for_topic(self.topic)
            return
        conf = {"bootstrap.servers": self.bootstrap, "broker.address.family": "v4", "group.id": self.group,
                "enable.auto.commit": False, "auto.offset.reset": "latest", "log_level": 3,
                "error_cb": lambda err: self.tracker.error(self.name, str(err))}
        if self.kind == "consumer":
            conf["group.protocol"] = "consumer"   # session/heartbeat are broker settings under KIP-848
        else:
            conf["group.protocol"] = "classic"
            conf["partition.assignment.strategy"] = "range" if self.kind == "range" else "cooperative-sticky"
            conf.update(self.cfg)
        self.client = Consumer(conf)
        self.client.list_topics(self.topic, timeout=10)

    def _subscribe(self) -> None:
        rec = self.tracker.record
        if self.kind == "kafka-python":
            from kafka import ConsumerRebalanceListener

            member = self

            class Listener(ConsumerRebalanceListener):
                def on_partitions_assigned(self, assigned):
                    rec(member.name, "assign", (tp.partition for tp in assigned))

                def on_partitions_revoked(self, revoked):
                    rec(member.name, "revoke", (tp.partition for tp in revoked))

                def on_partitions_lost(self, lost):
                    rec(member.name, "lost", (tp.partition for tp in lost))

            self.client.subscribe(topics=[self.topic], listener=Listener())
            return
        self.client.subscribe(
            [self.topic],
            on_assign=lambda _c, ps: rec(self.name, "assign", (tp.partition for tp in ps)),
            on_revoke=lambda _c, ps: rec(self.name, "revoke", (tp.partition for tp in ps)),
            on_lost=lambda _c, ps: rec(self.name, "lost", (tp.partition for tp in ps)))

    def _poll(self) -> None:
        if self.kind == "kafka-python":
            self.client.poll(timeout_ms=KAFKA_PYTHON_POLL_MS)
            return
        m = self.client.poll(0.05)
        if m is not None and m.error() is not None and m.error().code() != KafkaError._PARTITION_EOF:
            self.tracker.error(self.name, str(m.error()))

    def _close(self) -> None:
        self.client.close()


# ---- one round -------------------------------------------------------------------------------------------------
def run_round(bootstrap: str, topic: str, kind: str, cfg_name: str, rnd: int, args) -> dict:
    cfg = CONFIGS[cfg_name]
    scenarios = cfg["scenarios"]
    hb = cfg["hb"]["consumer" if kind == "consumer" else "classic"] / 1000
    settle = args.settle_window if args.settle_window is not None else 1.0 + hb
    rng = random.Random(f"{cfg_name}/{kind}/{rnd}")
    jitter = max(1.0, hb)   # librdkafka's heartbeats with a 300 ms interval repeat every ~1 s (0.37 s, 0.63 s, ...)
    group = f"rebalance-{cfg_name}-{kind}-{rnd}-{uuid.uuid4().hex[:6]}"
    tracker = Tracker(PARTITIONS)
    client_cfg = {} if kind == "consumer" else cfg["classic"]
    members: list[Member] = []
    out: dict = {"config": cfg_name, "kind": kind, "round": rnd}

    def new_member(i: int) -> Member:
        m = Member(f"m{i}", kind, bootstrap, group, topic, client_cfg, tracker)
        members.append(m)
        return m.start()

    def finish(name: str, t0: float, since: float, end: float, **extra) -> None:
        out[name] = {"ms": 1000 * (end - t0), **tracker.count(since, end), **extra}

    try:
        first = [new_member(i) for i in range(3)]
        for m in first:
            tracker.activate(m.name)
        since = time.perf_counter()
        for m in first:
            m.subscribe()
        end = tracker.wait_target(since, args.scenario_timeout, settle)
        finish("join", min(m.subscribed_at for m in first), since, end)

        if "add" in scenarios:
            fourth = new_member(3)
            tracker.activate(fourth.name)
            time.sleep(rng.uniform(0, jitter))     # start at a random phase of the members' heartbeats
            since = time.perf_counter()
            fourth.subscribe()
            end = tracker.wait_target(since, args.scenario_timeout, settle)
            finish("add", fourth.subscribed_at, since, end)

        if "leave" in scenarios:
            leaving = first[0]
            time.sleep(rng.uniform(0, jitter))
            tracker.deactivate(leaving.name)
            since = time.perf_counter()
            leaving.close()
            end = tracker.wait_target(since, args.scenario_timeout, settle)
            leaving.thread.join(30)
            finish("leave", leaving.close_started, since, end,
                   close_ms=1000 * leaving.close_seconds if leaving.close_seconds is not None else None)
    except (ScenarioTimeout, RuntimeError) as e:
        out["failed"] = str(e)
    finally:
        live = [m for m in members if m.thread.is_alive()]
        for m in live:
            tracker.deactivate(m.name)
            m.close()
        for m in live:
            m.thread.join(30)
        stuck = [m.name for m in live if m.thread.is_alive()]
        if stuck:
            out["stuck_close"] = stuck
    out["overlaps"] = tracker.overlaps
    out["errors"] = tracker.errors
    if args.trace:
        t0 = min((m.subscribed_at for m in members if m.subscribed_at is not None), default=0.0)
        marks = [f"{1000 * (t - t0):8.1f} ms {label}" for t, label in
                 [(m.subscribed_at, f"{m.name} subscribe()") for m in members if m.subscribed_at] +
                 [(m.close_started, f"{m.name} close()") for m in members if m.close_started]]
        print(f"--- {cfg_name} {kind} round {rnd}", *sorted(marks + tracker.timeline(t0)), sep="\n    ")
    return out


def run_config(cfg_name: str, rounds: int, args, results: list[dict]) -> dict:
    cfg = CONFIGS[cfg_name]
    if args.settle > 0:
        pf.wait_for_quiet(args.settle)
    b = pf.BrokerProc("strata")
    for k, v in cfg["broker"].items():
        b.args += ["--override", f"{k}={v}"]
    b.start()
    info = {"config": cfg_name, "broker_overrides": cfg["broker"]}
    m0, c0, o0, t0 = pf.machine_busy_seconds(), pf.cpu_seconds(b.pid), pf.own_cpu_seconds(), time.monotonic()
    try:
        topic = f"rebalance-{cfg_name}"
        pf.create_topic(b.bootstrap, topic, PARTITIONS)
        for rnd in range(-args.warmup, rounds):
            order = list(args.kinds[rnd % len(args.kinds):] + args.kinds[:rnd % len(args.kinds)]) if rnd >= 0 \
                else list(args.kinds)
            for kind in order:
                r = run_round(b.bootstrap, topic, kind, cfg_name, rnd, args)
                line = " ".join(f"{s} {r[s]['ms']:7.0f} ms ({r[s]['rebalances']} steps)" for s in SCENARIOS if s in r)
                flag = "".join(f" FAILED: {r['failed']}" if "failed" in r else "")
                flag += f" OVERLAPS: {r['overlaps']}" if r["overlaps"] else ""
                flag += f" errors: {r['errors'][:3]}" if r["errors"] else ""
                print(f"{cfg_name:8s} {'warm-up' if rnd < 0 else f'round {rnd}':8s} {kind:12s} {line}{flag}",
                      flush=True)
                if rnd >= 0:
                    results.append(r)
    finally:
        wall = time.monotonic() - t0
        broker_cpu, own = pf.cpu_seconds(b.pid) - c0, pf.own_cpu_seconds() - o0
        info["cpu"] = {"broker": broker_cpu / wall, "client": own / wall,
                       "other": max(0.0, pf.machine_busy_seconds() - m0 - broker_cpu - own) / wall}
        log = b.stop()
        info["tracebacks"] = log.count("Traceback")
        info["error_lines"] = [ln for ln in log.splitlines() if " ERROR " in ln][:10]
        if info["tracebacks"]:
            print(f"WARNING: broker ({cfg_name}) logged {info['tracebacks']} traceback(s):\n{log[-3000:]}",
                  file=sys.stderr)
    return info


# ---- reporting -------------------------------------------------------------------------------------------------
def stats(results: list[dict], cfg: str, kind: str, scenario: str) -> dict | None:
    rs = [r for r in results if r["config"] == cfg and r["kind"] == kind]
    vals = [r[scenario]["ms"] for r in rs if scenario in r]
    if not rs or not vals:
        return None
    return {"median": statistics.median(vals), "max": max(vals), "n": len(vals), "rounds": len(rs),
            "rebalances": statistics.median(r[scenario]["rebalances"] for r in rs if scenario in r)}


def cell(s: dict | None) -> str:
    if s is None:
        return "-"
    txt = f"{s['median']:,.0f} / {s['max']:,.0f}"
    if s["n"] < s["rounds"]:
        txt += f" ({s['rounds'] - s['n']} failed)"
    return txt


def summary_table(results: list[dict], cfg: str, kinds) -> str:
    scen = CONFIGS[cfg]["scenarios"]
    head = ["Protocol / assignor"] + [{"join": "(a) initial join", "add": "(b) 4th member joins",
                                       "leave": "(c) member leaves"}[s] + " ms, median / max" for s in scen]
    head.append("rebalance steps, median (" + " / ".join(scen) + ")")
    rows = [head, ["---"] * len(head)]
    for kind in kinds:
        st = [stats(results, cfg, kind, s) for s in scen]
        if all(x is None for x in st):
            continue
        rows.append([KIND_LABEL[kind]] + [cell(x) for x in st]
                    + [" / ".join("-" if x is None else f"{x['rebalances']:g}" for x in st)])
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def rounds_table(results: list[dict]) -> str:
    rows = ["| Config | Client | Round | join ms (steps) | add ms (steps) | leave ms (steps), close() ms | notes |",
            "| --- | --- | --- | --- | --- | --- | --- |"]

    def c(r, s):
        if s not in r:
            return "-"
        x = r[s]
        txt = f"{x['ms']:,.0f} ({x['rebalances']}{', lost ' + str(x['lost']) if x['lost'] else ''})"
        if s == "leave" and x.get("close_ms") is not None:
            txt += f", {x['close_ms']:,.0f}"
        return txt

    for r in results:
        notes = []
        if "failed" in r:
            notes.append("FAILED: " + r["failed"].replace("|", "/"))
        if r["overlaps"]:
            notes.append(f"{len(r['overlaps'])} overlap(s): " + r["overlaps"][0])
        if r["errors"]:
            notes.append(f"{len(r['errors'])} client error(s): " + r["errors"][0].replace("|", "/"))
        if r.get("stuck_close"):
            notes.append("close() did not return: " + ", ".join(r["stuck_close"]))
        rows.append(f"| {r['config']} | {r['kind']} | {r['round']} | {c(r, 'join')} | {c(r, 'add')} | "
                    f"{c(r, 'leave')} | {'; '.join(notes)} |")
    return "\n".join(rows)


def problems(results: list[dict], infos: list[dict]) -> list[str]:
    out = []
    for r in results:
        tag = f"{r['config']}/{r['kind']}/round {r['round']}"
        if "failed" in r:
            out.append(f"{tag}: {r['failed']}")
        for o in r["overlaps"]:
            out.append(f"{tag}: overlap: {o}")
        for s in SCENARIOS:
            if s in r and r[s]["lost"]:
                out.append(f"{tag}: {r[s]['lost']} lost-partitions callback(s) in {s}")
        if r.get("stuck_close"):
            out.append(f"{tag}: close() did not return within 30 s for {r['stuck_close']}")
    for i in infos:
        if i["tracebacks"]:
            out.append(f"broker ({i['config']}) logged {i['tracebacks']} traceback(s)")
    return out


def results_block(results: list[dict], infos: list[dict], args, m: dict, when: str, wall: float) -> str:
    try:
        import kafka
        kp = kafka.__version__
    except ImportError:
        kp = "?"
    shown, skip = [], False
    for a in sys.argv[1:]:
        if skip or a == "--write":
            skip = False
            continue
        if a == "--json":
            skip = True
            continue
        if not a.startswith("--json="):
            shown.append(a)
    cmd = "python bench/rebalance.py " + " ".join(shown)
    lines = [BEGIN, "_Generated by `bench/rebalance.py --write`; rerun it to replace this block._", "",
             f"**Run:** {when} UTC, `{cmd.strip()}`, {wall:.0f} s wall time.",
             f"**Machine:** {m['cpus']} cores ({m['cpu']}), Linux {m['kernel']}; Python {m['python']}; "
             f"confluent-kafka {m['confluent_kafka']} / librdkafka {m['librdkafka']}; kafka-python {kp}; "
             f"Strata at {m['commit']}.",
             f"**Workload:** {PARTITIONS} partitions; 3 members, then a 4th joins, then the first leaves; "
             f"{args.rounds} round(s) per client (after {args.warmup} warm-up round(s)), "
             f"{args.default_rounds} with defaults. Times in ms, median / max over the rounds."]
    for cfg, n in (("fast", args.rounds), ("delay", args.rounds if args.delay else 0),
                   ("defaults", args.default_rounds)):
        if not n or not any(r["config"] == cfg for r in results):
            continue
        ov = ", ".join(f"`{k}={v}`" for k, v in CONFIGS[cfg]["broker"].items())
        cl = ", ".join(f"`{k}={v}`" for k, v in CONFIGS[cfg]["classic"].items()) or "librdkafka/kafka-python defaults"
        lines += ["", f"**{CONFIG_TITLE[cfg]}.** Broker: {ov}. Classic clients: {cl}.", "",
                  summary_table(results, cfg, args.kinds)]
    lines += ["", "CPU during each configuration (100% = one core; \"other\" is everything else on the machine, the "
              "noise indicator): " + "; ".join(
                  f"{i['config']}: broker {100 * i['cpu']['broker']:.0f}%, clients {100 * i['cpu']['client']:.0f}%, "
                  f"other {100 * i['cpu']['other']:.0f}%" for i in infos if "cpu" in i) + "."]
    found = problems(results, infos)
    lines += ["", "Problems seen: " + ("none (no overlapping assignments, no lost partitions, no failed or stuck "
                                       "rebalances, no broker tracebacks)." if not found else "")]
    lines += [f"- {p}" for p in found[:20]]
    lines += ["", "<details><summary>Every round</summary>", "", rounds_table(results), "", "</details>", END]
    return "\n".join(lines)


SECTION_HEAD = "## Consumer group rebalance"


def write_doc(block: str) -> None:
    """Replace the marked block (re-reading the file now, so concurrent edits elsewhere survive); without markers,
    add a bare section before "## Tiered storage" (or at the end)."""
    write_results(DOC, BEGIN, END, block, f"{SECTION_HEAD}\n\n`bench/rebalance.py` (see its docstring).\n\n",
                  before="## Tiered storage")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="measured rounds per client, fast and delay configs (5)")
    ap.add_argument("--default-rounds", type=int, default=3, help="rounds with Kafka's defaults (3; 0 skips)")
    ap.add_argument("--no-delay", dest="delay", action="store_false",
                    help="skip the group.initial.rebalance.delay.ms=3000 configuration")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured rounds per client and broker (1)")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    ap.add_argument("--smoke", action="store_true",
                    help="quick check: 1 round, fast configuration only, no warm-up")
    ap.add_argument("--settle-window", type=float, default=None,
                    help="seconds the target state must hold with no callback (default 1 + heartbeat interval)")
    ap.add_argument("--scenario-timeout", type=float, default=60.0, help="limit per scenario in seconds (60)")
    ap.add_argument("--settle", type=float, default=10.0,
                    help="before each broker wait up to this many seconds for the machine to go idle (10; 0 = no)")
    ap.add_argument("--trace", action="store_true", help="print every callback of every round with its time")
    ap.add_argument("--json", metavar="PATH", help="also write every round as JSON")
    ap.add_argument("--write", action="store_true", help=f"replace the results block of {DOC.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    args.kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not args.kinds or any(k not in KINDS for k in args.kinds):
        ap.error(f"--kinds: choose from {', '.join(KINDS)}")
    if args.smoke:
        args.rounds, args.default_rounds, args.warmup, args.delay = 1, 0, 0, False
    if args.write and args.smoke:
        ap.error("--write wants a full run, not --smoke")
    if not 1 <= args.rounds <= 50:
        ap.error("--rounds 1..50")

    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    t_start = time.monotonic()
    results: list[dict] = []
    infos = [run_config("fast", args.rounds, args, results)]
    if args.delay:
        infos.append(run_config("delay", args.rounds, args, results))
    if args.default_rounds > 0:
        infos.append(run_config("defaults", args.default_rounds, args, results))
    wall = time.monotonic() - t_start
    block = results_block(results, infos, args, pf.machine(), when, wall)
    print()
    print(block)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": {k: v for k, v in vars(args).items()}, "brokers": infos,
                                               "rounds": results}, indent=2, default=str))
    if args.write:
        write_doc(block)
        print(f"updated {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
