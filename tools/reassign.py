"""`strata reassign`: kafka-reassign-partitions.sh's verbs, JSON files, output and messages (Kafka's
ReassignPartitionsCommand), over AlterPartitionReassignments / ListPartitionReassignments (KIP-455).

- `--generate`: a proposed assignment of some topics' partitions over a broker list (AdminUtils' placement, rack
  aware unless `--disable-rack-aware`), printed next to the current one; nothing changes.
- `--execute`: start the moves of a reassignment file, printing the current assignment to keep for a rollback.
- `--verify`: whether each partition of the file is still moving; with `--progress` it polls until every one is
  done, one line per poll saying how many bytes each added replica has copied of the leader's log (DescribeLogDirs
  to each broker, what kafka-log-dirs.sh reads), then prints the final status.
- `--cancel`: move the file's partitions that are still moving back to their replicas from before; `--list`: the
  moves under way in the cluster.

Left out, with a clear refusal: `--throttle` (Strata has no replication quotas) and log_dirs other than "any" (one
log directory per broker, no AlterReplicaLogDirs). Errors exit 1 as Kafka's tool does.
"""
from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from tools.admin_client import AdminClient, AdminError, error_name
from metadata.placement import place_replicas
from protocol.client import BrokerConnection, ConnectionFailed

ACTIONS = ("generate", "execute", "verify", "cancel", "list")
# What each action takes besides --bootstrap-server (Kafka's requiredArgs and permittedArgs).
REQUIRED = {"generate": ("topics_to_move_json_file", "broker_list"), "execute": ("reassignment_json_file",),
            "verify": ("reassignment_json_file",), "cancel": ("reassignment_json_file",), "list": ()}
PERMITTED = {"generate": ("disable_rack_aware",), "execute": ("additional", "throttle"),
             "verify": ("progress", "progress_interval_ms"), "cancel": (), "list": ()}
OPTIONS = ("reassignment_json_file", "topics_to_move_json_file", "broker_list", "disable_rack_aware", "throttle",
           "additional", "progress", "progress_interval_ms")

CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one. The --additional flag can also be used to "
    "change the throttle by resubmitting the current reassignment.")
ANY_LOG_DIR = "any"
TIMEOUT_MS = 30000


def add_parser(sub) -> None:
    p = sub.add_parser("reassign", help="move partitions between brokers (like kafka-reassign-partitions.sh)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    for a in ACTIONS:
        p.add_argument(f"--{a}", action="store_true")
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help='{"version":1,"partitions":[{"topic":"foo","partition":1,"replicas":[1,2,3]}]}')
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help='{"version":1,"topics":[{"topic":"foo"}]}')
    p.add_argument("--broker-list", metavar="1,2,3", help="the brokers --generate places replicas on")
    p.add_argument("--disable-rack-aware", action="store_true", default=None)
    p.add_argument("--throttle", type=int, metavar="BYTES/SEC", help="not supported: Strata has no replication quotas")
    p.add_argument("--additional", action="store_true", default=None,
                   help="--execute while other reassignments are in progress")
    p.add_argument("--progress", action="store_true", default=None,
                   help="--verify polls until done, one line per poll with each added replica's bytes copied")
    p.add_argument("--progress-interval-ms", type=int, metavar="MS", help="time between --progress polls (1000)")
    p.set_defaults(run=run)


def _option(name: str) -> str:
    return "[" + name.replace("_", "-") + "]"


def _check_args(args: argparse.Namespace) -> str:
    """The action, or AdminError with Kafka's message for a wrong combination (validateAndParseArgs)."""
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise AdminError("Command must include exactly one action: " + ", ".join(f"--{a}" for a in ACTIONS))
    action = actions[0]
    for name in REQUIRED[action]:
        if getattr(args, name) is None:
            raise AdminError(f'Missing required argument "{_option(name)}"')
    for name in OPTIONS:
        if getattr(args, name) is not None and name not in REQUIRED[action] + PERMITTED[action]:
            raise AdminError(f'Option "{_option(name)}" can\'t be used with action "{_option(action)}"')
    if args.throttle is not None:
        raise AdminError("--throttle is not supported: Strata brokers have no replication quotas "
                         "(leader/follower.replication.throttled.rate); nothing was started")
    if args.progress_interval_ms is not None and (args.progress_interval_ms <= 0 or not args.progress):
        raise AdminError("--progress-interval-ms needs --progress and a positive number of milliseconds")
    return action


