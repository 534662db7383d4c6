"""`strata perf produce|consume`: Kafka's kafka-producer-perf-test.sh (ProducerPerformance) and
kafka-consumer-perf-test.sh (ConsumerPerformance) with their options and output, so numbers and scripts carry over.

The client is confluent-kafka (librdkafka), imported only when a perf command runs. Properties given with
--command-property / --command-config go to librdkafka as they are, except a few Java-only names that have a
librdkafka equivalent (JAVA_NAMES). Before the run, a Metadata request through the admin client checks that the
broker answers and that the topic exists (or that the broker creates it, as it would for a producer): librdkafka alone
would retry a dead address or a missing topic for minutes. Ctrl-C stops the run and prints the summary so far."""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import signal
import sys
import time
import uuid

from tools.admin_client import AdminClient, AdminError, error_name

MB = 1024 * 1024                     # Kafka's perf tools count MB as MiB
# Java client names with another name in librdkafka: name -> (librdkafka name, value conversion). Serializer
# classes mean nothing here (records are bytes) and are dropped.
JAVA_NAMES = {
    "buffer.memory": ("queue.buffering.max.kbytes", lambda v: str(max(1, int(v) // 1024))),
    "max.request.size": ("message.max.bytes", str),
    "send.buffer.bytes": ("socket.send.buffer.bytes", str),
    "receive.buffer.bytes": ("socket.receive.buffer.bytes", str),
}
DROPPED = {"key.serializer", "value.serializer", "key.deserializer", "value.deserializer"}
TOPIC_ERRORS_TO_WAIT_FOR = {"LEADER_NOT_AVAILABLE", "NOT_LEADER_OR_FOLLOWER"}   # e.g. a topic just auto-created
EXIT_INTERRUPTED = 130


# ---- arguments ---------------------------------------------------------------------------------------------------
def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"should be greater than zero: {text}")
        return value
    return parse


def _property(text: str) -> str:
    if "=" not in text or not text.split("=", 1)[0].strip():
        raise argparse.ArgumentTypeError(f"Invalid property: {text} (expected PROP-NAME=PROP-VALUE)")
    return text


def add_parser(sub) -> None:
    p = sub.add_parser("perf", help="producer and consumer performance tests (like kafka-producer-perf-test.sh and "
                                    "kafka-consumer-perf-test.sh)")
    verbs = p.add_subparsers(dest="perf_verb", required=True)
    _add_produce(verbs.add_parser("produce", help="produce records and report throughput and latency"))
    _add_consume(verbs.add_parser("consume", help="consume records and report throughput"))
    p.set_defaults(run=run)


def _add_common(p, legacy_props: str | None, legacy_config: str) -> None:
    p.add_argument("--command-property", nargs="+", action="extend", default=[], type=_property,
                   metavar="PROP-NAME=PROP-VALUE", help="client properties (librdkafka names; Kafka's Java names "
                   "mostly coincide); they take precedence over --command-config")
    if legacy_props:
        p.add_argument(legacy_props, dest="legacy_props", nargs="+", action="extend", default=[], type=_property,
                       metavar="PROP-NAME=PROP-VALUE", help="(DEPRECATED) use --command-property")
    else:
        p.set_defaults(legacy_props=[])
    files = p.add_mutually_exclusive_group()
    files.add_argument("--command-config", metavar="CONFIG-FILE", help="client properties file")
    files.add_argument(legacy_config, dest="legacy_config", metavar="CONFIG-FILE",
                       help="(DEPRECATED) use --command-config")
    p.add_argument("--reporting-interval", type=_positive(int), default=5000, metavar="INTERVAL-MS",
                   help="interval in milliseconds at which to print progress (default 5000)")


def _add_produce(p) -> None:
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                   help="takes precedence over bootstrap.servers in --command-property and --command-config")
    p.add_argument("--topic", required=True, metavar="TOPIC", help="produce records to this topic")
    _add_common(p, "--producer-props", "--producer.config")
    p.add_argument("--num-records", required=True, type=_positive(int), metavar="NUM-RECORDS")
    payload = p.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=_positive(int), metavar="RECORD-SIZE",
                         help="record size in bytes (random upper-case letters)")
    payload.add_argument("--payload-file", metavar="PAYLOAD-FILE", help="UTF-8 text file; each record is a "
                         "randomly chosen payload from it, split at --payload-delimiter")
    payload.add_argument("--payload-monotonic", action="store_true", help="the payload is the record's number")
    p.add_argument("--payload-delimiter", default="\\n", metavar="PAYLOAD-DELIMITER",
                   help="delimiter of --payload-file (default: new line)")
    p.add_argument("--throughput", required=True, type=float, metavar="THROUGHPUT",
                   help="throttle to about THROUGHPUT records/sec; -1 for no throttling")
    p.add_argument("--transactional-id", metavar="TRANSACTIONAL-ID", help="produce in transactions of this "
                   "transactional id (over a transactional.id in the client properties)")
    p.add_argument("--transaction-duration-ms", type=_positive(int), metavar="DURATION",
                   help="commit each transaction after this long (default 3000 with a transactional id; given "
                        "alone, the id is performance-producer-<uuid>)")
    p.add_argument("--warmup-records", type=int, default=0, metavar="WARMUP-RECORDS",
                   help="records left out of the steady-state summary printed after the total one")


