"""A blocking client of DescribeWalPointers (broker/handlers/describe_wal_pointers.py), for readers that plan on a
driver without an event loop (the Spark connector): one request to a partition's leader, its answer decoded.

The connection is secured as the listener needs (`security`, a protocol.client_security.ClientSecurity from Kafka's
client settings): TLS for SSL and SASL_SSL, then for SASL_* the exchange Kafka's SaslClientAuthenticator does,
SaslHandshake v1 and SaslAuthenticate v2 until the mechanism completes (protocol.client.BrokerConnection does the
same on asyncio connections). `connect` and `authenticate` serve other blocking clients too."""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from protocol.replica_fetch import decode_wal_pointers
from protocol.wire import I8, I32, I64, array_len, read_array_len, read_i16, read_i32, read_string, string

CLIENT_ID = "strata-reader"

API_KEY = 21332
_HEADER = struct.Struct(">hhi")
_ABORTED = struct.Struct(">qqq")


@dataclass(frozen=True)
class WalPointers:
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    store: str                  # the fast store's name ("" the default one, else a rack's)
    pointers: list              # protocol.replica_fetch.RemotePointer, in offset order, without a gap
    # v1 (txn_ranges given): the leader's last stable offset, local log start, and the aborted transactions of its
    # local log overlapping the requested range, (producer id, first offset, last offset) in marker order
    last_stable_offset: int = -1
    local_log_start_offset: int = -1
    aborted: tuple | None = None


def describe_wal_pointers(host: str, port: int, topic: str, offsets: dict[int, int], max_bytes: int = 64 << 20,
                          timeout: float = 10.0, correlation_id: int = 1,
                          txn_ranges: dict[int, tuple[int, int]] | None = None,
                          security=None) -> dict[int, WalPointers]:
    """{partition: its pointers from `offsets[partition]` on, below the high watermark}, from the broker at host:port
    (which must lead the partitions; others come back with NOT_LEADER_OR_FOLLOWER). With `txn_ranges`
    ({partition: (start, end)}, every partition of `offsets`) the request is v1 with isolation level
    read_committed, and each answer also carries the aborted transactions of the leader's local log overlapping
    [start, end). `security`: how the listener at host:port wants clients to connect (see `connect`); an
    AuthenticationFailed when it refuses the credentials, OSError when it cannot be reached or closes the
    connection."""
    version = 0 if txn_ranges is None else 1
    body = [I32.pack(max_bytes)]
    if version:
        body.append(I8.pack(1))
    body += [array_len(1, False), string(topic, False), array_len(len(offsets), False)]
    for p, o in offsets.items():
        body += [I32.pack(p), I64.pack(o)]
        if version:
            body += [I64.pack(txn_ranges[p][0]), I64.pack(txn_ranges[p][1])]
    client_id = string(CLIENT_ID, False)
    frame = _HEADER.pack(API_KEY, version, correlation_id) + client_id + b"".join(body)
    with connect(host, port, timeout, security) as s:
        s.sendall(I32.pack(len(frame)) + frame)
        size = I32.unpack(_read(s, 4))[0]
        resp = _read(s, size)
    corr, pos = read_i32(resp, 0)
    if corr != correlation_id:
        raise ConnectionError(f"correlation id {corr}, expected {correlation_id}")
    _, pos = read_i32(resp, pos)                        # throttle time
    n, pos = read_array_len(resp, pos, False)
    out = {}
    for _ in range(n):
        _, pos = read_string(resp, pos, False)
        m, pos = read_array_len(resp, pos, False)
        for _ in range(m):
            index, pos = read_i32(resp, pos)
            err, pos = read_i16(resp, pos)
            hw, start = struct.unpack_from(">qq", resp, pos)
            pos += 16
            lso = local_start = -1
            if version:
                lso, local_start = struct.unpack_from(">qq", resp, pos)
                pos += 16
            size, pos = read_i32(resp, pos)
            store, pointers = decode_wal_pointers(resp[pos:pos + size], 0)
            pos += size
            aborted = None
            if version:
                k, pos = read_array_len(resp, pos, False)
                aborted = tuple(_ABORTED.unpack_from(resp, pos + _ABORTED.size * i) for i in range(k))
                pos += _ABORTED.size * k
            out[index] = WalPointers(index, err, hw, start, store, pointers, lso, local_start, aborted)
    return out


