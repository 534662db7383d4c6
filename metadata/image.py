"""The metadata image: brokers, topics with ids and configs, partitions with replicas, ISR, leader and leader epoch,
the producer-id watermark, ACLs, SCRAM credentials and client quotas, as of some offset of the metadata log (Kafka's MetadataImage).

An image never changes: `apply(records)` returns a new one, sharing what the records did not touch, so a handler
holding an image sees one consistent state while the controller moves on. Topic objects keep the read API the
partition layer and handlers use (`name`, `topic_id`, `uuid`, `partitions` as a count, `configs`).
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Iterable

from metadata.acls import StandardAcl
from metadata.records import (BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE, AccessControlEntryRecord, BrokerRegistrationChangeRecord, ConfigRecord, LeaderChangeRecord, PartitionRecord, ProducerIdsRecord,
                              RegisterBrokerRecord, RemoveAccessControlEntryRecord, RemoveTopicRecord,
                              RemoveUserScramCredentialRecord, TopicRecord, UserScramCredentialRecord,
                              ClientQuotaRecord)

log = logging.getLogger("strata.metadata")


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: str
    rack: str | None
    endpoints: tuple[tuple[str, str, int], ...]
    fenced: bool = False
    epoch: int = -1             # the broker epoch: the metadata offset of its registration (as in KRaft)

    def endpoint(self, listener: str | None = None) -> tuple[str, int] | None:
        """The (host, port) a client of `listener` reaches this broker at: the endpoint of the same name, as Kafka
        answers each listener's clients with that listener's endpoints; None when this broker has no such listener
        (Kafka leaves it out rather than send a client to a port of another protocol). Without a listener name, the
        first endpoint registered."""
        if listener:
            for name, host, port in self.endpoints:
                if name == listener:
                    return host, port
            return None
        _, host, port = self.endpoints[0]
        return host, port


@dataclass(frozen=True)
class PartitionImage:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding: tuple[int, ...] = ()       # reassignment in progress: the replicas being added,
    removing: tuple[int, ...] = ()     # and those removed when it completes

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas once a reassignment in progress completes (the replicas when none is)."""
        return tuple(r for r in self.replicas if r not in self.removing)


@dataclass(frozen=True)
class TopicImage:
    name: str
    topic_id: str
    partition_states: tuple[PartitionImage, ...] = ()
    configs: dict[str, str] = field(default_factory=dict)     # overrides only; treat as read-only

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)

    @property
    def partitions(self) -> int:
        return len(self.partition_states)

    def partition(self, index: int) -> PartitionImage | None:
        return self.partition_states[index] if 0 <= index < len(self.partition_states) else None


@dataclass(frozen=True)
class ScramCredentialImage:
    """A user's SCRAM credential for one mechanism, as SCRAM authentication needs it (RFC 5802: the server keeps
    the salt, iteration count, StoredKey and ServerKey, never the password)."""
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _check_partition_change(topic: str, index: int, old: PartitionImage, new: PartitionImage, strict: bool) -> None:
    """A change of an existing partition must follow the one it replaces: the next partition epoch (so a change
    computed from an older image cannot be applied after another one), and a leader epoch that never goes back and
    grows whenever the leader changes (Kafka's PartitionChangeBuilder rules; KIP-101/279 truncation relies on it)."""
    if new.partition_epoch != old.partition_epoch + 1:
        _broken(strict, f"partition {topic}-{index}: partition epoch {new.partition_epoch} does not follow "
                        f"{old.partition_epoch}")
    if new.leader_epoch < old.leader_epoch or (new.leader != old.leader and new.leader_epoch == old.leader_epoch):
        _broken(strict, f"partition {topic}-{index}: leader {new.leader} at epoch {new.leader_epoch} after leader "
                        f"{old.leader} at epoch {old.leader_epoch}")


def _broken(strict: bool, why: str) -> None:
    """A record that breaks a rule the controller keeps: refused when the controller generates it; on replay (a log
    written before the rule was checked) applied anyway, with a log line, as Kafka replays what is committed."""
    if strict:
        raise ValueError(why)
    log.warning("metadata replay: %s (applied as written)", why)


def quota_entity(pairs) -> tuple[tuple[str, str | None], ...]:
    """A client quota entity as the image keys it: its (type, name) pairs sorted by type."""
    return tuple(sorted((t, n) for t, n in pairs))


