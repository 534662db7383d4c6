"""Produce (key 0), hand-parsed so record bytes stay a writable view of the request frame until they reach the log.

Advertised from v0 because librdkafka 2.0.2 (Debian's kcat) disables compression when Produce's minimum is above 2;
clients pick the highest version, and v0-2 (magic 0/1 message sets) get UNSUPPORTED_FOR_MESSAGE_FORMAT; in v3+ a
magic 0/1 set is INVALID_RECORD and an unknown magic CORRUPT_MESSAGE, as Kafka answers.
"""
from __future__ import annotations

import inspect
import logging
import struct
import time

from broker.current_leader import current_leaders
from broker.log_limits import RateLimitedLog
from broker.security.authorization import (CLUSTER_ACTION, TOPIC_DENIED, TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED,
                                           WRITE, authorize, authorize_cluster, name_checker)
from protocol.record_batch import InvalidRecordError, LegacyMagicError, split_and_validate
from protocol.records import iter_records, null_key_indexes, recompress_batch
from protocol.wire import (I16, I32, I64, MalformedRequest, array_len, leader_id_and_epoch, node_endpoints,
                           read_array_len, read_bytes_view, read_i16, read_i32, read_string, skip_tagged_fields, string,
                           tagged_fields)
from protocol.errors import ErrorCode
from replication.partition import wait_for_all

API_KEY = 0
VERSIONS = (0, 12)          # v12 is v11 from a producer of transaction version 2 (KIP-890 part 2)
DECODABLE = (0, 12)


log = logging.getLogger("strata.produce")
# a client can send invalid batches at will: a flood of them must not fill the disk with log lines
_REJECTED_LOG = RateLimitedLog(log, logging.INFO, what="similar messages (produce requests rejected as invalid)")

# Errors Kafka's ReplicaManager.appendToLocalLog answers with LogAppendInfo.UNKNOWN_LOG_APPEND_INFO: no log start
# offset (-1); the others carry the partition's log start offset.
_UNKNOWN_APPEND_INFO = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower, ErrorCode.message_too_large,
    ErrorCode.record_list_too_large, ErrorCode.corrupt_message, ErrorCode.kafka_storage_error,
    ErrorCode.unknown_topic_id, ErrorCode.invalid_topic_exception, ErrorCode.transactional_id_authorization_failed,
    ErrorCode.topic_authorization_failed})

# Kafka's Topic.INTERNAL_TOPICS: clients may not append to them, except Kafka's own admin client id ("__admin_client")
# and, here, other Strata brokers writing a coordinator's records to the partition's leader.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def parse(frame, pos: int, version: int, flexible: bool):
    """-> (transactional_id, acks, timeout_ms, [(topic, [(partition, records view | None)])]). Raises only
    MalformedRequest, for anything ProduceRequestData.read would refuse (nulls where the schema has none included),
    so handle() never sees a malformed request."""
    txn_id = None
    if version >= 3:
        txn_id, pos = read_string(frame, pos, flexible)
    acks, pos = read_i16(frame, pos)
    timeout, pos = read_i32(frame, pos)
    n_topics, pos = read_array_len(frame, pos, flexible, "ProduceRequest.topic_data")
    topics = []
    for _ in range(n_topics):
        name, pos = read_string(frame, pos, flexible)
        if name is None:
            raise MalformedRequest("non-nullable field ProduceRequest.topic_data.name was serialized as null")
        n_parts, pos = read_array_len(frame, pos, flexible, "ProduceRequest.topic_data.partition_data")
        parts = []
        for _ in range(n_parts):
            index, pos = read_i32(frame, pos)
            records, pos = read_bytes_view(frame, pos, flexible)
            if flexible:
                pos = skip_tagged_fields(frame, pos)
            parts.append((index, records))
        if flexible:
            pos = skip_tagged_fields(frame, pos)
        topics.append((name, parts))
    return txn_id, acks, timeout, topics


