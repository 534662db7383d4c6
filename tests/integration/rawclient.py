"""A tiny raw-socket Kafka client for robustness tests.

Requests: the header is packed by hand (so tests can corrupt it), the body is encoded with kio's entity writer from
plain dicts (nested dicts/lists become kio entities). Responses: 4-byte length framing, the response header (v0 for
ApiVersions and non-flexible versions, v1 otherwise), the body decoded with kio's entity reader.

Record batches are built with `protocol.record_batch.build_batch`; fetched record bytes are decoded by this module's
own small RecordBatch v2 reader (uncompressed only, CRC checked), so the tests do not trust the broker's decoder.
"""
from __future__ import annotations

import datetime
import io
import socket
import struct
import time
import uuid
from dataclasses import MISSING, fields, is_dataclass

import crc32c
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field
from protocol.wire import read_varint, read_varlong

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
HEADER_FIXED = struct.Struct(">hhi")

# API keys
PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID = 0, 1, 2, 3, 18, 19, 22


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def is_flexible(api_key: int, version: int) -> bool:
    return bool(load_request_schema(api_key, version).__flexible__)


def _build(schema, data):
    """Build a kio entity of `schema` from a dict; nested dicts / lists of dicts become nested entities."""
    if is_dataclass(data):
        return data
    kw = {}
    for f in fields(schema):
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                cls = classify_field(f)
                if isinstance(cls, EntityTupleField) or getattr(cls, "is_array", False):
                    kw[f.name] = ()
                    continue
                raise KeyError(f"{schema.__qualname__} v{schema.__version__} needs {f.name!r}")
            continue
        value = data[f.name]
        cls = classify_field(f)
        kind = f.metadata.get("kafka_type")
        if value is not None and isinstance(cls, EntityTupleField):
            value = tuple(_build(cls.type_, v) for v in value)
        elif value is not None and isinstance(cls, EntityField):
            value = _build(cls.type_, value)
        elif isinstance(value, list):
            value = tuple(value)
        elif kind in ("timedelta_i32", "timedelta_i64") and isinstance(value, (int, float)):
            value = datetime.timedelta(milliseconds=value)
        elif kind == "uuid" and isinstance(value, (bytes, bytearray)):
            value = uuid.UUID(bytes=bytes(value))
        kw[f.name] = value
    # Keys the version does not have are dropped, so one dict serves several versions.
    return schema(**kw)


def encode_body(api_key: int, version: int, body: dict) -> bytes:
    schema = load_request_schema(api_key, version)
    out = io.BytesIO()
    entity_writer(schema)(out, _build(schema, body))
    return out.getvalue()


def encode_header(api_key: int, version: int, corr: int, client_id: str | None = "rawclient",
                  flexible: bool | None = None, header_tags: bytes = b"\x00") -> bytes:
    """Request header v1 (or v2 with `header_tags` when flexible). client_id is always an int16 string."""
    if flexible is None:
        try:
            flexible = is_flexible(api_key, version)
        except Exception:
            flexible = False
    h = HEADER_FIXED.pack(api_key, version, corr)
    if client_id is None:
        h += I16.pack(-1)
    else:
        b = client_id.encode()
        h += I16.pack(len(b)) + b
    if flexible:
        h += header_tags
    return h


def frame(payload: bytes) -> bytes:
    return I32.pack(len(payload)) + payload


def decode_response(api_key: int, version: int, payload: bytes):
    """payload = the response without its size prefix. Returns (correlation id, kio entity)."""
    payload = bytes(payload)
    corr = I32.unpack_from(payload, 0)[0]
    pos = 4
    if api_key != API_VERSIONS and is_flexible(api_key, version):
        n = payload[pos]
        assert n == 0, f"unexpected response header tagged fields ({n})"
        pos += 1
    entity, used = entity_reader(load_response_schema(api_key, version))(payload, pos)  # -> (entity, bytes read)
    assert pos + used == len(payload), f"{len(payload) - pos - used} trailing bytes after the response body"
    return corr, entity


