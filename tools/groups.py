"""`strata groups`: Kafka's kafka-consumer-groups.sh (ConsumerGroupCommand) with its option names, checks, messages
and column layouts: --list, --describe (offsets with lag, --members, --state), --reset-offsets, --delete and
--delete-offsets, for classic and KIP-848 consumer groups. The requests and where they go are in group_admin.py.

Where Kafka prints an error and still exits 0 (a missing group, a group that is not inactive), this tool says the same
thing on stderr and exits 1, as the other strata admin tools do; argument errors exit 2 with the usage."""
from __future__ import annotations

import argparse
import asyncio
import datetime
import re
import sys
import time

from tools.admin_client import AdminClient, AdminError
from tools.group_admin import EARLIEST, KAFKA_ERRORS, LATEST, TP, Group, GroupAdmin, kafka_error
from protocol.errors import ErrorCode

MISSING = "-"
ACTIONS = ("list", "describe", "delete", "reset-offsets", "delete-offsets")
SCENARIOS = ("to-offset", "to-datetime", "by-duration", "to-earliest", "to-latest", "to-current", "shift-by")
# GroupState.groupStatesForType(CONSUMER), in the order Kafka declares them.
CONSUMER_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
GROUP_TYPES = ("Classic", "Consumer")
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


def add_parser(sub) -> None:
    p = sub.add_parser("groups", help="list, describe, reset offsets of and delete consumer groups "
                                      "(like kafka-consumer-groups.sh)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    for a in ACTIONS:
        p.add_argument(f"--{a}", action="store_true")
    p.add_argument("--group", action="append", default=[], help="repeatable")
    p.add_argument("--all-groups", action="store_true")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]", help="repeatable")
    p.add_argument("--all-topics", action="store_true")
    p.add_argument("--members", action="store_true")
    p.add_argument("--offsets", action="store_true")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--state", nargs="?", const="", metavar="STATE[,STATE...]")
    p.add_argument("--type", nargs="?", const="", metavar="classic|consumer[,...]")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--execute", action="store_true")
    p.add_argument("--to-offset", type=int, metavar="OFFSET")
    p.add_argument("--shift-by", type=int, metavar="N")
    p.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    p.add_argument("--by-duration", metavar="PnDTnHnMnS")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-current", action="store_true")
    p.add_argument("--timeout", type=int, default=5000, metavar="MS",
                   help="how long to retry a coordinator or leader that is moving or loading (default 5000)")
    p.set_defaults(run=run, parser=p)


def _given(args, name: str) -> bool:
    v = getattr(args, name.replace("-", "_"))
    return v not in (None, False, [])


