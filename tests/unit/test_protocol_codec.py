import io
import uuid

import pytest

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.serial import entity_reader, entity_writer

from broker.fetch_session import FetchSessionCache
from protocol.errors import ErrorCode
from protocol import kio_codec
from protocol.wire import MalformedRequest, read_uvarint, uvarint


def _encode(entity) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def test_unknown_tagged_field_in_body_is_skipped():
    raw = _encode(ApiVersionsRequest(client_software_name="c", client_software_version="1"))
    with_tag = raw[:-1] + bytes([1, 7, 3]) + b"xyz"   # one unknown tag (7) of 3 bytes
    decoded = kio_codec.decode_request(18, 3, with_tag, 0)
    assert decoded.client_software_name == "c" and decoded.client_software_version == "1"


def test_unknown_tagged_field_in_nested_struct_is_skipped():
    req = MetadataRequest(topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="abc"),),
                          allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    raw = _encode(req)
    # The nested topic ends with its tagged-field count (0) right before allow_auto_topic_creation.
    idx = raw.index(b"abc") + 3
    assert raw[idx] == 0
    patched = raw[:idx] + bytes([1, 5, 1]) + b"!" + raw[idx + 1:]
    decoded = kio_codec.decode_request(3, 12, patched, 0)
    assert decoded.topics[0].name == "abc" and decoded.allow_auto_topic_creation is True


def test_to_entity_fits_one_dict_to_every_version():
    body = {"throttle_time": 0, "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
            "cluster_id": "c", "controller_id": 1, "topics": [], "cluster_authorized_operations": 0}
    for v in (0, 1, 5, 9, 12):
        raw = kio_codec.encode_response(3, v, body)
        decoded, n = entity_reader(kio_codec.response_schema(3, v))(raw, 0)
        assert n == len(raw)
        assert decoded.brokers[0].host == "h"


def test_responses_carry_their_error_codes_as_kafka_counts_them():
    """Kafka's errorCounts(): Metadata counts each topic's and each partition's code, OffsetFetch v8 each group's
    and each partition's, NONE included; a body received from another broker gets the same counts."""
    part = {"partition_index": 0, "leader_id": 1, "leader_epoch": 0, "replica_nodes": [], "isr_nodes": [],
            "offline_replicas": []}
    body = {"throttle_time": 0, "brokers": [], "cluster_id": "c", "controller_id": 1, "topics": [
        {"name": "a", "error_code": ErrorCode.unknown_topic_or_partition, "partitions": []},
        {"name": "b", "error_code": 0, "partitions": [dict(part, error_code=0),
                                                      dict(part, partition_index=1, error_code=9)]}]}
    for v in (1, 12):
        raw = kio_codec.encode_response(3, v, body)
        assert raw.error_counts == {3: 1, 0: 2, 9: 1}
        assert kio_codec.with_error_counts(3, v, bytes(raw)).error_counts == {3: 1, 0: 2, 9: 1}
    groups = {"throttle_time": 0, "groups": [
        {"group_id": "g", "error_code": 0, "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 5, "metadata": "", "error_code": 0},
            {"partition_index": 1, "committed_offset": -1, "metadata": "", "error_code": 3}]}]},
        {"group_id": "h", "error_code": ErrorCode.coordinator_load_in_progress, "topics": []}]}
    assert kio_codec.encode_response(9, 8, groups).error_counts == {0: 2, 3: 1, 14: 1}
    assert kio_codec.with_error_counts(3, 12, b"\x00garbage") == b"\x00garbage"     # as it came: not counted


def test_uvarint_round_trip_and_errors():
    for v in (0, 1, 127, 128, 300, 2**31 - 1):
        enc = uvarint(v)
        assert read_uvarint(enc, 0) == (v, len(enc))
    assert read_uvarint(b"\xff\xff\xff\xff\x0f", 0) == (2**32 - 1, 5)   # the longest Kafka accepts
    for bad in (b"\x80\x80", b"\x80\x80\x80\x80\x80\x01"):            # truncated; 6 bytes
        with pytest.raises(MalformedRequest):
            read_uvarint(bad, 0)


def test_fetch_session_cache_epochs_and_eviction():
    cache = FetchSessionCache(2)
    a = cache.new_session()
    b = cache.new_session()
    assert cache.lookup(a.session_id, 1)[0] is a
    assert cache.lookup(a.session_id, 5) == (None, ErrorCode.invalid_fetch_session_epoch)
    c = cache.new_session()                      # evicts the least recently used (b)
    assert cache.lookup(b.session_id, 1) == (None, ErrorCode.fetch_session_id_not_found)
    assert cache.lookup(c.session_id, 1)[0] is c