async def run(args: argparse.Namespace, out) -> None:
    action = _check_args(args)
    client = AdminClient.for_args(args)
    try:
        if action == "generate":
            await _generate(client, _read(args.topics_to_move_json_file), args.broker_list,
                            not args.disable_rack_aware, out)
        elif action == "execute":
            await _execute(client, _read(args.reassignment_json_file), bool(args.additional), out)
        elif action == "verify":
            await _verify(client, _read(args.reassignment_json_file), bool(args.progress),
                          (args.progress_interval_ms or 1000) / 1000, out)
        elif action == "cancel":
            await _cancel(client, _read(args.reassignment_json_file), out)
        else:
            await _list(client, out)
    finally:
        client.close()


# ---- the JSON files (Kafka's parseTopicsData / parsePartitionReassignmentData) ------------------------------------
def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise AdminError(f"Cannot read {path}: {e.strerror or e}") from None


def _loads(text: str):
    try:
        return json.loads(text)
    except ValueError as e:
        raise AdminError(f"The input string is not a valid JSON: {e}") from None


_KINDS = {"Int": int, "String": str, "JSON object": dict, "JSON array": list}


def _as(value, kind: str):
    ok = isinstance(value, _KINDS[kind]) and not isinstance(value, bool)
    if not ok:
        raise AdminError(f"Expected `{kind}` value, received {json.dumps(value)}")
    return value


def _field(obj: dict, name: str, kind: str):
    if name not in obj:
        raise AdminError(f"No such field exists: `{name}`")
    return _as(obj[name], kind)


def _version(js: dict) -> None:
    version = _as(js["version"], "Int") if "version" in js else 1
    if version != 1:
        raise AdminError(f"Not supported version field value {version}")


def parse_topics(text: str) -> list[str]:
    js = _as(_loads(text), "JSON object")
    _version(js)
    return [_field(_as(t, "JSON object"), "topic", "String") for t in _as(js.get("topics", []), "JSON array")]


def parse_reassignment(text: str) -> list[tuple[tuple[str, int], list[int]]]:
    """((topic, partition), replicas) in file order, duplicates kept so that --execute can refuse them."""
    js = _as(_loads(text), "JSON object")
    _version(js)
    out = []
    for entry in _as(js.get("partitions", []), "JSON array"):
        entry = _as(entry, "JSON object")
        topic, partition = _field(entry, "topic", "String"), _field(entry, "partition", "Int")
        replicas = [_as(r, "Int") for r in _field(entry, "replicas", "JSON array")]
        log_dirs = [_as(d, "String") for d in _field(entry, "log_dirs", "JSON array")] \
            if "log_dirs" in entry else [ANY_LOG_DIR] * len(replicas)
        if len(log_dirs) != len(replicas):
            raise AdminError(f"Size of replicas list {_jlist(replicas)} is different from size of log dirs list "
                             f"{_jlist(log_dirs)} for partition {topic}-{partition}")
        if any(d != ANY_LOG_DIR for d in log_dirs):
            raise AdminError(f'Partition {topic}-{partition}: log_dirs other than "any" are not supported (one log '
                             f"directory per broker, no AlterReplicaLogDirs)")
        out.append(((topic, partition), replicas))
    return out


def _jlist(items) -> str:
    return "[" + ", ".join(map(str, items)) + "]"


def _tp(tp: tuple[str, int]) -> str:
    return f"{tp[0]}-{tp[1]}"