def _verifies(broker, version: int) -> bool:
    """Whether transactional batches are checked with their coordinator: with KIP-890 part 1's verification on, and
    always for transaction version 2 (v12+), whose partitions join their transaction only this way."""
    return version >= 12 or broker.transactions.verification_enabled


def handle(broker, req):
    parsed = parse(req.frame, req.body_offset, req.api_version, req.flexible)
    denied = _unauthorized(broker, req, parsed) if getattr(broker, "authorizer", None) is not None else None
    if parsed[0] is not None and _verifies(broker, req.api_version):
        need = _needs_verification(broker, parsed[3], denied)
        if need:
            return _verify_then_produce(broker, req, parsed, need, denied)
    return _produce(broker, req, parsed, denied=denied)


def _unauthorized(broker, req, parsed) -> dict | None:
    """Kafka's checks, once per topic: transactional records need WRITE on the transactional id (else every
    partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and each topic WRITE (else TOPIC_AUTHORIZATION_FAILED).
    -> {topic: error} for the refused topics, or None."""
    txn_id, topics = parsed[0], parsed[3]
    if txn_id is not None and _has_transactional(topics) and \
            not authorize(broker, req, WRITE, TRANSACTIONAL_ID, txn_id):
        return {name: TRANSACTIONAL_ID_DENIED for name, _ in topics}
    writable = name_checker(broker, req, WRITE)
    denied = {name: TOPIC_DENIED for name, _ in topics if not writable(name)}
    return denied or None


def _needs_verification(broker, topics, denied: dict | None = None) -> dict:
    """KIP-890 part 1: the partitions led here whose transactional batch would begin its producer's transaction
    here: {(topic, partition): (producer id, epoch, guard)} (verification.py). Refused topics are never verified."""
    need = {}
    for name, parts in topics:
        if denied and name in denied:
            continue
        for index, records in parts:
            if records is None or len(records) < 61 or records[16] != 2 or not records[22] & 0x10:
                continue
            part = broker.replicas.get(name, index)
            if part is None or not part.is_leader:
                continue
            pid, epoch = _PID_EPOCH.unpack_from(records, 43)
            guard = part.log.producer_state.start_verification(pid, epoch)
            if guard is not None:
                need[(name, index)] = (pid, epoch, guard)
    return need


async def _verify_then_produce(broker, req, parsed, need: dict, denied: dict | None = None):
    from broker.transactions.verification import add_or_verify, client_error
    pid, epoch, _ = next(iter(need.values()))
    add = req.api_version >= 12
    answers = await add_or_verify(broker, parsed[0], pid, epoch, lambda: {
        tp: guard for tp, (_, _, guard) in _needs_verification(broker, parsed[3], denied).items()}, add)
    generic = req.api_version > 10         # Kafka's genericError: these clients know TRANSACTION_ABORTABLE
    verified = {tp: (client_error(code, generic, epoch_bump=add) if code else 0, guard)
                for tp, (code, guard) in answers.items()}
    result = _produce(broker, req, parsed, verified, denied)
    return await result if inspect.isawaitable(result) else result


