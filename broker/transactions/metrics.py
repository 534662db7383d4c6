"""Transaction metrics (Prometheus): what the coordinator on this broker does, so a sum over the cluster counts each
transaction once. Kafka exposes little here (its marker queue sizes and load times); these are the questions users
ask of a transactional pipeline: how many transactions are open, how many end in a commit or an abort, how many the
coordinator aborted because they timed out, and how long the markers take to reach every partition."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")


class TransactionMetrics:
    def __init__(self, registry: CollectorRegistry | None, open_by_state):
        """`open_by_state()`: {state name: count} of this coordinator's transactions, read at scrape time."""
        registry = registry if registry is not None else CollectorRegistry()
        self.open = Gauge("strata_transactions_open", "Transactions this broker coordinates that are open, by state "
                          "(Ongoing, PrepareCommit, PrepareAbort)", ["state"], registry=registry)
        for state in OPEN_STATES:
            self.open.labels(state).set_function(lambda s=state: open_by_state().get(s, 0))
        self.completed = Counter("strata_transactions_completed", "Transactions this broker's coordinator ended "
                                 "(CompleteCommit or CompleteAbort written), by result", ["result"], registry=registry)
        for result in ("commit", "abort"):
            self.completed.labels(result)          # series from the start, at 0
        self.timed_out = Counter("strata_transactions_timed_out_aborted", "Transactions the coordinator aborted "
                                 "because they were open longer than their transaction.timeout.ms",
                                 registry=registry)
        self.marker_latency = Histogram("strata_transaction_marker_latency_seconds", "From PrepareCommit/PrepareAbort "
                                        "in the transaction log to the last partition's marker written",
                                        registry=registry, buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10,
                                                                    30))
