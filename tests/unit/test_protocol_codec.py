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