class ConnectionClosed(Exception):
    pass


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(timeout)
        self.timeout = timeout
        self._corr = 0
        self._buf = bytearray()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- sending -----------------------------------------------------------------------------------------
    def next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, api_key: int, version: int, body: dict | bytes, corr: int | None = None,
             client_id: str | None = "rawclient", header_tags: bytes = b"\x00") -> int:
        corr = self.next_corr() if corr is None else corr
        raw = body if isinstance(body, (bytes, bytearray)) else encode_body(api_key, version, body)
        self.send_bytes(frame(encode_header(api_key, version, corr, client_id, header_tags=header_tags) + raw))
        return corr

    # ---- receiving ---------------------------------------------------------------------------------------
    def _fill(self, n: int, timeout: float | None) -> None:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while len(self._buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete response within the timeout ({len(self._buf)}/{n} bytes)")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 20)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise ConnectionClosed(f"connection closed with {len(self._buf)}/{n} bytes buffered")
            self._buf += chunk

    def recv_frame(self, timeout: float | None = None) -> bytes:
        self._fill(4, timeout)
        size = I32.unpack_from(self._buf, 0)[0]
        assert size >= 4, f"bad response size {size}"
        self._fill(4 + size, timeout)
        out = bytes(self._buf[4:4 + size])
        del self._buf[:4 + size]
        return out

    def recv(self, api_key: int, version: int, corr: int | None = None, timeout: float | None = None):
        got_corr, entity = decode_response(api_key, version, self.recv_frame(timeout))
        if corr is not None:
            assert got_corr == corr, f"correlation id {got_corr}, expected {corr}"
        return entity

    def request(self, api_key: int, version: int, body: dict | bytes, timeout: float | None = None, **kw):
        corr = self.send(api_key, version, body, **kw)
        return self.recv(api_key, version, corr, timeout)

    def wait_closed(self, timeout: float = 5.0) -> bool:
        """True when the peer closes the connection (recv returns b'' or RST) within `timeout`. Bytes received
        meanwhile are discarded but kept in `self.discarded` for error messages."""
        deadline = time.monotonic() + timeout
        self.discarded = bytes(self._buf)
        self._buf.clear()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return True
            except (socket.timeout, TimeoutError):
                return False
            if not chunk:
                return True
            self.discarded += chunk

    # ---- conveniences ------------------------------------------------------------------------------------
    def api_versions(self, version: int = 3):
        body = {"client_software_name": "rawclient", "client_software_version": "1.0"} if version >= 3 else {}
        return self.request(API_VERSIONS, version, body)

    def metadata(self, topics: list[str] | None, version: int = 12, auto_create: bool = True):
        body: dict = {"topics": None if topics is None else [{"name": t} for t in topics]}
        if version >= 4:
            body["allow_auto_topic_creation"] = auto_create
        if version >= 10:
            body["topics"] = None if topics is None else [{"name": t, "topic_id": uuid.UUID(int=0)} for t in topics]
        if version >= 8:
            body["include_topic_authorized_operations"] = False
        return self.request(METADATA, version, body)

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None,
                     version: int = 7):
        resp = self.request(CREATE_TOPICS, version, {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout": 30000, "validate_only": False})
        return resp.topics[0]

    def produce_body(self, topic: str, partition: int, records: bytes | None, acks: int = -1) -> dict:
        return {"acks": acks, "timeout": 30000, "transactional_id": None,
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}

    def produce(self, topic: str, partition: int, records: bytes | None, acks: int = -1, version: int = 9):
        """-> the partition response (error_code, base_offset, ...)."""
        resp = self.request(PRODUCE, version, self.produce_body(topic, partition, records, acks))
        [t] = resp.responses
        [p] = t.partition_responses
        return p

    def fetch_body(self, topic: str | uuid.UUID, partition: int, offset: int, *, max_wait_ms: int = 0,
                   min_bytes: int = 1, max_bytes: int = 50 << 20, session_id: int = 0, session_epoch: int = -1,
                   version: int = 12) -> dict:
        tkey = {"topic_id": topic} if version >= 13 else {"topic": topic}
        return {"replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
                "isolation_level": 0, "session_id": session_id, "session_epoch": session_epoch,
                "topics": [{**tkey, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                    "partition_max_bytes": max_bytes}]}],
                "forgotten_topics_data": [], "rack_id": ""}

    def fetch(self, topic: str | uuid.UUID, partition: int, offset: int, version: int = 12, timeout=None, **kw):
        return self.request(FETCH, version, self.fetch_body(topic, partition, offset, version=version, **kw),
                            timeout=timeout)

    def fetch_partition(self, topic, partition: int, offset: int, **kw):
        """-> the single partition entry of a fetch response."""
        resp = self.fetch(topic, partition, offset, **kw)
        assert resp.error_code == 0, resp
        [t] = resp.responses
        [p] = t.partitions
        return p

    def read_all(self, topic: str, partition: int = 0, start: int = 0) -> list["Rec"]:
        """Every record from `start` to the high watermark, fetched in a loop."""
        out: list[Rec] = []
        offset = start
        for _ in range(10_000):
            p = self.fetch_partition(topic, partition, offset)
            assert p.error_code == 0, p
            recs = [r for r in decode_batches(p.records or b"") if r.offset >= offset]
            out.extend(recs)
            if recs:
                offset = recs[-1].offset + 1
            if offset >= p.high_watermark:
                return out
            if not recs:
                raise AssertionError(f"fetch at {offset} < hw {p.high_watermark} returned no records")
        raise AssertionError("read_all did not finish")

    def init_producer_id(self, version: int = 4, producer_id: int = -1, producer_epoch: int = -1):
        body: dict = {"transactional_id": None, "transaction_timeout": 60000}
        if version >= 3:
            body.update(producer_id=producer_id, producer_epoch=producer_epoch)
        resp = self.request(INIT_PRODUCER_ID, version, body)
        assert resp.error_code == 0, resp
        return resp.producer_id, resp.producer_epoch


