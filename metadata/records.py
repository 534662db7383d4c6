"""The metadata records (Kafka's KRaft records, with Kafka's names): the only way cluster metadata changes.

A record is applied in log order to build the next MetadataImage (metadata/image.py). In the log each record is
wrapped in an envelope carrying the controller epoch that wrote it, so a deposed controller's late appends can be
fenced (the cluster work relies on this; one broker always writes epoch 0).
"""
from __future__ import annotations

from typing import Optional, Union

import msgspec

BROKER_RESOURCE, TOPIC_RESOURCE, GROUP_RESOURCE = 4, 2, 32      # ConfigResource types, as in Kafka's ConfigRecord


class RegisterBrokerRecord(msgspec.Struct, tag="RegisterBroker"):
    broker_id: int
    incarnation_id: str                              # new at every start: tells a restart from a stale registration
    rack: str | None
    endpoints: list[tuple[str, str, int]]            # (listener name, host, port)
    fenced: bool = False
    broker_epoch: int = -1                           # -1: the offset of this record (snapshots keep the original)


class BrokerRegistrationChangeRecord(msgspec.Struct, tag="BrokerRegistrationChange"):
    """Fences or unfences a registered broker (Kafka's record of that name); `broker_epoch` must match."""
    broker_id: int
    broker_epoch: int
    fenced: bool


class TopicRecord(msgspec.Struct, tag="Topic"):
    name: str
    topic_id: str                                    # UUID hex: tiered objects and data dirs key on it


class PartitionRecord(msgspec.Struct, tag="Partition"):
    topic_id: str
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding_replicas: list[int] = []                  # a reassignment in progress (KIP-455): replicas joining
    removing_replicas: list[int] = []                # and replicas leaving once the new ones are in sync


class ConfigRecord(msgspec.Struct, tag="Config"):
    resource_type: int
    resource_name: str
    name: str
    value: str | None                                # None removes the override


class RemoveTopicRecord(msgspec.Struct, tag="RemoveTopic"):
    topic_id: str


class ProducerIdsRecord(msgspec.Struct, tag="ProducerIds"):
    broker_id: int
    next_producer_id: int                            # the first id of the next block to hand out


class LeaderChangeRecord(msgspec.Struct, tag="LeaderChange"):
    """The first record a new active controller appends (Kafka's LeaderChangeMessage control record): from here on
    the log is written at `controller_epoch`, and batches of older epochs are skipped on replay."""
    controller_id: int
    controller_epoch: int


class AccessControlEntryRecord(msgspec.Struct, tag="AccessControlEntry"):
    """One ACL binding (Kafka's record of that name; codes as in metadata/acls.py), kept under `id` so that a
    removal names exactly the binding a DeleteAcls filter matched."""
    id: str                                          # UUID hex
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


class RemoveAccessControlEntryRecord(msgspec.Struct, tag="RemoveAccessControlEntry"):
    id: str


class UserScramCredentialRecord(msgspec.Struct, tag="UserScramCredential"):
    """A user's SCRAM credential for one mechanism (1 SCRAM-SHA-256, 2 SCRAM-SHA-512), created or replaced: the
    keys derived from the salted password, never the password (Kafka's record of that name)."""
    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class RemoveUserScramCredentialRecord(msgspec.Struct, tag="RemoveUserScramCredential"):
    name: str
    mechanism: int


class ClientQuotaRecord(msgspec.Struct, tag="ClientQuota"):
    """One quota of a client entity set or removed (Kafka's ClientQuotaRecord): `entity` is [(entity type "user",
    "client-id" or "ip", name or None for the type's default)], `value` is ignored when `remove`."""
    entity: list[tuple[str, Optional[str]]]
    key: str
    value: float = 0.0
    remove: bool = False


MetadataRecord = Union[RegisterBrokerRecord, BrokerRegistrationChangeRecord, TopicRecord, PartitionRecord, ConfigRecord, RemoveTopicRecord,
                       ProducerIdsRecord, LeaderChangeRecord, AccessControlEntryRecord, RemoveAccessControlEntryRecord,
                       UserScramCredentialRecord, RemoveUserScramCredentialRecord, ClientQuotaRecord]


class Envelope(msgspec.Struct, array_like=True):
    controller_epoch: int
    record: MetadataRecord


class MetadataBatch(msgspec.Struct, array_like=True):
    """One object of the metadata log in the object store (metadata/object_store_log.py): the records one
    append wrote (the operations the controller ran together), all or none, with the epoch of the controller
    that wrote them."""
    controller_epoch: int
    records: list[MetadataRecord]


class MetadataSnapshot(msgspec.Struct, array_like=True):
    """The image as of `offset`, as the records that rebuild it (Kafka's metadata snapshot), so that a broker
    starts from the newest snapshot instead of replaying the whole log."""
    offset: int
    controller_epoch: int
    records: list[MetadataRecord]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Envelope)


def encode(envelope: Envelope) -> bytes:
    return _encoder.encode(envelope)


def decode(data: bytes) -> Envelope:
    """Raises msgspec.DecodeError / ValidationError for bytes that are not an envelope."""
    return _decoder.decode(data)
