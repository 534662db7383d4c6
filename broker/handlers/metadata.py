"""Metadata (key 3): brokers, topics with ids (needed for Fetch v13+), partitions with leader, leader epoch,
replicas and ISR, all from one metadata image; auto-creates topics. The request is decoded with kio; the response
is encoded by hand (see encode_response)."""
from __future__ import annotations

import struct

from broker.topic_admin import auto_create
from broker.handlers.produce import INTERNAL_TOPICS
from broker.security.authorization import (CREATE, DESCRIBE, TOPIC, TOPIC_DENIED, authorize_cluster,
                                           authorized_operations, cluster_authorized_operations, name_checker)
from protocol import kio_codec
from protocol.errors import ErrorCode
from protocol.kio_codec import EncodedResponse
from protocol.wire import I16, I32, array_len, string

API_KEY = 3
VERSIONS = (0, 12)
DECODABLE = (0, 12)



def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    allow_auto = getattr(body, "allow_auto_topic_creation", True) and broker.config.get_bool("auto.create.topics.enable")
    requested = body.topics
    describable = name_checker(broker, req, DESCRIBE)     # None without an authorizer
    if requested is not None and allow_auto:
        missing = [rt.name for rt in requested if getattr(rt, "name", None) and broker.topics.get(rt.name) is None
                   and (describable is None or describable(rt.name))]
        denied = {}
        if missing and describable is not None and not authorize_cluster(broker, req, CREATE):
            creatable = name_checker(broker, req, CREATE)      # Kafka: CREATE on the cluster or on the topic
            denied = {n: TOPIC_DENIED for n in missing if not creatable(n)}
            missing = [n for n in missing if n not in denied]
        if missing:
            return _create_then_answer(broker, req, v, body, missing, denied)
        return _answer(broker, req, v, body, denied, describable)
    return _answer(broker, req, v, body, {}, describable)


async def _create_then_answer(broker, req, v, body, missing, errors: dict):
    for name in missing:
        err, _ = await auto_create(broker, name)
        if err:
            errors[name] = err
    return _answer(broker, req, v, body, errors, name_checker(broker, req, DESCRIBE))


def _answer(broker, req, v, body, create_errors: dict, describable=None):
    """The response; with an authorizer (Kafka's handleTopicMetadataRequest) all-topics requests leave out the
    topics the principal may not describe, named ones answer TOPIC_AUTHORIZATION_FAILED without saying whether
    they exist, and the KIP-430 authorized operations asked for (v8+) are filled in."""
    requested = body.topics
    topics = []      # (error, name, topic image or None, topic id or None)
    if requested is None or (v == 0 and len(requested) == 0):
        topics = [(0, t.name, t, None) for t in broker.topics.topics()
                  if describable is None or describable(t.name)]
    else:
        for rt in requested:
            name = getattr(rt, "name", None)
            topic_id = getattr(rt, "topic_id", None)
            # A non-zero id wins over the name, as in Kafka's KafkaApis: the Java admin client's describeTopics by
            # id sends the name as "" (the field's default), not null.
            if topic_id is not None and topic_id.int != 0:
                info = broker.topics.by_id(topic_id)
                topics.append((ErrorCode.unknown_topic_id, None, None, topic_id) if info is None
                              else (TOPIC_DENIED, None, None, topic_id) if describable and not describable(info.name)
                              else (0, info.name, info, None))
                continue
            if describable is not None and not describable(name):
                topics.append((TOPIC_DENIED, name, None, None))
                continue
            info = broker.topics.get(name) if name else None
            if info is None:
                topics.append((create_errors.get(name, ErrorCode.unknown_topic_or_partition), name, None, None))
            else:
                topics.append((0, name, info, None))
    image = broker.topics.image
    brokers = [(b.broker_id, *ep, b.rack) for b in image.brokers.values()
               if not b.fenced and (ep := b.endpoint(req.listener)) is not None]
    topic_ops = cluster_ops = None
    if v >= 8 and getattr(body, "include_topic_authorized_operations", False):
        topic_ops = [authorized_operations(broker, req, TOPIC, t[1]) if t[0] not in _NO_OPS and t[1] else
                     _UNAUTHORIZED_OPS for t in topics]
    if 8 <= v <= 10 and getattr(body, "include_cluster_authorized_operations", False):
        cluster_ops = cluster_authorized_operations(broker, req)
    return encode_response(v, brokers, broker.cluster_id, image.controller_id, topics, topic_ops=topic_ops,
                           cluster_ops=cluster_ops)