def _add_consume(p) -> None:
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    topics = p.add_mutually_exclusive_group(required=True)
    topics.add_argument("--topic", metavar="TOPIC", help="the topic to consume from")
    topics.add_argument("--include", metavar="REGEX", help="consume from every topic whose whole name matches")
    _add_common(p, None, "--consumer.config")
    count = p.add_mutually_exclusive_group(required=True)
    count.add_argument("--num-records", type=_positive(int), metavar="COUNT", help="the number of records to consume")
    count.add_argument("--messages", type=_positive(int), metavar="COUNT", help="(DEPRECATED) use --num-records")
    p.add_argument("--group", default=f"perf-consumer-{random.randrange(100_000)}", metavar="GROUP")
    p.add_argument("--timeout", type=_positive(int), default=10_000, metavar="MS",
                   help="the maximum time in milliseconds between returned records (default 10000)")
    p.add_argument("--fetch-size", type=_positive(int), default=MB, metavar="SIZE",
                   help="max.partition.fetch.bytes (default 1048576)")
    p.add_argument("--socket-buffer-size", type=_positive(int), default=2 * MB, metavar="SIZE",
                   help="the TCP receive buffer (default 2097152)")
    p.add_argument("--from-latest", action="store_true", help="with no committed offset, start at the end")
    p.add_argument("--show-detailed-stats", action="store_true", help="a line per --reporting-interval")
    p.add_argument("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS", metavar="FORMAT",
                   help="java.text.SimpleDateFormat letters y M d H m s S (default yyyy-MM-dd HH:mm:ss:SSS)")
    p.add_argument("--hide-header", action="store_true")


def _client_props(args) -> dict[str, str]:
    """--command-config, then --command-property on top (Kafka's precedence), in librdkafka's names (security
    settings too: protocol.client_security.librdkafka_config)."""
    from protocol.client_security import librdkafka_config
    try:
        props = librdkafka_config(_java_props(args))
    except ValueError as e:
        raise AdminError(str(e)) from None
    out = {}
    for k, v in props.items():
        if k in DROPPED:
            continue
        name, convert = JAVA_NAMES.get(k, (k, str))
        try:
            out[name] = convert(v)
        except ValueError:
            raise AdminError(f"Invalid value {v} for configuration {k}") from None
    return out


def _security(args):
    """How the tool's own requests (the topic check) connect: the same security settings the client gets."""
    from protocol.client_security import ClientSecurity
    try:
        return ClientSecurity.from_properties(_java_props(args))
    except (OSError, ValueError) as e:
        raise AdminError(f"--command-config: {e}") from None


def _java_props(args) -> dict[str, str]:
    from broker.config import parse_properties
    props: dict[str, str] = {}
    path = args.command_config or args.legacy_config
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                props.update(parse_properties(f.read()))
        except (OSError, ValueError) as e:
            raise AdminError(f"cannot read {path}: {e}") from None
    for item in args.legacy_props + args.command_property:
        k, v = item.split("=", 1)
        props[k.strip()] = v.strip()
    return props