# ---- RecordBatch v2 reading ------------------------------------------------------------------------------------

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # 61 bytes


class Rec:
    __slots__ = ("offset", "key", "value", "producer_id", "base_sequence")

    def __init__(self, offset, key, value, producer_id, base_sequence):
        self.offset, self.key, self.value = offset, key, value
        self.producer_id, self.base_sequence = producer_id, base_sequence

    def __repr__(self):
        return f"Rec({self.offset}, {self.key!r}, {self.value!r})"


def decode_batches(data: bytes) -> list[Rec]:
    """All records in the complete batches of `data` (a trailing partial batch is ignored, as Kafka allows).

    Asserts CRC-32C, magic 2, no compression and record count == lastOffsetDelta + 1, i.e. that the broker
    stored and served exactly what a client sent.
    """
    data = bytes(data)
    out: list[Rec] = []
    pos = 0
    while len(data) - pos >= 61:
        (base, blen, _ple, magic, crc, attrs, lod, _bts, _mts, pid, _pepoch, bseq,
         count) = BATCH_HEADER.unpack_from(data, pos)
        end = pos + 12 + blen
        if end > len(data):
            break
        assert magic == 2, f"magic {magic} at byte {pos}"
        assert crc32c.crc32c(data[pos + 21:end]) == crc, f"CRC mismatch in the batch at offset {base}"
        assert attrs & 0x07 == 0, "compressed batch: rawclient decodes only uncompressed batches"
        assert count == lod + 1, (count, lod)
        p = pos + 61
        if not attrs & 0x20:  # skip control batches
            for _ in range(count):
                length, p = read_varint(data, p)
                rend = p + length
                p += 1  # attributes
                _ts, p = read_varlong(data, p)
                odelta, p = read_varint(data, p)
                klen, p = read_varint(data, p)
                key = None if klen < 0 else data[p:p + klen]
                p += max(klen, 0)
                vlen, p = read_varint(data, p)
                value = None if vlen < 0 else data[p:p + vlen]
                p = rend
                out.append(Rec(base + odelta, key, value, pid, bseq))
            assert p == end, f"records section of the batch at {base} has {end - p} stray bytes"
        pos = end
    return out