def format_reassignment_json(assignment: dict[tuple[str, int], list[int]]) -> str:
    """Kafka's formatAsReassignmentJson: compact, sorted by topic and partition."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(assignment[(t, p)]),
         "log_dirs": [ANY_LOG_DIR] * len(assignment[(t, p)])} for t, p in sorted(assignment)]},
        separators=(",", ":"))


def _check_execute(parts: list[tuple[tuple[str, int], list[int]]]) -> dict[tuple[str, int], list[int]]:
    """Kafka's parseExecuteAssignmentArgs checks, in its order."""
    if not parts:
        raise AdminError("Partition reassignment list cannot be empty")
    if any(not replicas for _, replicas in parts):
        raise AdminError("Partition replica list cannot be empty")
    tps = [tp for tp, _ in parts]
    dup = sorted({tp for tp in tps if tps.count(tp) > 1})
    if dup:
        raise AdminError("Partition reassignment contains duplicate topic partitions: " + ",".join(map(_tp, dup)))
    repeated = [(tp, sorted({r for r in replicas if replicas.count(r) > 1})) for tp, replicas in parts]
    repeated = [(tp, rs) for tp, rs in repeated if rs]
    if repeated:
        raise AdminError("Partition replica lists may not contain duplicate entries: " + ". ".join(
            f"{_tp(tp)} contains multiple entries for {','.join(map(str, rs))}" for tp, rs in repeated))
    return dict(parts)


# ---- what the cluster says ---------------------------------------------------------------------------------------
async def _brokers(client: AdminClient) -> dict[int, str | None]:
    """The unfenced brokers with their racks (DescribeCluster, as Admin.describeCluster().nodes())."""
    dc = await client.send(60, 0, {"include_cluster_authorized_operations": False})
    if dc.error_code:
        raise AdminError(dc.error_message or error_name(dc.error_code))
    return {b.broker_id: b.rack for b in dc.brokers}


async def _replicas_of_topics(client: AdminClient, topics: list[str]) -> dict[tuple[str, int], list[int]]:
    """Every partition's replicas (Kafka's getReplicaAssignmentForTopics); an unknown topic is an error."""
    md = await client.metadata(sorted(set(topics)))
    out = {}
    for t in md.topics:
        if t.error_code:
            if error_name(t.error_code) == "UNKNOWN_TOPIC_OR_PARTITION":
                raise AdminError(f"Topic {t.name} not found.")
            raise AdminError(f"Topic {t.name}: {error_name(t.error_code)}")
        out.update({(t.name, p.partition_index): list(p.replica_nodes) for p in t.partitions})
    return out


async def _reassigning(client: AdminClient, tps=None) -> dict[tuple[str, int], object]:
    """The reassignments in progress (ListPartitionReassignments), of `tps` or all."""
    topics = None
    if tps is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        topics = [{"name": t, "partition_indexes": sorted(set(ps))} for t, ps in sorted(by_topic.items())]
    resp = await client.send(46, 0, {"timeout": TIMEOUT_MS, "topics": topics})
    if resp.error_code:
        raise AdminError(resp.error_message or error_name(resp.error_code))
    return {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions}


async def _alter(client: AdminClient, targets: dict[tuple[str, int], list[int] | None]) -> dict:
    """AlterPartitionReassignments (None cancels); the partitions that failed, with their messages."""
    by_topic: dict[str, list[dict]] = {}
    for (t, p), replicas in sorted(targets.items()):
        by_topic.setdefault(t, []).append({"partition_index": p, "replicas": replicas})
    resp = await client.send(45, 0, {"timeout": TIMEOUT_MS, "topics": [
        {"name": t, "partitions": parts} for t, parts in by_topic.items()]})
    if resp.error_code:
        raise AdminError(resp.error_message or error_name(resp.error_code))
    return {(t.name, p.partition_index): p.error_message or error_name(p.error_code)
            for t in resp.responses for p in t.partitions if p.error_code}