def _warn_deprecated(args, legacy_props: str | None, legacy_config: str) -> None:
    if args.legacy_props:
        print(f"Warning: {legacy_props} is deprecated. Use --command-property instead.", file=sys.stderr)
    if args.legacy_config:
        print(f"Warning: {legacy_config} is deprecated. Use --command-config instead.", file=sys.stderr)


async def _check_topic(bootstrap: str, topic: str | None, allow_auto_create: bool, security=None) -> None:
    """One Metadata request for the topic (None: for no topic), as a client's first one (auto-creation allowed
    unless the client's allow.auto.create.topics says no): a dead bootstrap address or a topic the broker does not
    have (and will not create) is an error now instead of retries until a timeout."""
    client = AdminClient(bootstrap, security=security)
    try:
        md = await client.send(3, 12, {"topics": [{"name": topic}] if topic else [],
                                       "allow_auto_topic_creation": allow_auto_create,
                                       "include_topic_authorized_operations": False})
    finally:
        client.close()
    for t in md.topics:
        name = error_name(t.error_code) if t.error_code else None
        if name == "UNKNOWN_TOPIC_OR_PARTITION":
            why = "the broker does not create topics on use (auto.create.topics.enable=false)" if allow_auto_create \
                else "allow.auto.create.topics=false"
            raise AdminError(f"Topic {topic} not present in metadata (UNKNOWN_TOPIC_OR_PARTITION) and {why}: create "
                             f"it first, e.g. strata topics --create --topic {topic}")
        if name and name not in TOPIC_ERRORS_TO_WAIT_FOR:
            raise AdminError(f"Topic {topic}: {name}")


@contextlib.contextmanager
def _interruptible():
    """The first Ctrl-C sets the returned flag (the run stops and prints what it has); a second one kills."""
    stop = []

    def handler(signum, frame):
        stop.append(signum)
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _reason(e: Exception) -> str:
    """A KafkaException's text without the KafkaError{...} wrapping."""
    err = e.args[0] if e.args else None
    return err.str() if hasattr(err, "str") else str(e)


def _f(value: float, digits: int) -> str:
    """A double as Java's %.Nf prints it, including Infinity and NaN (e.g. rates over a zero interval)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return f"{value:.{digits}f}"


def _div(a: float, b: float) -> float:
    """a / b with Java's double semantics (x / 0.0 is +-Infinity or NaN)."""
    if b:
        return a / b
    return math.nan if a == 0 else math.copysign(math.inf, a)


async def run(args: argparse.Namespace, out) -> None:
    if args.perf_verb == "produce":
        await _produce(args, out)
    else:
        await _consume(args, out)


# ---- produce -----------------------------------------------------------------------------------------------------
class ThroughputThrottler:
    """Kafka's ThroughputThrottler: once the average rate since the start exceeds the target, sleep off 1/target
    seconds per record, in naps of at least 2 ms. `nap` sleeps while serving the client's callbacks."""
    MIN_SLEEP = 0.002

    def __init__(self, target: float, start: float, nap):
        self.target = target
        self.start = start
        self.sleep_per_record = 1.0 / target if target > 0 else math.inf
        self.deficit = 0.0
        self.nap = nap

    def should_throttle(self, sent_so_far: int, now: float) -> bool:
        if self.target < 0:
            return False
        elapsed = now - self.start
        return elapsed > 0 and sent_so_far / elapsed > self.target

    def throttle(self, stop: list) -> None:
        self.deficit += self.sleep_per_record
        if self.deficit < self.MIN_SLEEP:
            return
        begin = time.monotonic()
        while not stop and (remaining := self.deficit - (time.monotonic() - begin)) > 0:
            self.nap(remaining)
        self.deficit = 0.0