def _produce(broker, req, parsed, verified: dict | None = None, denied: dict | None = None):
    """`verified`: {(topic, partition): (error, guard)} from KIP-890 verification (an error refuses the partition,
    as Kafka's ReplicaManager does before appending); `denied`: {topic: error} refused by the authorizer."""
    version, flexible = req.api_version, req.flexible
    txn_id, acks, timeout_ms, topics = parsed
    replicas = broker.replicas
    verifying = txn_id is not None and _verifies(broker, req.api_version)
    out_topics = []
    delayed = []                 # acks=all appends whose last offset the high watermark has not passed yet
    # Kafka's KafkaApis.handleProduceRequest: transactional records need a transactional id (one the client may write
    # as), else every partition of the request fails
    refused = ErrorCode.transactional_id_authorization_failed if txn_id is None and _has_transactional(topics) else 0
    internal_allowed = req.client_id == "__admin_client" or (req.client_id or "").startswith("strata-broker-")
    for name, parts in topics:
        topic = broker.topics.get(name) if name is not None else None
        topic_denied = denied.get(name, 0) if denied else 0
        out_parts = []
        appended = messages = 0
        for index, records in parts:
            msg, record_errors = None, ()
            base_offset, append_time, log_start = -1, -1, -1
            part = replicas.get(name, index) if topic is not None else None
            if refused:
                err = refused
            elif topic_denied:
                err = topic_denied
            elif acks not in (-1, 0, 1):
                err = ErrorCode.invalid_required_acks
            elif part is None:
                err = replicas.missing_error(name, index) if topic is not None else ErrorCode.unknown_topic_or_partition
            elif name in INTERNAL_TOPICS and not internal_allowed:
                err, msg = ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {name}"
            elif records is None:
                err, msg = ErrorCode.corrupt_message, "null record set"
            elif verified is not None and verified.get((name, index), (0,))[0]:
                err, msg = verified[(name, index)][0], "Partition was not added to the transaction" \
                    if verified[(name, index)][0] == ErrorCode.invalid_txn_state else None
            else:
                try:
                    cfg = part.config
                    headers = split_and_validate(records, cfg.max_message_bytes)
                    if "compact" in cfg.cleanup_policy:
                        _check_keys(records, name, index)
                    if cfg.message_timestamp_type == "CreateTime":
                        _check_timestamps(records, headers[0], cfg)
                    target = _TARGET_CODEC.get(cfg.compression_type)
                    if target is not None and headers[0].compression != target:
                        records = _recompress(records, target)
                        headers = split_and_validate(records, cfg.max_message_bytes)
                    if verifying and headers[0].is_transactional:
                        guard = verified.get((name, index), (0, None))[1] if verified else None
                        result = part.append_records_to_leader(records, headers, acks, verification_guard=guard)
                    else:
                        result = part.append_records_to_leader(records, headers, acks)
                    err, msg = result.error_code, result.error_message
                    if err == ErrorCode.none:
                        appended += len(records)
                        if not result.duplicate:
                            messages += result.last_offset - result.base_offset + 1
                        base_offset, append_time = result.base_offset, result.log_append_time
                        if acks == -1:
                            fut = part.wait_for_high_watermark(result.last_offset + 1)
                            if fut is not None:
                                delayed.append((len(out_topics), len(out_parts), part, fut))
                    log_start = result.log_start_offset
                except InvalidRecordError as e:
                    err, msg, record_errors = e.error_code, str(e), e.record_errors
                    if version < 3 and isinstance(e, LegacyMagicError):
                        err = ErrorCode.unsupported_for_message_format
                    log_start = -1 if e.request_level else part.log_start_offset
                    _REJECTED_LOG.log("rejected produce to %s-%d from %s: %s", name, index, req.client_id, e)
                except OSError as e:
                    log.error("append to %s-%d failed: %s", name, index, e)
                    err, msg = ErrorCode.kafka_storage_error, str(e)
            if err in _UNKNOWN_APPEND_INFO:
                log_start = -1
            out_parts.append((index, err, base_offset, append_time, log_start, msg, record_errors))
        out_topics.append((name, out_parts))
        if appended:
            traffic = broker.traffic.topic(name)
            traffic.bytes_in += appended
            traffic.messages_in += messages
    # client quotas: the time handling took so far (not the wait for replication), when any quota is set
    busy = time.perf_counter() - req.busy_since if broker.topics.image.client_quotas and not \
        (internal_allowed and authorize_cluster(broker, req, CLUSTER_ACTION)) else None
    if acks == 0:
        _count_errors(broker, out_topics, acks_zero=True)
        if busy is not None:                # no response, but the connection is muted all the same (as Kafka);
            _throttle(broker, req, None)    # Kafka leaves acks=0 out of the request quota: bytes only
        return None
    if delayed:
        return _delayed_produce(broker, req, out_topics, delayed, timeout_ms, busy)
    _count_errors(broker, out_topics)
    throttle = _throttle(broker, req, busy) if busy is not None else 0
    return encode_response(version, flexible, out_topics, _leaders(broker, version, out_topics, req.listener),
                           throttle)