def check_args(args) -> None:
    """ConsumerGroupCommandOptions.checkArgs, with Kafka's messages; parser.error exits 2 with the usage."""
    fail = args.parser.error
    actions = [a for a in ACTIONS if _given(args, a)]
    if len(actions) != 1:
        fail("Command must include exactly one action: " + ", ".join(f"--{a}" for a in ACTIONS))
    scope = "[all-groups], [group]"
    for opt, allowed in (("members", ("describe",)), ("offsets", ("describe",)), ("verbose", ("describe",)),
                         ("state", ("describe", "list")), ("type", ("list",))):
        if _given(args, opt) and actions[0] not in allowed:
            fail(f"Option(s) [{opt}] are unavailable given other options on the command line")
    if args.describe:
        if not (args.group or args.all_groups):
            fail(f"Option [describe] takes one of these options: {scope}")
        if sum(map(bool, (args.members, args.offsets, args.state is not None))) > 1:
            fail("Option [describe] takes at most one of these options: [members], [offsets], [state]")
        if args.state:
            fail("Option [describe] does not take a value for [state]")
    if args.delete:
        if not (args.group or args.all_groups):
            fail(f"Option [delete] takes one of these options: {scope}")
        if args.topic:
            fail("The consumer does not support topic-specific offset deletion from a consumer group.")
    if args.delete_offsets and not (args.group and args.topic):
        fail("Option [delete-offsets] takes the following options: [group], [topic]")
    if args.reset_offsets:
        if args.dry_run and args.execute:
            fail("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
        if not (args.group or args.all_groups):
            fail(f"Option [reset-offsets] takes one of these options: {scope}")
        chosen = [s for s in SCENARIOS if _given(args, s)]
        if len(chosen) > 1:
            fail(f'Option "[{chosen[0]}]" can\'t be used with option "[{chosen[1]}]"')
        if not chosen:
            fail("Option '[reset-offsets]' requires one of the following scenarios: " +
                 ", ".join(f"[{s}]" for s in SCENARIOS))
        if not (args.all_topics or args.topic):
            fail("One of the reset scopes should be defined: --all-topics, --topic.")
        try:
            args.timestamp = (parse_datetime(args.to_datetime) if args.to_datetime is not None else
                              int(time.time() * 1000) - parse_duration(args.by_duration)
                              if args.by_duration is not None else None)
        except ValueError as e:
            fail(str(e))
    if args.group and args.all_groups:
        fail('Option "[group]" can\'t be used with option "[all-groups]"')
    for opt, used in (("group", "list"), ("topic", "list"), ("topic", "describe")):
        if _given(args, opt) and _given(args, used):
            fail(f'Option "[{opt}]" can\'t be used with option "[{used}]"')
    try:
        args.topic_partitions = [parse_topic_arg(t) for t in args.topic]
        args.states = _choices(args.state, CONSUMER_STATES, "state") if args.list else []
        args.types = _choices(args.type, GROUP_TYPES, "types") if args.list else []
    except ValueError as e:
        fail(str(e))
    if args.reset_offsets and not (args.dry_run or args.execute):      # Kafka's default: a dry run
        print("WARN: No action will be performed as the --execute option is missing. In a future major release, "
              "the default behavior of this command will be to prompt the user before executing the reset rather "
              "than doing a dry run. You should add the --dry-run option explicitly if you are scripting this "
              "command and want to keep the current default behavior without prompting.", file=sys.stderr)


def _choices(value: str | None, valid: tuple[str, ...], what: str) -> list[str]:
    if not value:
        return []
    by_lower = {v.lower(): v for v in valid}
    picked = [by_lower.get(s.strip().lower()) for s in value.split(",")]
    if None in picked:
        raise ValueError(f"Invalid {what} list '{value}'. Valid {what if what == 'types' else 'states'} are: "
                         + ", ".join(valid))
    return list(dict.fromkeys(picked))


def parse_topic_arg(arg: str) -> tuple[str, list[int] | None]:
    """`topic` (all its partitions) or `topic:0,1,2` (GroupOffsetsResetter.parseTopicsWithPartitions)."""
    if ":" not in arg:
        return arg, None
    parts = arg.split(":")
    if len(parts) != 2:
        raise ValueError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    out = []
    for p in parts[1].split(","):
        if not re.fullmatch(r"[+-]?\d+", p.strip()):
            raise ValueError(f"Invalid partition '{p}' specified in topic arg '{arg}'")
        out.append(int(p))
    return parts[0], out


_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})(Z|[+-]\d{2}(?::?\d{2})?)?")


def parse_datetime(value: str) -> int:
    """Kafka's Utils.getDateTime: yyyy-MM-dd'T'HH:mm:ss.SSS with an optional zone (Z, +hh, +hhmm, +hh:mm), UTC when
    none is given; epoch milliseconds."""
    if "T" not in value:
        raise ValueError("Error parsing timestamp. It does not contain a 'T' according to ISO8601 format")
    m = _DATETIME.fullmatch(value)
    try:
        if m is None:
            raise ValueError
        y, mo, d, h, mi, s, ms = map(int, m.groups()[:7])
        zone = m.group(8) or "Z"
        offset = 0 if zone == "Z" else (int(zone[1:3]) * 60 + int(zone[3:].lstrip(":") or 0)) * \
            (-1 if zone[0] == "-" else 1)
        if h > 23 or mi > 59 or s > 59:
            raise ValueError
        when = datetime.datetime(y, mo, d, h, mi, s, ms * 1000,
                                 tzinfo=datetime.timezone(datetime.timedelta(minutes=offset)))
    except ValueError:
        raise ValueError(f'Unparseable date: "{value}"') from None
    return int(when.timestamp() * 1000)