class Stats:
    """ProducerPerformance.Stats: totals, a window printed every reporting interval, and up to 500,000 sampled
    latencies for the percentiles."""

    def __init__(self, num_records: int, out, interval_ms: int, steady_state: bool = False):
        self.start = self.window_start = time.monotonic()
        self.sampling = num_records // min(num_records, 500_000)
        self.latencies: list[float] = []
        self.out, self.interval, self.steady_state = out, interval_ms / 1000, steady_state
        self.iteration = self.count = self.bytes = 0
        self.total_latency = self.max_latency = 0.0
        self.suppressed = False
        self._new_window()

    def record(self, latency_ms: float, size: int, now: float) -> None:
        self.count += 1
        self.bytes += size
        self.total_latency += latency_ms
        self.max_latency = max(self.max_latency, latency_ms)
        self.window_count += 1
        self.window_bytes += size
        self.window_total_latency += latency_ms
        self.window_max_latency = max(self.window_max_latency, latency_ms)
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency_ms)
        if now - self.window_start >= self.interval:
            if self.steady_state and self.count == self.window_count:
                print("In steady state.", file=self.out)
            if not self.suppressed:
                self.print_window()
            self._new_window()
        self.iteration += 1

    def _new_window(self) -> None:
        self.window_start = time.monotonic()
        self.window_count = self.window_bytes = 0
        self.window_total_latency = self.window_max_latency = 0.0

    def print_window(self) -> None:
        elapsed_ms = (time.monotonic() - self.window_start) * 1000
        print(f"{self.window_count} records sent, {_f(_div(1000.0 * self.window_count, elapsed_ms), 1)} records/sec "
              f"({_f(_div(1000.0 * self.window_bytes, elapsed_ms) / MB, 2)} MB/sec), "
              f"{_f(_div(self.window_total_latency, self.window_count), 1)} ms avg latency, "
              f"{self.window_max_latency:.1f} ms max latency.", file=self.out, flush=True)

    def print_total(self) -> None:
        elapsed_ms = (time.monotonic() - self.start) * 1000
        lat = sorted(self.latencies)
        p = [int(lat[int(q * len(lat))]) if lat else 0 for q in (0.5, 0.95, 0.99, 0.999)]
        print(f"{self.count}{' steady state' if self.steady_state else ''} records sent, "
              f"{_f(_div(1000.0 * self.count, elapsed_ms), 6)} records/sec "
              f"({_f(_div(1000.0 * self.bytes, elapsed_ms) / MB, 2)} MB/sec), "
              f"{_f(_div(self.total_latency, self.count), 2)} ms avg latency, {self.max_latency:.2f} ms max latency, "
              f"{p[0]} ms 50th, {p[1]} ms 95th, {p[2]} ms 99th, {p[3]} ms 99.9th.", file=self.out, flush=True)


class _RandomLetters:
    """Fresh random upper-case letters for every record, as Kafka's: cut from 1 MiB blocks, since a random-number
    call per record would cost more than sending it."""
    LETTERS = bytes(65 + b % 26 for b in range(256))

    def __init__(self, rng: random.Random, size: int):
        self.rng, self.size = rng, size
        self.block, self.pos = b"", 0

    def __call__(self, i: int) -> bytes:
        if self.pos + self.size > len(self.block):
            self.block, self.pos = self.rng.randbytes(max(MB, self.size)).translate(self.LETTERS), 0
        self.pos += self.size
        return self.block[self.pos - self.size:self.pos]


def _payloads(args, out):
    """A function from the record's number to its value, as ProducerPerformance makes them."""
    if args.payload_monotonic:
        return lambda i: str(i).encode()
    rng = random.Random(0)
    if args.record_size is not None:
        return _RandomLetters(rng, args.record_size)
    path = os.path.abspath(args.payload_file)
    print(f"Reading payloads from: {path}", file=out)
    delimiter = args.payload_delimiter.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise AdminError(f"File does not exist or empty file provided: {e}") from None
    payloads = [piece.encode() for piece in text.split(delimiter) if piece]
    if not payloads:
        raise AdminError("File does not exist or empty file provided.")
    print(f"Number of messages read: {len(payloads)}", file=out)
    return lambda i: payloads[rng.randrange(len(payloads))]


