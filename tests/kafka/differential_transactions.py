"""Differential scenarios for transactions (tests/kafka/test_differential.py runs them against Apache Kafka and
Strata): the coordinator's answers to good and bad requests, what a read_committed Fetch and ListOffsets return
around open, committed and aborted transactions, and markers sent by hand."""
from __future__ import annotations

import time

from differential_scenarios import (INIT_PRODUCER_ID, JOIN_GROUP, PRODUCE, SYNC_GROUP, Side, coordinator, err,
                                    fetch_part, norm, offsets_parts, produce_part, scenario)
from protocol.record_batch import build_batch

ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = (24, 3), (25, 3), (26, 3)
WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT = (27, 1), (28, 3)
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = (61, 0), (65, 0), (66, 1)
TXN = 0x10


class Txn:
    """A transactional producer driven by raw requests: (id, producer id, epoch) and its next sequence per
    partition."""

    def __init__(self, s: Side, suffix: str = "-txn", timeout_ms: int = 60000):
        self.s = s
        self.id = s.name(suffix)
        coordinator(s, 1, self.id)
        r = init(s, self.id, timeout_ms)
        assert err(r.error_code) == "NONE", (s.kind, r)
        self.pid, self.epoch = r.producer_id, r.producer_epoch
        self.seq: dict[tuple[str, int], int] = {}

    def add(self, topic: str, *partitions: int, epoch: int | None = None, pid: int | None = None):
        r = retry(lambda: self.s.req(ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": self.id, "v3_and_below_producer_id": self.pid if pid is None else pid,
            "v3_and_below_producer_epoch": self.epoch if epoch is None else epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": list(partitions)}]}),
            lambda r: [err(p.partition_error_code) for t in r.results_by_topic_v3_and_below
                       for p in t.results_by_partition])
        return sorted((t.name, p.partition_index, err(p.partition_error_code))
                      for t in r.results_by_topic_v3_and_below for p in t.results_by_partition)

    def produce(self, topic: str, partition: int, n: int = 2, value: bytes = b"v", version: int | None = None):
        seq = self.seq.get((topic, partition), 0)
        body = self.s.produce_body(topic, partition, build_batch(
            [(b"k", value + b"%d" % i) for i in range(n)], producer_id=self.pid, producer_epoch=self.epoch,
            base_sequence=seq, attributes=TXN, timestamp_ms=now()))
        body["transactional_id"] = self.id
        p = self.s.req(PRODUCE, body, version).responses[0].partition_responses[0]
        if p.error_code == 0:
            self.seq[(topic, partition)] = seq + n
        return produce_part(p)

    def end_v2(self, commit: bool, epoch: int | None = None) -> tuple:
        """EndTxn v5 (transaction version 2): (error, epoch it answers); on success the producer continues with that
        epoch and new sequences, as Kafka 4's producer does."""
        r = retry(lambda: self.s.req((26, 5), {"transactional_id": self.id, "producer_id": self.pid,
                                               "producer_epoch": self.epoch if epoch is None else epoch,
                                               "committed": commit}),
                  lambda r: [err(r.error_code)])
        if r.error_code == 0 and epoch is None:
            assert r.producer_id == self.pid, (self.s.kind, r)
            self.epoch, self.seq = r.producer_epoch, {}
        return err(r.error_code), r.producer_epoch

    def completed(self) -> str:
        """Until the coordinator has written the markers and CompleteCommit/CompleteAbort: its state then."""
        deadline = time.monotonic() + 20
        while True:
            state = self.s.req(DESCRIBE_TRANSACTIONS, {"transactional_ids": [self.id]}).transaction_states[0]
            if state.transaction_state.startswith("Complete") or time.monotonic() > deadline:
                return state.transaction_state
            time.sleep(0.05)

    def end(self, commit: bool, epoch: int | None = None, pid: int | None = None) -> str:
        r = retry(lambda: self.s.req(END_TXN, {"transactional_id": self.id, "producer_id": self.pid if pid is None
                                               else pid, "producer_epoch": self.epoch if epoch is None else epoch,
                                               "committed": commit}),
                  lambda r: [err(r.error_code)])
        return err(r.error_code)


def now() -> int:
    """Record timestamps of now: Kafka rolls a segment when a batch's timestamp is segment.ms past the segment's
    first, so batches at time 0 followed by markers (stamped now) would roll it there and split Kafka's reads."""
    return int(time.time() * 1000)


def seed(s: Side, topic: str, n: int) -> None:
    assert s.produce(topic, 0, build_batch([(b"k", b"v%d" % i) for i in range(n)], timestamp_ms=now())).error_code == 0


def init(s: Side, tid: str, timeout_ms: int = 60000, pid: int = -1, epoch: int = -1):
    return retry(lambda: s.req(INIT_PRODUCER_ID, {"transactional_id": tid, "transaction_timeout": timeout_ms,
                                                  "producer_id": pid, "producer_epoch": epoch}),
                 lambda r: [err(r.error_code)])


def retry(send, errors, timeout: float = 20):
    """Repeat while the answer is only a retriable coordinator error (markers still being written, a coordinator
    loading): what clients do."""
    deadline = time.monotonic() + timeout
    while True:
        r = send()
        found = set(errors(r))
        if not found & {"CONCURRENT_TRANSACTIONS", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE",
                        "NOT_COORDINATOR"} or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def read_committed(s: Side, topic: str, partition: int = 0, offset: int = 0) -> dict:
    r = s.fetch(topic, partition, offset, isolation_level=1)
    out = fetch_part(r)
    p = r.responses[0].partitions[0]
    out["aborted"] = None if p.aborted_transactions is None else [a.first_offset for a in p.aborted_transactions]
    return out


def settle(s: Side, topic: str, partitions: int = 1) -> None:
    """Until the markers of ended transactions are in (the coordinator writes them after answering EndTxn)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = s.list_offsets(topic, list(range(partitions)), -1, isolation_level=1)
        hw = s.list_offsets(topic, list(range(partitions)), -1)
        if [p.offset for p in r.topics[0].partitions] == [p.offset for p in hw.topics[0].partitions]:
            return
        time.sleep(0.05)


@scenario("txn-init-producer-id-timeouts", expect=("INVALID_TRANSACTION_TIMEOUT", "INVALID_REQUEST"))
def _(s: Side):
    """transaction.max.timeout.ms (900000) and a non-positive timeout are INVALID_TRANSACTION_TIMEOUT; an empty
    transactional id INVALID_REQUEST; the second InitProducerId of an id bumps its epoch."""
    tid = s.name("-txn")
    coordinator(s, 1, tid)
    first = init(s, tid)
    second = init(s, tid)
    return [err(init(s, tid, 900001).error_code), err(init(s, tid, 0).error_code), err(init(s, "").error_code),
            (err(first.error_code), first.producer_epoch), (err(second.error_code), second.producer_epoch),
            second.producer_id == first.producer_id]


@scenario("txn-init-producer-id-recovery", expect=("PRODUCER_FENCED",))
def _(s: Side):
    """KIP-360: a producer that names its current (id, epoch) gets the next epoch; a retry naming the previous
    epoch gets the same; an epoch that is neither is PRODUCER_FENCED, an unknown id too."""
    t = Txn(s)
    bumped = init(s, t.id, pid=t.pid, epoch=t.epoch)
    retried = init(s, t.id, pid=t.pid, epoch=t.epoch)
    stale = init(s, t.id, pid=t.pid, epoch=t.epoch + 7)
    other = init(s, t.id, pid=t.pid + 1000, epoch=0)
    return [(err(bumped.error_code), bumped.producer_epoch - t.epoch),
            (err(retried.error_code), retried.producer_epoch - t.epoch), err(stale.error_code),
            err(other.error_code)]


@scenario("txn-add-partitions-errors",
          expect=("UNKNOWN_TOPIC_OR_PARTITION", "OPERATION_NOT_ATTEMPTED", "PRODUCER_FENCED",
                  "INVALID_PRODUCER_ID_MAPPING"))
def _(s: Side):
    topic = s.create(partitions=2)
    t = Txn(s)
    return [t.add(topic, 0, 1), t.add(topic, 0, 7), t.add(s.name("-missing"), 0),
            t.add(topic, 0, epoch=t.epoch + 1), t.add(topic, 0, pid=t.pid + 1000)]


@scenario("txn-end-txn-errors", expect=("INVALID_TXN_STATE", "PRODUCER_FENCED", "INVALID_PRODUCER_ID_MAPPING"))
def _(s: Side):
    """EndTxn without a transaction, from a stale epoch, from another producer id; committing twice is fine,
    aborting a committed transaction is not."""
    topic = s.create()
    t = Txn(s)
    out = [t.end(True)]                                   # Empty: nothing to end
    t.add(topic, 0)
    t.produce(topic, 0)
    out += [t.end(True, epoch=t.epoch - 1 if t.epoch > 0 else t.epoch + 1), t.end(True, pid=t.pid + 1000),
            t.end(True), t.end(True), t.end(False)]
    return out


@scenario("txn-commit-and-abort-read-committed")
def _(s: Side):
    """Fetch in read_committed returns up to the last stable offset with the aborted transactions' first offsets;
    ListOffsets latest is the LSO for read_committed and the high watermark otherwise, while a transaction is open
    and after it ends."""
    topic = s.create()
    seed(s, topic, 2)
    t = Txn(s)
    t.add(topic, 0)
    out = [t.produce(topic, 0, 3)]
    seed(s, topic, 1)
    out += [read_committed(s, topic), offsets_parts(s.list_offsets(topic, [0], -1, isolation_level=1)),
            offsets_parts(s.list_offsets(topic, [0], -1))]
    out.append(t.end(False))
    settle(s, topic)
    out += [read_committed(s, topic), read_committed(s, topic, offset=5),
            offsets_parts(s.list_offsets(topic, [0], -1, isolation_level=1))]
    t.add(topic, 0)
    out.append(t.produce(topic, 0, 2, b"c"))
    out.append(t.end(True))
    settle(s, topic)
    out += [read_committed(s, topic), fetch_part(s.fetch(topic, 0, 0)),
            offsets_parts(s.list_offsets(topic, [0], -1, isolation_level=1))]
    return out


@scenario("txn-produce-without-add-partitions", expect=("INVALID_TXN_STATE",))
def _(s: Side):
    """KIP-890 verification: Produce v10 from a transactional producer to a partition it did not add gets
    INVALID_TXN_STATE (v11+ clients get TRANSACTION_ABORTABLE); nothing is written."""
    topic = s.create()
    t = Txn(s)
    body = s.produce_body(topic, 0, build_batch([(b"k", b"v")], producer_id=t.pid, producer_epoch=t.epoch,
                                                base_sequence=0, attributes=TXN))
    body["transactional_id"] = t.id
    p = s.req(PRODUCE, body, version=10).responses[0].partition_responses[0]
    return [produce_part(p), fetch_part(s.fetch(topic, 0, 0))]


@scenario("txn-produce-from-fenced-epoch", expect=("INVALID_PRODUCER_EPOCH",))
def _(s: Side):
    """After another InitProducerId the old epoch's transactional produce is refused."""
    topic = s.create()
    t = Txn(s)
    t.add(topic, 0)
    init(s, t.id)
    return [t.produce(topic, 0), fetch_part(s.fetch(topic, 0, 0))]


@scenario("txn-write-markers-by-hand")
def _(s: Side):
    """WriteTxnMarkers for a producer the partition has never seen and for one with an open transaction (a client
    may send it: Kafka checks only the cluster-action permission, and there are no ACLs here)."""
    topic = s.create()
    t = Txn(s)
    t.add(topic, 0)
    t.produce(topic, 0)

    def markers(pid, epoch, commit, coordinator_epoch=0):
        r = s.req(WRITE_TXN_MARKERS, {"markers": [{"producer_id": pid, "producer_epoch": epoch,
                                                   "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
                                                   "topics": [{"name": topic, "partition_indexes": [0]}]}]})
        return [(err(p.error_code)) for m in r.markers for tp in m.topics for p in tp.partitions]
    out = [markers(123456789, 0, True), markers(t.pid, t.epoch - 1 if t.epoch else 0, False)]
    out.append(read_committed(s, topic))
    out.append(fetch_part(s.fetch(topic, 0, 0)))
    return out


@scenario("txn-offset-commit", expect=("ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "UNSTABLE_OFFSET_COMMIT"))
def _(s: Side):
    """TxnOffsetCommit for a group in another generation or from an unknown member is refused; accepted offsets are
    unstable for require_stable OffsetFetch until the transaction commits, then they are the group's."""
    topic = s.create()
    group = s.group()
    coordinator(s, 0, group)
    join = retry(lambda: s.req(JOIN_GROUP, {
        "group_id": group, "session_timeout": 30000, "rebalance_timeout": 30000, "member_id": "",
        "group_instance_id": None, "protocol_type": "consumer", "reason": None,
        "protocols": [{"name": "range", "metadata": b""}]}), lambda r: [err(r.error_code)])
    if err(join.error_code) == "MEMBER_ID_REQUIRED":
        join = s.req(JOIN_GROUP, {"group_id": group, "session_timeout": 30000, "rebalance_timeout": 30000,
                                  "member_id": join.member_id, "group_instance_id": None, "protocol_type": "consumer",
                                  "reason": None, "protocols": [{"name": "range", "metadata": b""}]})
    s.req(SYNC_GROUP, {"group_id": group, "generation_id": join.generation_id, "member_id": join.member_id,
                       "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                       "assignments": [{"member_id": join.member_id, "assignment": b""}]})
    t = Txn(s)
    r = retry(lambda: s.req(ADD_OFFSETS_TO_TXN, {"transactional_id": t.id, "producer_id": t.pid,
                                                 "producer_epoch": t.epoch, "group_id": group}),
              lambda r: [err(r.error_code)])

    def commit(generation, member, offset=5):
        r = s.req(TXN_OFFSET_COMMIT, {
            "transactional_id": t.id, "group_id": group, "producer_id": t.pid, "producer_epoch": t.epoch,
            "generation_id": generation, "member_id": member, "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                        "committed_leader_epoch": -1,
                                                        "committed_metadata": ""}]}]})
        return [err(p.error_code) for tp in r.topics for p in tp.partitions]

    def fetch_offset():
        r = s.req((9, 7), {"group_id": group, "require_stable": True,
                           "topics": [{"name": topic, "partition_indexes": [0]}]})
        return [(err(p.error_code), p.committed_offset) for tp in r.topics for p in tp.partitions]
    out = [err(r.error_code), commit(join.generation_id + 5, join.member_id), commit(join.generation_id, "nobody"),
           commit(join.generation_id, join.member_id), fetch_offset()]
    out.append(t.end(True))
    deadline = time.monotonic() + 20
    while fetch_offset()[0][0] != "NONE" and time.monotonic() < deadline:
        time.sleep(0.05)
    out.append(fetch_offset())
    return out


@scenario("txn-describe-and-list")
def _(s: Side):
    """DescribeTransactions and ListTransactions of an open transaction, DescribeProducers of its partition."""
    topic = s.create()
    t = Txn(s)
    t.add(topic, 0)
    t.produce(topic, 0, 3)
    d = s.req(DESCRIBE_TRANSACTIONS, {"transactional_ids": [t.id, s.name("-unknown")]})
    listed = s.req(LIST_TRANSACTIONS, {"state_filters": ["Ongoing"], "producer_id_filters": [t.pid],
                                       "duration_filter": -1})
    producers = s.req(DESCRIBE_PRODUCERS, {"topics": [{"name": topic, "partition_indexes": [0, 3]}]})
    out = [norm(d, drop={"transaction_start_time"}),
           [(x.transactional_id == t.id, x.transaction_state) for x in listed.transaction_states],
           err(listed.error_code),
           [(p.partition_index, err(p.error_code), [(a.producer_id == t.pid, a.producer_epoch, a.last_sequence,
                                                     a.current_txn_start_offset) for a in p.active_producers])
            for tp in producers.topics for p in tp.partitions]]
    t.end(False)
    return out


@scenario("txn-fetch-aborted-transactions-v4", expect=())
def _(s: Side):
    """An aborted transaction in a non-flexible Fetch (v4, the oldest read_committed version)."""
    topic = s.create()
    t = Txn(s)
    t.add(topic, 0)
    t.produce(topic, 0, 2)
    t.end(False)
    settle(s, topic)
    r = s.fetch(topic, 0, 0, version=4, isolation_level=1)
    p = r.responses[0].partitions[0]
    from tests.integration.rawclient import decode_batches
    return [err(p.error_code), p.high_watermark, p.last_stable_offset,
            [x.offset for x in decode_batches(p.records or b"")], [a.first_offset for a in p.aborted_transactions]]



@scenario("txn-v2-end-bumps-the-epoch", expect=("INVALID_PRODUCER_EPOCH", "TRANSACTION_ABORTABLE", "PRODUCER_FENCED"))
def _(s: Side):
    """Transaction version 2 (KIP-890 part 2, Kafka 4.1's answers): EndTxn v5 bumps the epoch with every end, also
    an abort with no transaction open; a retry with the epoch before the bump is answered as the first call; a
    commit of nothing is INVALID_TXN_STATE. Produce v12 adds its partition to the transaction (v11 still only
    verifies: TRANSACTION_ABORTABLE); an epoch behind or ahead is INVALID_PRODUCER_EPOCH."""
    topic = s.create(partitions=2)
    t = Txn(s)
    out = [t.end_v2(False), t.completed(), t.end_v2(False, epoch=0), t.end_v2(True, epoch=0), t.end_v2(True),
           t.end_v2(True, epoch=t.epoch + 1)]
    e = t.epoch
    t.epoch = e - 1
    out.append(t.produce(topic, 0, version=12)["error_code"])
    t.epoch = e + 3
    out.append(t.produce(topic, 0, version=12)["error_code"])
    t.epoch = e
    out += [t.produce(topic, 0, version=12), t.produce(topic, 1, version=11)["error_code"],
            t.end_v2(True, epoch=e - 1), t.end_v2(True), t.completed(),
            t.end_v2(True), t.end_v2(True, epoch=t.epoch - 1), t.end_v2(False, epoch=t.epoch - 1),
            t.end_v2(False), t.completed(),
            t.produce(topic, 0, version=12), t.end_v2(False), t.completed()]
    settle(s, topic, 2)
    out.append(read_committed(s, topic, 0))
    return out


@scenario("txn-v2-offsets-join-implicitly", expect=("TRANSACTION_ABORTABLE",))
def _(s: Side):
    """TxnOffsetCommit v5 adds the group's partition to the transaction without AddOffsetsToTxn (v4 is only
    verified: TRANSACTION_ABORTABLE); the offsets are the group's once the transaction commits."""
    topic = s.create()
    group, other = s.group(), s.group("-other")
    coordinator(s, 0, group)
    coordinator(s, 0, other)
    t = Txn(s)

    def commit(version, g, offset):
        r = retry(lambda: s.req((28, version), {
            "transactional_id": t.id, "group_id": g, "producer_id": t.pid, "producer_epoch": t.epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]}),
            lambda r: [err(p.error_code) for tp in r.topics for p in tp.partitions])
        return [err(p.error_code) for tp in r.topics for p in tp.partitions]

    def fetch_offset(g):
        deadline = time.monotonic() + 20
        while True:
            r = s.req((9, 7), {"group_id": g, "require_stable": True,
                               "topics": [{"name": topic, "partition_indexes": [0]}]})
            got = [(err(p.error_code), p.committed_offset) for tp in r.topics for p in tp.partitions]
            if got[0][0] != "UNSTABLE_OFFSET_COMMIT" or time.monotonic() > deadline:
                return got
            time.sleep(0.05)
    out = [t.produce(topic, 0, version=12), commit(5, group, 7), commit(4, other, 8), t.end_v2(True), t.completed(),
           fetch_offset(group), fetch_offset(other)]
    out += [commit(5, group, 9), t.end_v2(False), t.completed(), fetch_offset(group)]
    return out
