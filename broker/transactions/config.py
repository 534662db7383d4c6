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
}