def test_nulls_where_the_schema_forbids_them_are_malformed():
    """kio decodes a -1 length into None whatever the schema says; the structure walk refuses it as Kafka's
    generated readers do, so handlers never see None in a non-nullable field."""
    import struct

    from protocol import kio_codec
    from protocol.wire import MalformedRequest

    def decode(api, version, body):
        return kio_codec.decode_request(api, version, memoryview(body).toreadonly(), 0)

    v2_head = struct.pack(">h", 1) + b"g" + struct.pack(">i", 1) + struct.pack(">h", 1) + b"m" + struct.pack(">q", -1)
    for api, version, body, field in (
            (8, 8, b"\x02g" + struct.pack(">i", 1) + b"\x02m" + b"\x00" + b"\x00" + b"\x00", "topics"),   # compact
            (8, 2, v2_head + struct.pack(">i", -1), "topics"),                                              # classic
            (8, 2, v2_head + struct.pack(">i", -7), "topics")):                                             # < -1
        with pytest.raises(MalformedRequest, match=field):
            decode(api, version, body)
    # a nullable field may be null: group_instance_id (v8) and a legitimately empty topics array
    ok = decode(8, 8, b"\x02g" + struct.pack(">i", 1) + b"\x02m" + b"\x00" + b"\x01" + b"\x00")
    assert ok.group_instance_id is None and ok.topics == ()


# --- mutated requests: decode_request returns a well-formed entity or raises MalformedRequest ---------------

def _sample_entity(schema):
    """An instance of kio request `schema` with every field set (tagged ones too) and two elements per array, so
    mutations hit every kind of field."""
    import datetime
    from dataclasses import fields

    from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_schema_field_type

    samples = {"float64": 1.5, "bool": True, "string": "s", "bytes": b"xy", "records": b"xy",
               "uuid": uuid.UUID(int=5), "error_code": ErrorCode.none,
               "timedelta_i32": datetime.timedelta(milliseconds=5), "timedelta_i64": datetime.timedelta(milliseconds=5),
               "datetime_i64": datetime.datetime.fromtimestamp(5, datetime.timezone.utc)}
    kw = {}
    for f in fields(schema):
        cls = classify_field(f)
        if isinstance(cls, EntityTupleField):
            kw[f.name] = (_sample_entity(cls.type_), _sample_entity(cls.type_))
        elif isinstance(cls, EntityField):
            kw[f.name] = _sample_entity(cls.type_)
        else:
            v = samples.get(get_schema_field_type(f), 1)
            kw[f.name] = (v, v) if cls.is_array else v
    return schema(**kw)


def _null_where_forbidden(entity, path: str) -> list[str]:
    """The fields of a decoded entity that hold None although their annotation is not `X | None` (the check is
    independent of the structure walk: it reads the decoded objects, as a handler does)."""
    from dataclasses import fields, is_dataclass
    from types import NoneType, UnionType
    from typing import get_args, get_origin

    def nullable(t):
        return get_origin(t) is UnionType and NoneType in get_args(t)

    bad = []
    for f in fields(entity):
        value, where = getattr(entity, f.name), f"{path}.{f.name}"
        if value is None:
            if not nullable(f.type):
                bad.append(where)
        elif isinstance(value, tuple):
            inner = next(a for a in get_args(f.type) if a is not NoneType) if nullable(f.type) else f.type
            element_nullable = nullable(get_args(inner)[0])
            for i, item in enumerate(value):
                if item is None and not element_nullable:
                    bad.append(f"{where}[{i}]")
                elif is_dataclass(item):
                    bad += _null_where_forbidden(item, f"{where}[{i}]")
        elif is_dataclass(value):
            bad += _null_where_forbidden(value, where)
    return bad


def _mutate(rng, raw: bytes) -> bytes:
    b = bytearray(raw)
    for _ in range(rng.randint(1, 3)):
        if not b:
            break
        i = rng.randrange(len(b))
        kind = rng.randrange(5)
        if kind == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b[i:i + rng.choice((1, 2, 4))] = b"\xff" * 4             # -1 lengths, nulls, huge varints
        elif kind == 2:
            b[i] = 0
        elif kind == 3:
            del b[i:]
        else:
            b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(b)