def _read(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


def connect(host: str, port: int, timeout: float, security=None, client_id: str = CLIENT_ID) -> socket.socket:
    """A blocking connection to host:port (`timeout` on every operation), secured as `security` (a
    protocol.client_security.ClientSecurity, None for PLAINTEXT) asks: TLS with its context (the broker's certificate
    checked against host unless host name checking is off), then SASL authentication (`authenticate`). A SASL
    security without a client (settings only librdkafka understands) cannot authenticate: ConnectionRefusedError."""
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        s.settimeout(timeout)
        if security is not None and security.ssl_context is not None:
            s = security.ssl_context.wrap_socket(s, server_hostname=host)
        if security is not None and security.sasl_mechanism is not None:
            authenticate(s, security, f"{host}:{port}", client_id)
        return s
    except BaseException:
        s.close()
        raise


def authenticate(s: socket.socket, security, where: str, client_id: str = CLIENT_ID) -> int:
    """SASL on a fresh connection, before any request but ApiVersions: SaslHandshake v1 with the mechanism, then
    SaslAuthenticate v2 until the mechanism's client completes. Returns the session lifetime the broker answers
    (ms, 0 for none). AuthenticationFailed (protocol.client_security) when the broker does not enable the
    mechanism, refuses the credentials or the exchange breaks off; OSError when the connection fails."""
    from protocol.client_security import AuthenticationFailed
    from protocol.sasl import SaslAuthenticationFailed
    if security.sasl_client is None:
        raise ConnectionRefusedError(f"{where} needs SASL {security.sasl_mechanism}, which this client cannot do "
                                     "(set sasl.jaas.config)")
    client = security.sasl_client()
    hs = _call(s, 17, 1, {"mechanism": security.sasl_mechanism}, client_id)
    if hs.error_code:
        raise AuthenticationFailed(f"{where} does not enable SASL mechanism {security.sasl_mechanism} (it enables "
                                   f"{', '.join(hs.mechanisms) or 'none'})")
    try:
        token = client.initial()
        while True:
            resp = _call(s, 36, 2, {"auth_bytes": token}, client_id)
            if resp.error_code:
                raise AuthenticationFailed(f"SASL authentication with {where} failed: "
                                           f"{resp.error_message or resp.error_code.name}")
            token = client.evaluate(resp.auth_bytes)
            if client.complete:
                return int(resp.session_lifetime.total_seconds() * 1000)
            if token is None:
                raise AuthenticationFailed(f"SASL authentication with {where} failed: the exchange ended early")
    except SaslAuthenticationFailed as e:                 # e.g. a SCRAM server signature that does not verify
        raise AuthenticationFailed(f"SASL authentication with {where} failed: {e.message}") from None


def _call(s: socket.socket, api_key: int, version: int, body, client_id: str):
    """One request on `s` (correlation id 0, as nothing else is in flight), its response decoded."""
    from protocol import kio_codec
    from protocol.client import decode_response, encode_request
    flexible = kio_codec.is_flexible(api_key, version)
    header = _HEADER.pack(api_key, version, 0) + string(client_id, False) + (b"\x00" if flexible else b"")
    data = encode_request(api_key, version, body)
    s.sendall(I32.pack(len(header) + len(data)) + header + data)
    frame = _read(s, I32.unpack(_read(s, 4))[0])
    return decode_response(api_key, version, memoryview(frame)[5 if flexible else 4:])