# ---- the actions ------------------------------------------------------------------------------------------------
async def _generate(client: AdminClient, topics_json: str, broker_list: str, rack_aware: bool, out) -> None:
    wanted = []
    for b in broker_list.split(","):
        try:
            wanted.append(int(b.strip()))
        except ValueError:
            raise AdminError(f'For input string: "{b.strip()}" (--broker-list takes broker ids like "1,2,3")') \
                from None
    dup = sorted({b for b in wanted if wanted.count(b) > 1})
    if dup:
        raise AdminError(f"Broker list contains duplicate entries: {_jlist(dup)}")
    topics = parse_topics(topics_json)
    dup_topics = sorted({t for t in topics if topics.count(t) > 1})
    if dup_topics:
        raise AdminError(f"List of topics to reassign contains duplicate entries: {_jlist(dup_topics)}")
    current = await _replicas_of_topics(client, topics) if topics else {}
    cluster = await _brokers(client)
    racks = {b: (cluster[b] if rack_aware else None) for b in wanted if b in cluster}
    rackless = sum(1 for r in racks.values() if r is None)
    if rack_aware and 0 < rackless < len(racks):
        raise AdminError("Not all brokers have rack information. Add --disable-rack-aware in command line to make "
                         "replica assignment without rack information.")
    proposed = {}
    for topic in sorted({t for t, _ in current}):
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        if rf > len(racks):
            raise AdminError(f"Replication factor: {rf} larger than available brokers: {len(racks)}.")
        for p, replicas in zip(parts, place_replicas(racks, len(parts), rf)):
            proposed[(topic, p)] = replicas
    print(f"Current partition replica assignment\n{format_reassignment_json(current)}\n", file=out)
    print(f"Proposed partition reassignment configuration\n{format_reassignment_json(proposed)}", file=out)


async def _execute(client: AdminClient, text: str, additional: bool, out) -> None:
    proposed = _check_execute(parse_reassignment(text))
    if not additional and await _reassigning(client):
        raise AdminError(CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE)
    live = await _brokers(client)
    unknown = sorted({b for replicas in proposed.values() for b in replicas if b not in live})
    if unknown:
        raise AdminError(f"Unknown broker id {unknown[0]}")
    current = await _replicas_of_topics(client, [t for t, _ in proposed])
    missing = [tp for tp in sorted(proposed) if tp not in current]
    if missing:
        raise AdminError("Unable to find partition: " + ", ".join(map(_tp, missing)))
    print("Current partition replica assignment\n\n" +
          format_reassignment_json({tp: current[tp] for tp in proposed}) +
          "\n\nSave this to use as the --reassignment-json-file option during rollback", file=out)
    errors = await _alter(client, proposed)
    if errors:
        raise AdminError("Error reassigning partition(s):\n" +
                         "\n".join(f"{_tp(tp)}: {msg}" for tp, msg in sorted(errors.items())))
    print(f"Successfully started partition reassignment{'' if len(proposed) == 1 else 's'} for " +
          ",".join(map(_tp, sorted(proposed))), file=out)


async def _states(client: AdminClient, targets: dict) -> tuple[dict, dict]:
    """Kafka's findPartitionReassignmentStates: tp -> (current replicas, target, done), and the moves under way."""
    moving = await _reassigning(client)
    states = {}
    rest = [tp for tp in targets if tp not in moving]
    current = {}
    if rest:
        md = await client.metadata(sorted({t for t, _ in rest}))
        current = {(t.name, p.partition_index): list(p.replica_nodes) for t in md.topics if not t.error_code
                   for p in t.partitions}
    for tp, target in targets.items():
        if tp in moving:
            states[tp] = (list(moving[tp].replicas), target, False)
        else:                                  # an unknown topic or partition counts as done with no replicas
            states[tp] = (current.get(tp, []), target, True)
    return states, moving


def _status(states: dict) -> str:
    lines = ["Status of partition reassignment:"]
    for tp in sorted(states):
        cur, target, done = states[tp]
        if not done:
            lines.append(f"Reassignment of partition {_tp(tp)} is still in progress.")
        elif cur == target:
            lines.append(f"Reassignment of partition {_tp(tp)} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {_tp(tp)}, but replica set is "
                         f"{','.join(map(str, cur))} rather than {','.join(map(str, target))}.")
    return "\n".join(lines)


async def _verify(client: AdminClient, text: str, progress: bool, interval: float, out) -> None:
    targets = dict(parse_reassignment(text))
    if not progress:
        states, _ = await _states(client, targets)
        print(_status(states), file=out)
        return
    sizes = LogDirSizes()
    try:
        while True:
            states, moving = await _states(client, targets)
            print(await _progress_line(client, sizes, states, moving), file=out, flush=True)
            if all(done for _, _, done in states.values()):
                break
            await asyncio.sleep(interval)
    finally:
        sizes.close()
    print(_status(states), file=out)