async def _produce(args, out) -> None:
    _warn_deprecated(args, "--producer-props", "--producer.config")
    if args.warmup_records >= args.num_records:
        raise AdminError("The value for --warmup-records must be strictly fewer than the number of records in the "
                         "test, --num-records.")
    if args.throughput == 0:
        raise AdminError("--throughput must be greater than zero, or -1 for no throttling")
    props = _client_props(args)
    if args.bootstrap_server:
        props["bootstrap.servers"] = args.bootstrap_server
    if "bootstrap.servers" not in props:
        raise AdminError("Either --bootstrap-server, --command-property bootstrap.servers=... or --command-config "
                         "must be specified")
    tid = args.transactional_id or props.get("transactional.id") or \
        (f"performance-producer-{uuid.uuid4()}" if args.transaction_duration_ms else None)
    txn_ms = (args.transaction_duration_ms or 3000) if tid else None
    if tid:
        props["transactional.id"] = tid
    props.setdefault("client.id", "perf-producer-client")
    payload = _payloads(args, out)
    from confluent_kafka import KafkaError, KafkaException, Producer
    try:
        producer = Producer(props)
    except (KafkaException, ValueError, TypeError) as e:
        raise AdminError(f"bad producer configuration: {_reason(e)}") from None
    await _check_topic(props["bootstrap.servers"], args.topic,
                       props.get("allow.auto.create.topics", "true").lower() == "true", _security(args))
    txn_start = None
    if txn_ms:                            # Kafka's ProducerPerformance: a transaction per --transaction-duration-ms
        try:
            producer.init_transactions(30)
            producer.begin_transaction()
        except KafkaException as e:
            raise AdminError(f"transactions: {_reason(e)}") from None
        txn_start = time.monotonic()
    errors: dict[str, int] = {}
    if args.warmup_records:
        print(f"Warmup first {args.warmup_records} records. Steady state results will print after the complete "
              "test summary.", file=out)
    stats = Stats(args.num_records, out, args.reporting_interval)
    steady: list[Stats] = []
    purged = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)

    def delivered(err, msg) -> None:
        now = time.monotonic()
        if err is not None:
            if err.code() not in purged:              # purged: not sent because of Ctrl-C
                if err.str() not in errors:
                    print(f"Error: record not delivered: {err.str()}", file=sys.stderr, flush=True)
                errors[err.str()] = errors.get(err.str(), 0) + 1
            return
        latency = msg.latency()
        latency_ms = latency * 1000 if latency is not None else 0.0
        stats.record(latency_ms, len(msg), now)

    def delivered_after_warmup(err, msg) -> None:
        delivered(err, msg)
        if err is None:
            latency = msg.latency()
            steady[0].record(latency * 1000 if latency is not None else 0.0, len(msg), time.monotonic())

    produce, poll = producer.produce, producer.poll
    throttler = ThroughputThrottler(args.throughput, time.monotonic(), poll)
    topic, warmup, callback = args.topic, args.warmup_records, delivered
    with _interruptible() as stop:
        for i in range(args.num_records):
            if stop:
                break
            value = payload(i)
            send_start = time.monotonic()
            if warmup and i == warmup:
                steady.append(Stats(args.num_records - warmup, out, args.reporting_interval, steady_state=True))
                stats.suppressed = True
                callback = delivered_after_warmup
            while True:
                try:
                    produce(topic, value, on_delivery=callback)
                    break
                except BufferError:                   # the client's queue is full: wait for deliveries
                    poll(0.05)
                except KafkaException as e:
                    raise AdminError(_reason(e)) from None
            poll(0)
            if txn_start is not None and (send_start - txn_start) * 1000 >= txn_ms:
                _commit(producer)
                producer.begin_transaction()
                txn_start = time.monotonic()
            if throttler.should_throttle(i, send_start):
                throttler.throttle(stop)
        if txn_start is not None and not stop:
            _commit(producer)
        deadline = None
        while len(producer):
            if stop and deadline is None:         # Ctrl-C: drop what is not sent yet, wait a little for the rest
                producer.purge(in_queue=True, in_flight=False, blocking=False)
                deadline = time.monotonic() + 10
            elif deadline is not None and time.monotonic() > deadline:
                producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer.flush(0.5)
    stats.print_total()
    if steady:
        steady[0].print_total()
    if stop:
        raise SystemExit(EXIT_INTERRUPTED)
    if errors:
        raise AdminError(f"{sum(errors.values())} of {args.num_records} records not delivered: " +
                         "; ".join(f"{n} x {e}" for e, n in errors.items()))


