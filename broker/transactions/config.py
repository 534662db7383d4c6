"""The transaction coordinator's settings: Kafka's names and defaults (docs/configuration.md)."""

TXN_DEFAULTS: dict[str, str] = {
    "transaction.state.log.num.partitions": "50",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.segment.bytes": "104857600",
    "transaction.state.log.load.buffer.size": "5242880",
    "transaction.max.timeout.ms": "900000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "transaction.partition.verification.enable": "true",
    "request.timeout.ms": "30000",
    "add.partitions.to.txn.retry.backoff.ms": "20",
    "add.partitions.to.txn.retry.backoff.max.ms": "100",
    # the `transaction.version` feature level (Kafka sets it with kafka-storage format / kafka-features; a new Kafka
    # 4 cluster has 2): finalized in ApiVersions, so Kafka 4's clients use transaction version 2 when it is 2
    "transaction.version": "2",
}