_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?"
                       r"(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def parse_duration(value: str) -> int:
    """java.time.Duration.parse (PnDTnHnMn.nS, each part optional and signed); milliseconds."""
    m = _DURATION.fullmatch(value)
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise ValueError(f"Text cannot be parsed to a Duration: {value}")
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in (2, 4, 5, 6))
    millis = int((m.group(7) or "").ljust(3, "0")[:3]) * (-1 if (m.group(6) or "").startswith("-") else 1)
    ms = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000 + millis
    return -ms if m.group(1) == "-" else ms


async def run(args: argparse.Namespace, out) -> None:
    check_args(args)
    client = AdminClient.for_args(args)
    admin = GroupAdmin(client, args.timeout)
    try:
        if args.list:
            await _list(admin, args, out)
        elif args.describe:
            await _describe(admin, args, out)
        elif args.delete:
            await _delete(admin, args, out)
        elif args.reset_offsets:
            await _reset(admin, args, out)
        else:
            await _delete_offsets(admin, args, out)
    finally:
        client.close()


async def _group_ids(admin: GroupAdmin, args) -> list[str]:
    if args.all_groups:
        return [g for g, _, _ in await admin.list_groups([], [])]
    return sorted(set(args.group))


# ---- --list ---------------------------------------------------------------------------------------------------------
async def _list(admin: GroupAdmin, args, out) -> None:
    groups = await admin.list_groups(args.states, [t.lower() for t in args.types])
    if args.state is None and args.type is None:
        for g, _, _ in groups:
            print(g, file=out)
        return
    fmt = "%-" + str(max([15] + [len(g) for g, _, _ in groups]) + 10) + "s"
    columns = [("GROUP", 0)] + ([("TYPE", 1)] if args.type is not None else []) + \
        ([("STATE", 2)] if args.state is not None else [])
    fmt += " %-20s" * (len(columns) - 1)
    print(fmt % tuple(name for name, _ in columns), file=out)
    for g in groups:
        print(fmt % tuple(g[i] for _, i in columns), file=out)


# ---- --describe -----------------------------------------------------------------------------------------------------
def _should_print(group: Group, rows: int) -> bool:
    """ConsumerGroupCommand.shouldPrintMemberState: the Empty and rebalancing notices go to stderr."""
    if group.state == "Empty":
        print(f"\nConsumer group '{group.group_id}' has no active members.", file=sys.stderr)
    elif group.state in REBALANCING:
        print(f"\nWarning: Consumer group '{group.group_id}' is rebalancing.", file=sys.stderr)
    return rows > 0


async def _describe(admin: GroupAdmin, args, out) -> None:
    ids = await _group_ids(admin, args)
    described = await asyncio.gather(*(admin.describe(g) for g in ids))
    missing = [g for g, d in zip(ids, described) if d is None]
    for group in (d for d in described if d is not None):
        if args.members:
            _print_members(group, args.verbose, out)
        elif args.state is not None:
            _print_state(group, args.verbose, out)
        else:
            await _print_offsets(admin, group, args.verbose, out)
    if missing:
        raise AdminError(" ".join(f"Consumer group '{g}' does not exist." for g in missing))