def _throttle(broker, req, busy: float | None) -> int:
    """producer_byte_rate and request_percentage (broker/quotas.py): record the request's size and handling time
    (None: bytes only), as Kafka's KafkaApis does when it answers; the longer throttle time, which the connection
    also mutes for. Other brokers' writes are never throttled: a client id of theirs is not enough, the principal
    needs CLUSTER_ACTION too (without an authorizer any client may change its quota anyway)."""
    quotas, managers = broker.topics.image.client_quotas, broker.client_quotas
    ms = managers.produce.record(quotas, req.principal, req.client_id, len(req.frame))
    if busy is not None:
        ms = max(ms, managers.record_request_time(quotas, req, busy))
    req.throttle_ms = max(req.throttle_ms, ms)
    return ms


def _count_errors(broker, out_topics, acks_zero: bool = False) -> None:
    """ErrorsPerSec as Kafka counts ProduceResponse.errorCounts: one per partition, NONE included; acks=0 gets no
    response, and Kafka counts its errors only (when it closes the connection over them)."""
    n = 0
    errors = None
    for _, parts in out_topics:
        n += len(parts)
        for p in parts:
            if p[1]:
                if errors is None:
                    errors = {}
                errors[p[1]] = errors.get(p[1], 0) + 1
    broker.request_errors.add(API_KEY, 0 if acks_zero else n - (sum(errors.values()) if errors else 0), errors)


async def _delayed_produce(broker, req, out_topics, delayed, timeout_ms: int, busy: float | None = None):
    """Kafka's DelayedProduce: answer acks=all when the high watermark passes every batch, REQUEST_TIMED_OUT for
    one that it did not pass within the request's timeout, NOT_LEADER_OR_FOLLOWER when leadership moved, and
    NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min.insync.replicas meanwhile."""
    answers = await wait_for_all([(part, fut) for _, _, part, fut in delayed], timeout_ms / 1000)
    for (ti, pi, part, _), answer in zip(delayed, answers):
        err = answer or part.acks_all_error()
        if err:
            index, _, base_offset, append_time, log_start, _, record_errors = out_topics[ti][1][pi]
            out_topics[ti][1][pi] = (index, err, base_offset, append_time, log_start, None, record_errors)
    _count_errors(broker, out_topics)
    version, flexible, listener = req.api_version, req.flexible, req.listener
    throttle = _throttle(broker, req, busy) if busy is not None and broker.topics.image.client_quotas else 0
    return encode_response(version, flexible, out_topics, _leaders(broker, version, out_topics, listener), throttle)


def _leaders(broker, version: int, topics, listener: str = ""):
    """KIP-951's current leaders, with the endpoints of the listener the request came in on."""
    if version < 10:
        return None
    failed = [(name, e[0], e[1]) for name, parts in topics for e in parts if e[1]]
    return current_leaders(broker.topics.image, failed, listener) if failed else None


_TARGET_CODEC = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # "producer": keep as sent


def _check_keys(records, topic: str, index: int) -> None:
    """Kafka's LogValidator for compacted topics: every record needs a key (only these topics decode records). Each
    keyless record is reported (KIP-467 record_errors), with Kafka's processRecordErrors message."""
    try:
        missing = null_key_indexes(records)
    except ValueError as e:
        raise InvalidRecordError(ErrorCode.corrupt_message, f"cannot decode records: {e}") from None
    if missing:
        why = f"Compacted topic cannot accept message without key in topic partition {topic}-{index}."
        raise _rejected(ErrorCode.invalid_record, [(i, why) for i in missing])