async def _cancel(client: AdminClient, text: str, out) -> None:
    targets = [tp for tp, _ in parse_reassignment(text)]
    active = sorted(await _reassigning(client, targets))
    if active:
        errors = await _alter(client, {tp: None for tp in active})
        if errors:
            raise AdminError(f"Error cancelling partition reassignment{'' if len(errors) == 1 else 's'} for:\n" +
                             "\n".join(f"{_tp(tp)}: {msg}" for tp, msg in sorted(errors.items())))
        print(f"Successfully cancelled partition reassignment{'' if len(active) == 1 else 's'} for: " +
              ",".join(map(_tp, active)), file=out)
    else:
        print("None of the specified partition reassignments are active.", file=out)
    print("None of the specified partition moves are active.", file=out)     # no log dir moves here


async def _list(client: AdminClient, out) -> None:
    moving = await _reassigning(client)
    if not moving:
        print("No partition reassignments found.", file=out)
        return
    print("Current partition reassignments:", file=out)
    for tp in sorted(moving):
        r = moving[tp]
        line = f"{_tp(tp)}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding_replicas:
            line += f" adding: {','.join(map(str, r.adding_replicas))}."
        if r.removing_replicas:
            line += f" removing: {','.join(map(str, r.removing_replicas))}."
        print(line, file=out)


# ---- --progress: how far each added replica has copied -----------------------------------------------------------
class LogDirSizes:
    """DescribeLogDirs to single brokers (each answers for its own replicas), over connections kept between polls."""

    def __init__(self):
        self._conns: dict[tuple[str, int], BrokerConnection] = {}

    async def sizes(self, endpoint: tuple[str, int], tps) -> dict[tuple[str, int], int] | None:
        """Partition -> bytes of this broker's replica; None when the broker does not answer."""
        conn = self._conns.get(endpoint)
        if conn is None:
            conn = self._conns[endpoint] = BrokerConnection(*endpoint, client_id="strata-reassign", connect_timeout=2)
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        try:
            resp = await conn.send(35, 4, {"topics": [{"topic": t, "partitions": sorted(ps)}
                                                      for t, ps in sorted(by_topic.items())]}, timeout=10)
        except (ConnectionFailed, OSError, asyncio.TimeoutError):
            conn.close()
            del self._conns[endpoint]
            return None
        return {(t.name, p.partition_index): p.partition_size for d in resp.results if not d.error_code
                for t in d.topics for p in t.partitions if not p.is_future_key}

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"


async def _progress_line(client: AdminClient, sizes: LogDirSizes, states: dict, moving: dict) -> str:
    """`Progress: d/n partitions reassigned`, then for each partition still moving, each added replica's bytes
    against its leader's."""
    done = sum(1 for _, _, d in states.values() if d)
    line = f"Progress: {done}/{len(states)} partitions reassigned"
    active = sorted(tp for tp, (_, _, d) in states.items() if not d)
    if not active:
        return line
    md = await client.metadata(sorted({t for t, _ in active}))
    endpoints = {b.node_id: (b.host, b.port) for b in md.brokers}
    leaders = {(t.name, p.partition_index): p.leader_id for t in md.topics for p in t.partitions}
    wanted: dict[int, list] = {}
    for tp in active:
        for b in [leaders.get(tp, -1), *moving[tp].adding_replicas]:
            if b in endpoints:
                wanted.setdefault(b, []).append(tp)
    answers = dict(zip(wanted, await asyncio.gather(*(sizes.sizes(endpoints[b], tps) for b, tps in wanted.items()))))
    parts = []
    for tp in active:
        leader = leaders.get(tp, -1)
        total = (answers.get(leader) or {}).get(tp)
        shown = []
        for b in moving[tp].adding_replicas:
            got = answers.get(b)
            if got is None:
                shown.append(f"broker {b} unreachable")
            elif tp not in got:
                shown.append(f"broker {b} has no replica yet")
            elif total is None:
                shown.append(f"broker {b} has {_bytes(got[tp])} (leader {leader} unknown)")
            else:
                pct = 100 if total <= 0 else min(100, got[tp] * 100 // total)
                shown.append(f"broker {b} has {_bytes(got[tp])} of {_bytes(total)} ({pct}%)")
        parts.append(f"{_tp(tp)}: " + (", ".join(shown) or "removing replicas " +
                                       ",".join(map(str, moving[tp].removing_replicas))))
    return line + "; " + "; ".join(parts)