async def _print_offsets(admin: GroupAdmin, group: Group, verbose: bool, out) -> None:
    """Each member's partitions (members with the most first), then committed partitions no member has."""
    committed = await admin.committed(group.group_id)
    owners: list[tuple[TP, tuple[str, str, str]]] = []
    for m in sorted((m for m in group.members if m.assignment), key=lambda m: -len(m.assignment)):
        owners += [(tp, (m.member_id, m.host, m.client_id)) for tp in sorted(set(m.assignment))]
    assigned = {tp for tp, _ in owners}
    owners += [(tp, (MISSING,) * 3) for tp in sorted(committed) if tp not in assigned]
    ends = await admin.log_offsets([tp for tp, _ in owners], LATEST)
    rows = []
    for (topic, partition), (member, host, client) in owners:
        offset, epoch = committed.get((topic, partition), (None, -1))
        end = ends.get((topic, partition))
        lag = end - offset if offset is not None and end is not None else None
        rows.append([group.group_id, topic, str(partition), str(epoch) if epoch >= 0 else MISSING,
                     _dash(offset), _dash(end), _dash(lag), member, host, client])
    if not _should_print(group, len(rows)):
        return
    g, t, c, h = (max([15] + [len(r[i]) for r in rows]) for i in (0, 1, 7, 8))
    header = ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
              "CONSUMER-ID", "HOST", "CLIENT-ID"]
    fmt = f"\n%-{g}s %-{t}s %-10s " + ("%-15s " if verbose else "") + f"%-15s %-15s %-15s %-{c}s %-{h}s %s"
    if not verbose:
        header.pop(3)
        rows = [r[:3] + r[4:] for r in rows]
    out.write(fmt % tuple(header) + "".join(fmt % tuple(r) for r in rows) + "\n")


def _dash(v) -> str:
    return MISSING if v is None else str(v)


def _assignment_string(tps) -> str:
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return ";".join(sorted(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in by_topic.items())) or MISSING


def _print_members(group: Group, verbose: bool, out) -> None:
    g, c, i, h, cl, ca, ta = 15, 15, 17, 15, 15, 20, 20
    with_instance = False
    if _should_print(group, len(group.members)):
        for m in group.members:
            g, c, h, cl = max(g, len(group.group_id)), max(c, len(m.member_id)), max(h, len(m.host)), \
                max(cl, len(m.client_id))
            i = max(i, len(m.instance_id or ""))
            with_instance = with_instance or bool(m.instance_id)
            ca, ta = max(ca, len(_assignment_string(m.assignment))), max(ta, len(_assignment_string(m.target)))
    fmt = f"%-{g}s %-{c}s " + (f"%-{i}s " if with_instance else "") + f"%-{h}s %-{cl}s %-15s "
    extra = f"%-15s %-{ca}s %-15s %-{ta}s"
    header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + \
        ["HOST", "CLIENT-ID", "#PARTITIONS"]
    text = "\n" + fmt % tuple(header)
    if verbose:
        text += extra % ("CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT")
    text += "\n"
    for m in group.members:
        text += fmt % tuple([group.group_id, m.member_id] + ([m.instance_id or ""] if with_instance else []) +
                            [m.host, m.client_id, len(m.assignment)])
        if verbose:
            text += extra % (_dash(m.epoch), _assignment_string(m.assignment), _dash(group.target_epoch),
                             _assignment_string(m.target))
        text += "\n"
    out.write(text)


def _print_state(group: Group, verbose: bool, out) -> None:
    if not _should_print(group, 1):
        return
    node_id, host, port = group.coordinator
    coordinator = f"{host}:{port}  ({node_id})"
    g, c = max(15, len(group.group_id)), max(25, len(coordinator))
    strategy = group.assignor or MISSING
    if verbose:
        fmt = f"\n%-{g}s %-{c}s %-20s %-20s %-15s %-25s %s"
        out.write(fmt % ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                         "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS") +
                  fmt % (group.group_id, coordinator, strategy, group.state, _dash(group.group_epoch),
                         _dash(group.target_epoch), len(group.members)) + "\n")
    else:
        fmt = f"\n%-{g}s %-{c}s %-20s %-20s %s"
        out.write(fmt % ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS") +
                  fmt % (group.group_id, coordinator, strategy, group.state, len(group.members)) + "\n")