def _rejected(code: int, errors: list[tuple[int, str]]) -> InvalidRecordError:
    """KIP-467 record errors with Kafka's processRecordErrors message (the first three shown)."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return InvalidRecordError(code, f"One or more records have been rejected due to {len(errors)} record errors in "
                              f"total, and only showing the first three errors at most: [{shown}]", errors)


def _has_transactional(topics) -> bool:
    """Whether any partition's first batch is a v2 batch flagged transactional (Kafka's hasTransactionalRecords)."""
    for _, parts in topics:
        for _, records in parts:
            if records is not None and len(records) >= 23 and records[16] == 2 and records[22] & 0x10:
                return True
    return False


def _check_timestamps(records, h, cfg) -> None:
    """Kafka's LogValidator.validateTimestamp for CreateTime: every record within message.timestamp.before.max.ms
    behind and message.timestamp.after.max.ms ahead of the broker's clock, else INVALID_TIMESTAMP with each such
    record reported (KIP-467); records without a timestamp (-1) pass. The batch header's first and max timestamps let
    most batches through undecoded (a partition's records are one batch: split_and_validate)."""
    now = int(time.time() * 1000)
    lo, hi = now - cfg.message_timestamp_before_max_ms, now + cfg.message_timestamp_after_max_ms
    if (h.base_timestamp >= lo or h.base_timestamp == -1) and h.max_timestamp <= hi:
        return
    try:
        errors = [(i, f"Timestamp {r.timestamp} of message with offset {r.offset} is out of range. The timestamp "
                      f"should be within [{lo}, {hi}]")
                  for i, r in enumerate(iter_records(records))
                  if r.timestamp != -1 and not lo <= r.timestamp <= hi]
    except ValueError as e:
        raise InvalidRecordError(ErrorCode.corrupt_message, f"cannot decode records: {e}") from None
    if errors:
        raise _rejected(ErrorCode.invalid_timestamp, errors)


def _recompress(records, codec: int) -> bytearray:
    try:
        return recompress_batch(records, codec)
    except ValueError as e:
        raise InvalidRecordError(ErrorCode.corrupt_message, f"cannot recompress batch: {e}") from None


_PID_EPOCH = struct.Struct(">qh")       # a batch's producer id and epoch, at byte 43
_PART_V9 = struct.Struct(">ihqqq")     # index, error, base offset, log append time, log start offset (v5+)
_OK_TAIL_FLEX = b"\x01\x00\x00"          # no record errors, null error message, no tagged fields (v9+)


def encode_response(version: int, flexible: bool, topics, leaders=None, throttle_ms: int = 0) -> list[bytes]:
    current, endpoints = leaders or ({}, ())
    out = [array_len(len(topics), flexible)]
    fast = flexible and version >= 9      # what librdkafka and the Java client send: one pack per successful partition
    for name, parts in topics:
        out.append(string(name, flexible))
        out.append(array_len(len(parts), flexible))
        for index, err, base_offset, append_time, log_start, msg, record_errors in parts:
            if fast and not err and not record_errors and (name, index) not in current:
                out.append(_PART_V9.pack(index, 0, base_offset, append_time, log_start) + _OK_TAIL_FLEX)
                continue
            out.append(I32.pack(index) + I16.pack(err) + I64.pack(base_offset))
            if version >= 2:
                out.append(I64.pack(append_time))
            if version >= 5:
                out.append(I64.pack(log_start))
            if version >= 8:
                out.append(array_len(len(record_errors), flexible))    # record_errors (KIP-467)
                for batch_index, why in record_errors:
                    out.append(I32.pack(batch_index) + string(why, flexible) + (b"\x00" if flexible else b""))
                out.append(string(msg if err else None, flexible))   # error_message
            if flexible:
                leader = current.get((name, index))
                out.append(tagged_fields({0: leader_id_and_epoch(*leader)}) if leader else b"\x00")
        if flexible:
            out.append(b"\x00")
    if version >= 1:
        out.append(I32.pack(min(throttle_ms, 2**31 - 1)))  # throttle_time_ms
    if flexible:
        out.append(tagged_fields({0: node_endpoints(endpoints)}) if endpoints else b"\x00")
    return [b"".join(out)]       # one chunk: a response for 1,000 partitions was thousands of tiny writes