def _commit(producer) -> None:
    from confluent_kafka import KafkaException
    try:
        producer.commit_transaction(60)
    except KafkaException as e:
        raise AdminError(f"commit_transaction: {_reason(e)}") from None


# ---- consume -----------------------------------------------------------------------------------------------------
JAVA_DATE_FIELDS = {"y": "year", "M": "month", "d": "day", "H": "hour", "m": "minute", "s": "second"}


def _date_formatter(pattern: str):
    """The subset of java.text.SimpleDateFormat that timestamps need (y M d H m s S, quoted text), as a function
    of epoch seconds."""
    import datetime
    import re
    parts = []
    for m in re.finditer(r"([A-Za-z])\1*|'[^']*'|[^A-Za-z']+|'", pattern):
        tok = m.group(0)
        if tok[0] == "'":
            parts.append(tok[1:-1] if len(tok) > 2 else "'")
        elif tok[0] == "S":
            parts.append(lambda dt, n=len(tok): f"{dt.microsecond // 1000:0{n}d}")
        elif tok[0] == "y" and len(tok) == 2:
            parts.append(lambda dt: f"{dt.year % 100:02d}")
        elif tok[0] in JAVA_DATE_FIELDS:
            parts.append(lambda dt, f=JAVA_DATE_FIELDS[tok[0]], n=len(tok): f"{getattr(dt, f):0{n}d}")
        elif tok[0].isalpha():
            raise AdminError(f"--date-format: unsupported pattern letter {tok[0]!r} in {pattern!r} "
                             "(supported: y M d H m s S and 'quoted text')")
        else:
            parts.append(tok)

    def fmt(epoch_seconds: float) -> str:
        dt = datetime.datetime.fromtimestamp(epoch_seconds)
        return "".join(p if isinstance(p, str) else p(dt) for p in parts)
    return fmt


HEADER_FIELDS = "data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, " \
                "fetch.MB.sec, fetch.nMsg.sec"


async def _consume(args, out) -> None:
    _warn_deprecated(args, None, "--consumer.config")
    if args.messages is not None:
        print("Warning: --messages is deprecated. Use --num-records instead.", file=sys.stderr)
    num_records = args.num_records or args.messages
    date = _date_formatter(args.date_format)
    props = _client_props(args)
    props.update({"bootstrap.servers": args.bootstrap_server, "group.id": args.group,
                  "socket.receive.buffer.bytes": str(args.socket_buffer_size),
                  "max.partition.fetch.bytes": str(args.fetch_size),
                  "auto.offset.reset": "latest" if args.from_latest else "earliest"})
    props.setdefault("client.id", "perf-consumer-client")
    props.setdefault("allow.auto.create.topics", "true")         # the Java consumer's default
    from confluent_kafka import Consumer, KafkaException
    try:
        consumer = Consumer(props)
    except (KafkaException, ValueError, TypeError) as e:
        raise AdminError(f"bad consumer configuration: {_reason(e)}") from None
    try:
        await _check_topic(args.bootstrap_server, args.topic,
                           args.topic is not None and props["allow.auto.create.topics"].lower() == "true",
                           _security(args))
    except AdminError:
        consumer.close()
        raise
    with _interruptible() as stop:
        if not args.hide_header:
            first = "time, threadId" if args.show_detailed_stats else "start.time, end.time"
            print(f"{first}, {HEADER_FIELDS}", file=out, flush=True)
        try:
            _consume_loop(consumer, args, out, num_records, date, stop)
        finally:
            consumer.close()
    if stop:
        raise SystemExit(EXIT_INTERRUPTED)