# ---- --delete -------------------------------------------------------------------------------------------------------
async def _delete(admin: GroupAdmin, args, out) -> None:
    ids = await _group_ids(admin, args)
    errors = dict(zip(ids, await asyncio.gather(*(admin.delete_group(g) for g in ids))))
    done = [g for g in ids if not errors[g]]
    if len(done) == len(ids):
        print(f"Deletion of requested consumer groups ({', '.join(repr(g) for g in done)}) was successful.",
              file=out)
        return
    if done:
        print(f"These consumer groups were deleted successfully: {', '.join(repr(g) for g in done)}", file=out)
    raise AdminError("Deletion of some consumer groups failed:\n" + "\n".join(
        f"* Group '{g}' could not be deleted due to: {kafka_error(errors[g])}" for g in ids if errors[g]))


# ---- --delete-offsets -----------------------------------------------------------------------------------------------
async def _delete_offsets(admin: GroupAdmin, args, out) -> None:
    group = args.group[0]
    status: dict[tuple[str, int], str | None] = {}
    whole = [t for t, ps in args.topic_partitions if ps is None]
    known = await admin.partitions(whole) if whole else {}
    tps = list(dict.fromkeys([(t, p) for t, ps in args.topic_partitions if ps is not None for p in ps] +
                             [(t, p) for t in whole if t in known for p in sorted(known[t])]))
    for t in whole:
        if t not in known:
            status[(t, -1)] = kafka_error(ErrorCode.unknown_topic_or_partition)
    top = 0
    if tps:
        top, errors = await admin.delete_offsets(group, tps)
        for tp in tps:
            err = top or errors.get(tp, 0)
            status[tp] = kafka_error(err) if err else None
    if top in (ErrorCode.invalid_group_id, ErrorCode.group_id_not_found, ErrorCode.non_empty_group,
               ErrorCode.group_authorization_failed):
        message = KAFKA_ERRORS.get(top, (None, kafka_error(top)))[1]      # Errors.message(), as Kafka prints it
    elif top:
        message = f"Encountered some unknown error: {kafka_error(top)}"
    elif any(status.values()):
        message = "Encountered some partition-level error, see the follow-up details."
    else:
        message = None
        print(f"Request succeeded for deleting offsets from group {group}.", file=out)
    fmt = "\n%-" + str(max([15] + [len(t) for t, _ in status])) + "s %-10s %-15s"
    out.write(fmt % ("TOPIC", "PARTITION", "STATUS") + "".join(
        fmt % (t, p if p >= 0 else MISSING, "Successful" if e is None else f"Error: {e}")
        for (t, p), e in sorted(status.items(), key=lambda kv: kv[0][0] + str(kv[0][1]))) + "\n")
    if message:
        raise AdminError(message)


