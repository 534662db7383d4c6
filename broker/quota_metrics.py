"""Prometheus metrics of client quotas per (user, client id), as Kafka's JMX beans
kafka.server:type={Produce,Fetch,Request},user=U,client-id=C show them (attributes byte-rate or request-time, and
throttle-time) and kafka.server:type=ControllerMutation (mutation tokens left). A client shows up once it has a
quota and has been measured; its labels are Kafka's metric tags (an empty string where the quota is not per user or
per client id)."""
from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from broker.quotas import ClientQuotas, now_ms


class ClientQuotaCollector:
    def __init__(self, quotas: ClientQuotas):
        self.quotas = quotas

    def collect(self):
        now = now_ms()
        q = self.quotas
        for kind, manager, attribute, help_text in (
                ("produce", q.produce, "byte_rate", "byte-rate: bytes produced per second"),
                ("fetch", q.fetch, "byte_rate", "byte-rate: bytes fetched per second"),
                ("request", q.request, "request_time", "request-time: percent of one thread spent handling "
                                                       "the client's requests")):
            rate = GaugeMetricFamily(f"kafka_server_{kind}_{attribute}", f"{help_text}, per (user, client id) with a "
                                     f"quota", labels=["user", "client_id"])
            throttle = GaugeMetricFamily(f"kafka_server_{kind}_throttle_time", "throttle-time: mean throttle in ms "
                                         "over the quota windows", labels=["user", "client_id"])
            for tags, sensor in list(manager.sensors.items()):
                rate.add_metric(list(tags), sensor.peek(now))
                throttle.add_metric(list(tags), manager.throttle_avg(tags, now))
            yield rate
            yield throttle
        tokens = GaugeMetricFamily("kafka_server_controllermutation_tokens", "tokens: partitions a (user, client id) "
                                   "may still create or delete at once (controller_mutation_rate)",
                                   labels=["user", "client_id"])
        for tags, bucket in list(q.mutations.buckets.items()):
            if bucket.tokens is not None:
                tokens.add_metric(list(tags), bucket.peek(now))
        yield tokens
