"""KIP-890 part 1: before a partition leader lets a producer's transaction begin in a partition, it asks the
transaction coordinator whether the partition is in that transaction, or, for transaction version 2 (part 2), asks
it to add the partition (Kafka's AddPartitionsToTxnManager, with AddPartitionsToTxn v4 `verify_only` / v5 when the
coordinator is another broker). A batch that fails is refused, so a late
or stray transactional write cannot leave a transaction open that no coordinator will ever end (a hanging
transaction that would hold the last stable offset forever).

The leader takes a guard from the partition's producer state before asking; a marker written meanwhile voids it, and
the append then fails (storage/log/producer_state.py).
"""
from __future__ import annotations

import asyncio
import logging

from broker.groups.metadata_store import partition_for
from protocol.errors import ErrorCode

log = logging.getLogger("strata.transactions.verify")

# Kafka's ReplicaManager: coordinator errors an older client may not retry become NOT_ENOUGH_REPLICAS (retriable,
# no metadata refresh)
_RETRIABLE = frozenset({ErrorCode.concurrent_transactions, ErrorCode.network_exception,
                        ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                        ErrorCode.not_coordinator, ErrorCode.request_timed_out})


def fenced_as_invalid_epoch(code: int, old_client: bool) -> int:
    """KIP-588: clients before PRODUCER_FENCED (InitProducerId < v4, AddPartitionsToTxn/AddOffsetsToTxn/EndTxn < v2)
    know it as INVALID_PRODUCER_EPOCH."""
    return ErrorCode.invalid_producer_epoch if old_client and code == ErrorCode.producer_fenced else code


def client_error(code: int, generic: bool, produce: bool = True, epoch_bump: bool = False) -> int:
    """A coordinator's verification answer as the producer sees it. `generic`: the client knows
    TRANSACTION_ABORTABLE (Produce v11+, TxnOffsetCommit v4+); older ones get INVALID_TXN_STATE. Retriable
    coordinator errors are NOT_ENOUGH_REPLICAS for a Produce (ReplicaManager); a TxnOffsetCommit gets them as they are,
    a network error as COORDINATOR_LOAD_IN_PROGRESS (GroupMetadataManager.maybeConvertOffsetCommitError)."""
    if code == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if code == ErrorCode.transaction_abortable and not generic:
        return ErrorCode.invalid_txn_state
    if not produce:
        return ErrorCode.coordinator_load_in_progress if code == ErrorCode.network_exception else code
    if code == ErrorCode.concurrent_transactions and epoch_bump:
        return code                      # transaction version 2's clients retry it (Kafka 4.1's ReplicaManager)
    if code in _RETRIABLE:
        return ErrorCode.not_enough_replicas
    return code


async def verify(broker, transactional_id: str, producer_id: int, producer_epoch: int,
                 partitions: set, add: bool = False) -> dict[tuple[str, int], int]:
    """The coordinator's answer per partition (0: in the transaction), before client_error's mapping. `add`: a
    producer of transaction version 2 (Produce v12, TxnOffsetCommit v5): the coordinator adds the partitions to its
    transaction instead of checking them (KIP-890 part 2)."""
    from broker.transactions.coordinator import TXN_TOPIC
    info = broker.topics.get(TXN_TOPIC)
    leader = info.partition(partition_for(transactional_id, info.partitions)).leader if info is not None else -1
    if leader < 0:
        return {tp: ErrorCode.coordinator_not_available for tp in partitions}
    if leader == broker.node_id:
        if add:
            err = await broker.transactions.add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                                           client_version=2)
            return {tp: err for tp in partitions}
        return broker.transactions.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    try:
        resp = await broker.peer_connection(leader).send(24, 5 if add else 4, {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
            "verify_only": not add, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}]})
    except Exception as e:
        log.info("verifying %s with its coordinator (broker %d) failed: %s", transactional_id, leader, e)
        return {tp: ErrorCode.network_exception for tp in partitions}
    if resp.error_code:
        return {tp: int(resp.error_code) for tp in partitions}
    out = {tp: ErrorCode.invalid_txn_state for tp in partitions}
    for txn in resp.results_by_transaction:
        for t in txn.topic_results:
            for r in t.results_by_partition:
                if (t.name, r.partition_index) in out:
                    out[(t.name, r.partition_index)] = int(r.partition_error_code)
    return out


async def add_or_verify(broker, transactional_id: str, producer_id: int, producer_epoch: int, start_guards,
                        add: bool) -> dict:
    """{(topic, partition): (coordinator's answer, guard)} for the partitions `start_guards()` names ({tp: guard},
    a fresh guard where a marker voided the last one). Adding for transaction version 2 is retried on the broker
    while the coordinator answers CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being
    written), every `add.partitions.to.txn.retry.backoff.ms` up to `add.partitions.to.txn.retry.backoff.max.ms`,
    as Kafka's ReplicaManager does, each try with the guards as they are then."""
    coordinator = broker.transactions
    waited = 0
    while True:
        guards = start_guards()
        if not guards:
            return {}
        answers = await verify(broker, transactional_id, producer_id, producer_epoch, set(guards), add=add)
        out = {tp: (answers.get(tp, ErrorCode.invalid_txn_state), g) for tp, g in guards.items()}
        if not add or waited >= coordinator.add_retry_max_ms or \
                any(code != ErrorCode.concurrent_transactions for code, _ in out.values()):
            return out
        await asyncio.sleep(coordinator.add_retry_backoff_ms / 1000)
        waited += coordinator.add_retry_backoff_ms