def test_mutated_requests_decode_well_formed_or_raise_malformed():
    """Every API the broker decodes with kio, every decodable version: seeded mutations of a full request either
    decode into an entity with no None outside nullable fields or raise MalformedRequest, whatever kio raised
    underneath (several unrelated types, all seen here). The None check reads the decoded objects, independently of
    the structure walk that refuses those nulls before kio decodes them."""
    import random

    from broker.handlers import load_handlers

    rng = random.Random(20261125)
    decoded = refused = 0
    causes = set()
    for api_key, mod in sorted(load_handlers().items()):
        if api_key in (0, 21332):     # Produce and DescribeWalPointers are parsed by hand (tests below)
            continue
        for version in range(mod.DECODABLE[0], mod.DECODABLE[1] + 1):
            schema = kio_codec.request_schema(api_key, version)
            raw = _encode(_sample_entity(schema))
            assert not _null_where_forbidden(kio_codec.decode_request(api_key, version, raw, 0), "")
            for _ in range(150):
                data = _mutate(rng, raw)
                try:
                    entity = kio_codec.decode_request(api_key, version, memoryview(data).toreadonly(), 0)
                except MalformedRequest as e:
                    refused += 1
                    causes.add(str(e).split(": ")[1])
                    continue
                decoded += 1
                bad = _null_where_forbidden(entity, schema.__name__)
                assert not bad, f"{schema.__name__} v{version} decoded {data.hex()} with None in {bad}"
    assert decoded > 1000 and refused > 1000, (decoded, refused)
    # the structure walk refused some, and kio's own exceptions (which ones depends on what the walk leaves it) were
    # each turned into MalformedRequest by decode_request
    assert "StructureError" in causes and len(causes & {"InvalidUnicode", "ValueError", "BufferUnderflow"}) >= 2, \
        causes


def test_produce_parse_raises_only_malformed_request():
    """Produce is parsed by hand (records stay a view of the frame): on garbage it raises MalformedRequest and
    nothing else, and refuses the nulls ProduceRequestData.read refuses (arrays and topic names)."""
    import random
    import struct

    from broker.handlers.produce import parse

    rng = random.Random(467)
    for version in (3, 8, 9, 11):
        flexible = kio_codec.is_flexible(0, version)
        raw = _encode(_sample_entity(kio_codec.request_schema(0, version)))
        txn, acks, timeout, topics = parse(raw, 0, version, flexible)
        assert (txn, acks, topics[0][0], bytes(topics[0][1][1][1])) == ("s", 1, "s", b"xy")
        refused = 0
        for _ in range(2000):
            data = bytearray(_mutate(rng, raw))
            try:
                parse(data, 0, version, flexible)
            except MalformedRequest:
                refused += 1
        assert refused > 200
    head = struct.pack(">hhi", -1, 1, 1000)                       # v3: null transactional id, acks, timeout
    for body, why in ((head + struct.pack(">i", -1), "topic_data was serialized as null"),
                      (head + struct.pack(">i", -2), "topic_data: array length -2"),
                      (head + struct.pack(">ih", 1, -1), "name was serialized as null"),
                      (head + struct.pack(">ihci", 1, 1, b"t", -1), "partition_data was serialized as null")):
        with pytest.raises(MalformedRequest, match=why):
            parse(body, 0, 3, False)
    assert parse(head + struct.pack(">ihcii", 1, 1, b"t", 1, 0) + struct.pack(">i", -1), 0, 3, False)[3] == \
        [("t", [(0, None)])]                                          # null records are allowed (nullable)


def test_a_null_in_a_known_tagged_field_is_refused():
    """BrokerHeartbeat v1's offline_log_dirs (tag 0) is a non-nullable array: a null there (found by the mutation
    test) is malformed, as Kafka's reader says, not an entity with None where a handler expects a tuple."""
    data = bytes.fromhex("00000001000000010000000100000000000000010101010021000000000000000000000000000000000500000000"
                         "000000000000000000000005")
    with pytest.raises(MalformedRequest):
        kio_codec.decode_request(63, 1, memoryview(data).toreadonly(), 0)


def test_mutated_describe_wal_pointers_requests_decode_or_raise_malformed():
    """Strata's own DescribeWalPointers is parsed by hand: mutations decode or raise MalformedRequest, nothing else."""
    import random
    import struct

    from broker.handlers.describe_wal_pointers import decode
    raw = struct.pack(">ii", 1 << 20, 2) + struct.pack(">h", 3) + b"abc" + struct.pack(">iiq", 1, 0, 7) + \
        struct.pack(">h", 1) + b"x" + struct.pack(">iiqiq", 2, 1, 5, 2, 0)
    assert decode(raw, 0) == (1 << 20, 0, [("abc", [(0, 7)]), ("x", [(1, 5), (2, 0)])])
    # v1 (read_committed readers): an isolation level, and a transaction range per partition
    raw1 = struct.pack(">ibi", 1 << 20, 1, 1) + struct.pack(">h", 1) + b"x" + struct.pack(">iiqqq", 1, 3, 5, 0, 9)
    assert decode(raw1, 0, 1) == (1 << 20, 1, [("x", [(3, 5, 0, 9)])])
    rng = random.Random(21332)
    decoded = refused = 0
    for version, data in ((0, raw), (1, raw1)):
        for _ in range(2000):
            mutated = _mutate(rng, data)
            try:
                decode(mutated, 0, version)
                decoded += 1
            except MalformedRequest:
                refused += 1
    assert decoded and refused