_NO_OPS = (TOPIC_DENIED, ErrorCode.unknown_topic_id)   # answers Kafka gives no authorized operations


# ---- encoding, by hand: kio's generic encoder took ~30 ms for one 1,000-partition topic, and clients ask often ----

_UNAUTHORIZED_OPS = -2147483648       # authorized operations not requested (INT32_MIN)
_ZERO_UUID = bytes(16)
_partitions_cache: dict[tuple, tuple] = {}


def encode_response(v: int, brokers, cluster_id: str | None, controller_id: int, topics, *, topic_ops=None,
                    cluster_ops=None) -> EncodedResponse:
    """MetadataResponse v0-12 (flexible from v9). `brokers`: (node id, host, port, rack); `topics`: (error code,
    name, TopicImage or None, requested topic id or None); `topic_ops` (one per topic) and `cluster_ops`: KIP-430
    authorized operations, when asked for."""
    flex = v >= 9
    tag = b"\x00" if flex else b""
    out = []
    if v >= 3:
        out.append(I32.pack(0))                                    # throttle_time_ms
    out.append(array_len(len(brokers), flex))
    for node_id, host, port, rack in brokers:
        out.append(I32.pack(node_id) + string(host, flex) + I32.pack(port))
        if v >= 1:
            out.append(string(rack, flex))
        out.append(tag)
    if v >= 2:
        out.append(string(cluster_id, flex))
    if v >= 1:
        out.append(I32.pack(controller_id))
    out.append(array_len(len(topics), flex))
    counts: dict[int, int] = {}
    for i, (error, name, info, topic_id) in enumerate(topics):
        counts[error] = counts.get(error, 0) + 1
        out.append(I16.pack(error) + string(name, flex))
        if v >= 10:
            out.append(bytes.fromhex(info.topic_id) if info is not None
                       else topic_id.bytes if topic_id is not None else _ZERO_UUID)
        if v >= 1:
            # is_internal: Kafka's Topic.isInternal (false for a topic it may not describe)
            out.append(b"\x01" if name in INTERNAL_TOPICS and error != TOPIC_DENIED else b"\x00")
        if info is None:
            out.append(array_len(0, flex))
        else:
            n = len(info.partition_states)
            counts[0] = counts.get(0, 0) + n
            out.append(array_len(n, flex))
            out.append(_partitions(info.partition_states, v))
        if v >= 8:
            out.append(I32.pack(topic_ops[i] if topic_ops else _UNAUTHORIZED_OPS))   # topic_authorized_operations
        out.append(tag)
    if 8 <= v <= 10:
        out.append(I32.pack(_UNAUTHORIZED_OPS if cluster_ops is None else cluster_ops))   # cluster_authorized_ops
    out.append(tag)
    encoded = EncodedResponse(b"".join(out))
    encoded.error_counts = counts               # Kafka's errorCounts: every topic's and every partition's code
    return encoded


def _partitions(states, v: int) -> bytes:
    """The encoded partitions of one topic image, cached while the image's partition tuple is the same object (an
    image change that touches a topic's partitions makes a new tuple)."""
    shape = (v >= 9, v >= 7, v >= 5)
    key = (id(states), shape)
    hit = _partitions_cache.get(key)
    if hit is not None and hit[0] is states:
        return hit[1]
    flex, epoch, offline = shape
    out = []
    for i, p in enumerate(states):
        out.append(_PART_HEAD.pack(0, i, p.leader))
        if epoch:
            out.append(I32.pack(p.leader_epoch))
        for nodes in (p.replicas, p.isr):
            out.append(array_len(len(nodes), flex) + b"".join(map(I32.pack, nodes)))
        if offline:
            out.append(array_len(0, flex))                        # offline_replicas: no offline log dirs
        if flex:
            out.append(b"\x00")
    data = b"".join(out)
    if len(_partitions_cache) > 4096:
        _partitions_cache.clear()
    _partitions_cache[key] = (states, data)
    return data


_PART_HEAD = struct.Struct(">hii")     # error code, partition index, leader id