# ---- --reset-offsets ------------------------------------------------------------------------------------------------
async def _reset(admin: GroupAdmin, args, out) -> None:
    """Only groups that are Empty or do not exist yet (a reset creates them), as Kafka: a live member would
    overwrite the new offsets with its own commits."""
    planned: dict[str, dict[TP, int]] = {}
    refused = []
    for group in await _group_ids(admin, args):
        desc = await admin.describe(group)
        if desc is not None and desc.state not in ("Empty", "Dead"):
            refused.append(f"Assignments can only be reset if the group '{group}' is inactive, but the current "
                           f"state is {desc.state}.")
            continue
        planned[group] = await _plan(admin, args, group)
        if args.execute:
            errors = await admin.commit(group, planned[group])
            failed = {tp: e for tp, e in errors.items() if e}
            if failed:
                (t, p), e = sorted(failed.items())[0]
                raise AdminError(f"Committing the new offsets of group '{group}' failed for {len(failed)} "
                                 f"partitions, {t}-{p}: {kafka_error(e)}")
    rows = [(g, t, p, off) for g, plan in sorted(planned.items()) for (t, p), off in sorted(plan.items())]
    if rows:
        g = max([15] + [len(r[0]) for r in rows])
        t = max([15] + [len(r[1]) for r in rows])
        fmt = f"\n%-{g}s %-{t}s %-10s %s"
        out.write(fmt % ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET") + "".join(fmt % r for r in rows) + "\n")
    if refused:
        raise AdminError("\n".join(refused))


async def _plan(admin: GroupAdmin, args, group: str) -> dict[TP, int]:
    """GroupOffsetsResetter: the partitions in scope and each one's new offset."""
    committed = {tp: off for tp, (off, _) in (await admin.committed(group)).items()}
    if args.all_topics:
        tps = sorted(committed)
    else:
        tps = await _partitions_to_reset(admin, args.topic_partitions)
    if not tps:
        return {}
    if args.to_offset is not None:
        return await _clamp(admin, {tp: args.to_offset for tp in tps})
    if args.shift_by is not None:
        for tp in tps:
            if tp not in committed:
                raise AdminError(f"Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no current "
                                 "committed offset")
        return await _clamp(admin, {tp: committed[tp] + args.shift_by for tp in tps})
    if args.to_current:
        ends = await _offsets(admin, [tp for tp in tps if tp not in committed], LATEST, "ending")
        return {tp: committed[tp] if tp in committed else ends[tp] for tp in tps}
    if args.to_earliest or args.to_latest:
        return await _offsets(admin, tps, EARLIEST if args.to_earliest else LATEST,
                              "starting" if args.to_earliest else "ending")
    found = await admin.log_offsets(tps, args.timestamp)
    empty = [tp for tp in tps if found.get(tp) == -1]
    for t, p in empty:
        print(f"\nWarn: Partition {p} from topic {t} is empty. Falling back to latest known offset.", file=sys.stderr)
    found.update(await _offsets(admin, empty, LATEST, "ending"))
    for t, p in tps:
        if found.get((t, p)) is None:
            raise AdminError(f"Error getting offset by timestamp of topic partition: {t}-{p}")
    return {tp: found[tp] for tp in tps}


async def _partitions_to_reset(admin: GroupAdmin, topic_args) -> list[TP]:
    """The partitions named by --topic (a topic alone means all of its partitions); each must exist and have a
    leader (GroupOffsetsResetter.checkAllTopicPartitionsValid)."""
    known = await admin.partitions({t for t, _ in topic_args})
    for t, ps in topic_args:
        if ps is None and t not in known:
            raise AdminError(f"{kafka_error(ErrorCode.unknown_topic_or_partition)} (topic '{t}')")
    tps = list(dict.fromkeys([(t, p) for t, ps in topic_args if ps is not None for p in ps] +
                             [(t, p) for t, ps in topic_args if ps is None for p in sorted(known[t])]))
    absent = [f"{t}-{p}" for t, p in tps if p not in known.get(t, {})]
    if absent:
        raise AdminError(f'The partitions "{",".join(absent)}" do not exist')
    leaderless = [f"{t}-{p}" for t, p in tps if known[t][p] < 0]
    if leaderless:
        raise AdminError(f'The partitions "{",".join(leaderless)}" have no leader')
    return tps


async def _offsets(admin: GroupAdmin, tps: list[TP], spec: int, which: str) -> dict[TP, int]:
    found = await admin.log_offsets(tps, spec) if tps else {}
    for t, p in tps:
        if found.get((t, p)) is None:
            raise AdminError(f"Error getting {which} offset of topic partition: {t}-{p}")
    return found


async def _clamp(admin: GroupAdmin, wanted: dict[TP, int]) -> dict[TP, int]:
    """GroupOffsetsResetter.checkOffsetsRange: above the log end -> the log end, below the log start -> the log
    start, each with Kafka's warning."""
    starts = await admin.log_offsets(list(wanted), EARLIEST)
    ends = await admin.log_offsets(list(wanted), LATEST)
    out = {}
    for (t, p), off in wanted.items():
        end, start = ends.get((t, p)), starts.get((t, p))
        if end is not None and off > end:
            print(f"WARN New offset ({off}) is higher than latest offset for topic partition {t}-{p}. Value will be "
                  f"set to {end}.", file=sys.stderr)
            off = end
        elif start is not None and off < start:
            print(f"WARN New offset ({off}) is lower than earliest offset for topic partition {t}-{p}. Value will be "
                  f"set to {start}.", file=sys.stderr)
            off = start
        out[(t, p)] = off
    return out