def _consume_loop(consumer, args, out, num_records: int, date, stop: list) -> None:
    """ConsumerPerformance.consume and its final line: read until `num_records`, --timeout without records, or
    Ctrl-C."""
    from confluent_kafka import KafkaError
    wall0, mono0 = time.time(), time.monotonic()

    def now_ms() -> int:
        return int((time.monotonic() - mono0) * 1000)

    # ConsumerPerfRebListener: time from (re)joining until the first partitions arrive counts as rebalance time.
    join = {"total": 0, "round": 0, "start": 0}
    assigned: set = set()

    def on_assign(c, partitions) -> None:
        if not assigned:
            elapsed = now_ms() - join["start"]
            join["total"] += elapsed
            join["round"] += elapsed
        assigned.update((p.topic, p.partition) for p in partitions)

    def on_revoke(c, partitions) -> None:
        assigned.difference_update((p.topic, p.partition) for p in partitions)
        if not assigned:
            join["start"] = now_ms()

    consumer.subscribe([args.topic] if args.topic else [f"^({args.include})$"], on_assign=on_assign,
                       on_revoke=on_revoke)
    records = nbytes = last_records = last_bytes = 0
    start = last_report = last_consumed = current = now_ms()
    reported_errors: set[str] = set()
    while records < num_records and current - last_consumed <= args.timeout and not stop:
        batch = consumer.consume(min(num_records - records, 500), 0.1)
        current = now_ms()
        got = 0
        for m in batch:
            err = m.error()
            if err is not None:
                unknown = err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
                if err.fatal() or (unknown and args.topic):     # --include may match nothing yet
                    raise AdminError(err.str())
                if not unknown and err.code() != KafkaError._PARTITION_EOF and err.str() not in reported_errors:
                    reported_errors.add(err.str())
                    print(f"Error: {err.str()}", file=sys.stderr, flush=True)
                continue
            got += 1
            key = m.key()
            nbytes += len(m) + (len(key) if key else 0)
        records += got
        if got:
            last_consumed = current
            if current - last_report >= args.reporting_interval:
                if args.show_detailed_stats:
                    _progress(out, date(wall0 + current / 1000), records, last_records, nbytes, last_bytes,
                              current - last_report, join["round"])
                join["round"] = 0
                last_report, last_records, last_bytes = current, records, nbytes
    end = now_ms()
    if records < num_records and not stop:
        print(f"WARNING: Exiting before consuming the expected number of records: timeout ({args.timeout} ms) "
              "exceeded. You can use the --timeout option to increase the timeout.", file=out)
    if not args.show_detailed_stats:
        elapsed_s, fetch_ms = (end - start) / 1000, end - start - join["total"]
        mb = nbytes / MB
        print(f"{date(wall0 + start / 1000)}, {date(wall0 + end / 1000)}, {mb:.4f}, {_f(_div(mb, elapsed_s), 4)}, "
              f"{records}, {_f(_div(records, elapsed_s), 4)}, {join['total']}, {fetch_ms}, "
              f"{_f(_div(mb, fetch_ms / 1000), 4)}, {_f(_div(records, fetch_ms / 1000), 4)}", file=out, flush=True)


def _progress(out, when: str, records: int, last_records: int, nbytes: int, last_bytes: int, elapsed_ms: int,
              join_ms: int) -> None:
    """ConsumerPerformance.printConsumerProgress: one --show-detailed-stats line for the interval just ended."""
    interval_mb = (nbytes - last_bytes) / MB
    fetch_ms = elapsed_ms - join_ms
    print(f"{when}, 0, {nbytes / MB:.4f}, {_f(_div(1000.0 * interval_mb, elapsed_ms), 4)}, {records}, "
          f"{_f(_div(1000.0 * (records - last_records), elapsed_ms), 4)}, {join_ms}, {fetch_ms}, "
          f"{(1000.0 * interval_mb / fetch_ms if fetch_ms > 0 else 0.0):.4f}, "
          f"{(1000.0 * (records - last_records) / fetch_ms if fetch_ms > 0 else 0.0):.4f}", file=out, flush=True)