@dataclass(frozen=True)
class MetadataImage:
    offset: int = -1                                   # last applied record of the metadata log
    brokers: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))   # id -> BrokerRegistration
    topics_by_name: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    topics_by_id: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    next_producer_id: int = 0
    controller_id: int = -1                            # the active controller as of this image (-1: none yet)
    controller_epoch: int = 0
    # dynamic configs of BROKER resources ("" is the cluster-wide default, "<id>" one broker) and GROUP resources
    # (KIP-848 group configs): resource name -> {name: value}
    broker_configs: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    group_configs: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    acls: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))     # id -> StandardAcl
    # (user name, mechanism 1 SCRAM-SHA-256 / 2 SCRAM-SHA-512) -> ScramCredentialImage
    scram_credentials: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    # client quotas (Kafka's ClientQuotasImage): entity -> {key: value}, an entity being its ((type, name | None), ...)
    # sorted by type, None naming the type's default ("<default>" in kafka-configs.sh)
    client_quotas: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    # broker id -> partition replicas it hosts (kept as records apply, so max.broker.partitions is checked without a
    # walk over every partition)
    replica_counts: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    # ---- reads (the API `broker.topics` offers) -----------------------------------------------------------------
    def topics(self) -> list[TopicImage]:
        return list(self.topics_by_name.values())

    def get(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def unfenced_brokers(self) -> dict[int, str | None]:
        """The registered, unfenced brokers and their racks: where replicas may go and which replicas are alive."""
        return {b.broker_id: b.rack for b in self.brokers.values() if not b.fenced}

    def by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.topics_by_id.get(topic_id.hex if isinstance(topic_id, uuid.UUID) else topic_id)

    # ---- building the next image ---------------------------------------------------------------------------------
    def apply(self, records: Iterable, *, strict: bool = True) -> "MetadataImage":
        """The image after `records`, in order. Raises ValueError for a record that does not fit this image (a
        partition of an unknown topic, say): the controller validates before it appends, so on replay that means
        a damaged log. `strict=False` (replay) applies, with a warning, records that only break the rules about
        epochs and producer-id blocks (_check_partition_change), which older releases did not check."""
        brokers, by_name, by_id = dict(self.brokers), dict(self.topics_by_name), dict(self.topics_by_id)
        next_pid = self.next_producer_id
        resource_configs = {BROKER_RESOURCE: dict(self.broker_configs), GROUP_RESOURCE: dict(self.group_configs)}
        controller = (self.controller_id, self.controller_epoch)
        acls, scram, quotas = dict(self.acls), dict(self.scram_credentials), dict(self.client_quotas)
        counts = dict(self.replica_counts)

        def count(replicas, change: int) -> None:
            for b in replicas:
                counts[b] = counts.get(b, 0) + change
        n = 0
        for r in records:
            n += 1
            if isinstance(r, RegisterBrokerRecord):
                epoch = r.broker_epoch if r.broker_epoch >= 0 else self.offset + n
                brokers[r.broker_id] = BrokerRegistration(r.broker_id, r.incarnation_id, r.rack,
                                                          tuple(tuple(e) for e in r.endpoints), r.fenced, epoch)
            elif isinstance(r, BrokerRegistrationChangeRecord):
                b = brokers.get(r.broker_id)
                if b is None or b.epoch != r.broker_epoch:
                    raise ValueError(f"broker {r.broker_id} epoch {r.broker_epoch} is not registered")
                brokers[r.broker_id] = replace(b, fenced=r.fenced)
            elif isinstance(r, TopicRecord):
                if r.name in by_name or r.topic_id in by_id:
                    raise ValueError(f"topic {r.name} ({r.topic_id}) exists already")
                t = TopicImage(r.name, r.topic_id)
                by_name[r.name] = by_id[r.topic_id] = t
            elif isinstance(r, PartitionRecord):
                t = by_id.get(r.topic_id)
                if t is None:
                    raise ValueError(f"partition {r.partition} of unknown topic {r.topic_id}")
                states = list(t.partition_states)
                if r.partition > len(states):
                    raise ValueError(f"partition {r.partition} of {t.name} leaves a gap after {len(states) - 1}")
                p = PartitionImage(tuple(r.replicas), tuple(r.isr), r.leader, r.leader_epoch, r.partition_epoch,
                                   tuple(r.adding_replicas), tuple(r.removing_replicas))
                if r.partition == len(states):
                    states.append(p)
                else:
                    _check_partition_change(t.name, r.partition, states[r.partition], p, strict)
                    count(states[r.partition].replicas, -1)
                    states[r.partition] = p
                count(p.replicas, +1)
                t = replace(t, partition_states=tuple(states))
                by_name[t.name] = by_id[t.topic_id] = t
            elif isinstance(r, ConfigRecord):
                if r.resource_type in resource_configs:
                    by_resource = resource_configs[r.resource_type]
                    configs = dict(by_resource.get(r.resource_name, {}))
                    if r.value is None:
                        configs.pop(r.name, None)
                    else:
                        configs[r.name] = r.value
                    if configs:
                        by_resource[r.resource_name] = configs
                    else:
                        by_resource.pop(r.resource_name, None)
                    continue
                if r.resource_type != TOPIC_RESOURCE:
                    raise ValueError(f"config {r.name} of unknown resource type {r.resource_type}")
                t = by_name.get(r.resource_name)
                if t is None:
                    raise ValueError(f"config {r.name} for unknown topic {r.resource_name}")
                configs = dict(t.configs)
                if r.value is None:
                    configs.pop(r.name, None)
                else:
                    configs[r.name] = r.value
                t = replace(t, configs=configs)
                by_name[t.name] = by_id[t.topic_id] = t
            elif isinstance(r, RemoveTopicRecord):
                t = by_id.pop(r.topic_id, None)
                if t is None:
                    raise ValueError(f"removal of unknown topic {r.topic_id}")
                del by_name[t.name]
                for part in t.partition_states:
                    count(part.replicas, -1)
            elif isinstance(r, ProducerIdsRecord):
                if r.next_producer_id <= next_pid:     # blocks are handed out once (Kafka's ProducerIdControlManager)
                    _broken(strict, f"producer id block ending at {r.next_producer_id} is not above {next_pid}")
                next_pid = max(next_pid, r.next_producer_id)
            elif isinstance(r, LeaderChangeRecord):
                if r.controller_epoch <= controller[1]:
                    raise ValueError(f"controller epoch {r.controller_epoch} is not above {controller[1]}")
                controller = (r.controller_id, r.controller_epoch)
            elif isinstance(r, AccessControlEntryRecord):
                if r.id in acls:              # ids are new at every creation (Kafka's AclControlManager.newAclId)
                    raise ValueError(f"ACL {r.id} exists already")
                acls[r.id] = StandardAcl(r.resource_type, r.resource_name, r.pattern_type, r.principal, r.host,
                                         r.operation, r.permission_type)
            elif isinstance(r, RemoveAccessControlEntryRecord):
                if acls.pop(r.id, None) is None:
                    raise ValueError(f"removal of unknown ACL {r.id}")
            elif isinstance(r, UserScramCredentialRecord):    # creates or replaces
                scram[(r.name, r.mechanism)] = ScramCredentialImage(bytes(r.salt), bytes(r.stored_key),
                                                                    bytes(r.server_key), r.iterations)
            elif isinstance(r, RemoveUserScramCredentialRecord):
                if scram.pop((r.name, r.mechanism), None) is None:
                    raise ValueError(f"removal of unknown SCRAM credential of {r.name!r} (mechanism {r.mechanism})")
            elif isinstance(r, ClientQuotaRecord):     # Kafka's ClientQuotaControlManager.replay
                entity = quota_entity(r.entity)
                values = dict(quotas.get(entity, {}))
                if r.remove:
                    values.pop(r.key, None)
                else:
                    values[r.key] = float(r.value)
                if values:
                    quotas[entity] = MappingProxyType(values)
                else:
                    quotas.pop(entity, None)
            else:
                raise ValueError(f"unknown metadata record {type(r).__name__}")
        return MetadataImage(self.offset + n, MappingProxyType(brokers), MappingProxyType(by_name),
                             MappingProxyType(by_id), next_pid, *controller,
                             MappingProxyType(resource_configs[BROKER_RESOURCE]),
                             MappingProxyType(resource_configs[GROUP_RESOURCE]), MappingProxyType(acls),
                             MappingProxyType(scram), MappingProxyType(quotas),
                             MappingProxyType({b: c for b, c in counts.items() if c}))

    def skip(self, n: int) -> "MetadataImage":
        """This image with the offset moved past `n` records that are not applied (a fenced controller's batch)."""
        return replace(self, offset=self.offset + n)

    def to_records(self) -> list:
        """Records that rebuild this image from an empty one (a snapshot's content; the offset is kept beside)."""
        out: list = [RegisterBrokerRecord(b.broker_id, b.incarnation_id, b.rack, list(b.endpoints),
                                          b.fenced, b.epoch) for b in self.brokers.values()]
        for t in self.topics_by_name.values():
            out.append(TopicRecord(t.name, t.topic_id))
            out += [PartitionRecord(t.topic_id, i, list(p.replicas), list(p.isr), p.leader, p.leader_epoch,
                                    p.partition_epoch, list(p.adding), list(p.removing))
                    for i, p in enumerate(t.partition_states)]
            out += [ConfigRecord(TOPIC_RESOURCE, t.name, k, v) for k, v in sorted(t.configs.items())]
        for rtype, by_resource in ((BROKER_RESOURCE, self.broker_configs), (GROUP_RESOURCE, self.group_configs)):
            out += [ConfigRecord(rtype, name, k, v) for name, configs in sorted(by_resource.items())
                    for k, v in sorted(configs.items())]
        out += [AccessControlEntryRecord(i, a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host,
                                         a.operation, a.permission_type) for i, a in self.acls.items()]
        out += [UserScramCredentialRecord(name, mech, c.salt, c.stored_key, c.server_key, c.iterations)
                for (name, mech), c in sorted(self.scram_credentials.items())]
        out += [ClientQuotaRecord(list(entity), k, v) for entity, values in self.client_quotas.items()
                for k, v in sorted(values.items())]
        if self.next_producer_id:
            out.append(ProducerIdsRecord(-1, self.next_producer_id))
        if self.controller_epoch:
            out.append(LeaderChangeRecord(self.controller_id, self.controller_epoch))
        return out
