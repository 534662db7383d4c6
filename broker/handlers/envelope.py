"""Envelope (key 58, KIP-590): a broker forwards a client's admin request to the active controller wrapped with the
client's principal and address, so the controller authorizes the client, not the forwarding broker. Only brokers
send it: it is accepted on the inter-broker and controller listeners only, from a principal with CLUSTER_ACTION on
the cluster, and it is not advertised to clients, as in Kafka."""
from __future__ import annotations

import inspect
import ipaddress
import struct

from broker.handlers import Request
from broker.security.authorization import authorize
from metadata.acls import CLUSTER_NAME, AclOperation, ResourceType
from protocol import kio_codec
from protocol.errors import ErrorCode
from protocol.wire import HEADER_FIXED, MalformedRequest, read_i16, skip_tagged_fields

API_KEY = 58
VERSIONS = (0, 0)
DECODABLE = (0, 0)
CONTROLLER_ONLY = True

_VERSION = struct.Struct(">h")


def serialize_principal(principal: str) -> bytes:
    """Kafka's DefaultKafkaPrincipalBuilder.serialize: DefaultPrincipalData v0, prefixed with its version."""
    from kio.schema.default_principal_data.v0 import DefaultPrincipalData
    kind, _, name = principal.partition(":")
    entity = DefaultPrincipalData(type_=kind, name=name, token_authenticated=False)
    import io
    out = io.BytesIO()
    kio_codec._writer(DefaultPrincipalData)(out, entity)
    return _VERSION.pack(0) + out.getvalue()


def deserialize_principal(data: bytes) -> str:
    """Raises MalformedRequest for anything but a DefaultPrincipalData v0 (kio's own errors included), which the
    handler answers PRINCIPAL_DESERIALIZATION_FAILURE, as Kafka's EnvelopeUtils.parseForwardedPrincipal."""
    from kio.schema.default_principal_data.v0 import DefaultPrincipalData
    if len(data) < 2 or _VERSION.unpack_from(data, 0)[0] != 0:
        raise MalformedRequest("envelope principal is not DefaultPrincipalData v0")
    try:
        entity, _ = kio_codec._reader(DefaultPrincipalData)(memoryview(bytes(data)).toreadonly(), 2)
    except Exception as e:      # kio raises several unrelated types (see kio_codec.decode_request)
        raise MalformedRequest(f"envelope principal: {type(e).__name__}: {e}") from None
    return f"{entity.type_}:{entity.name}"


def wrap(req) -> dict:
    """The Envelope body that forwards `req` (the client's request frame, its principal and address)."""
    host = (req.client_host or "/0.0.0.0").lstrip("/")
    try:
        address = ipaddress.ip_address(host).packed
    except ValueError:
        address = bytes(4)
    return {"request_data": bytes(req.frame), "request_principal": serialize_principal(req.principal),
            "client_host_address": address}


async def handle(broker, req):
    body = kio_codec.decode_request(API_KEY, 0, req.readonly(), req.body_offset)

    def reply(error: int, data: bytes | None = None):
        return kio_codec.encode_response(API_KEY, 0, {"response_data": data, "error_code": error})

    listeners = broker.security.listeners
    if req.listener not in (listeners.inter_broker, listeners.controller):
        # Kafka's KafkaApis.handleEnvelope: only from the privileged (inter-broker) listener; a client elsewhere could
        # otherwise name any principal
        raise MalformedRequest(f"Envelope on listener {req.listener}, which is not the inter-broker or controller "
                               f"listener")
    if not authorize(broker, req, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return reply(ErrorCode.cluster_authorization_failed)
    if not broker.controller.active:
        return reply(ErrorCode.not_controller)
    frame = bytearray(body.request_data)
    if len(frame) < 10:
        return reply(ErrorCode.invalid_request)
    api_key, version, corr = HEADER_FIXED.unpack_from(frame, 0)
    handler = broker.handlers.get(api_key)
    if handler is None or not handler.__dict__.get("FORWARDED_TO_CONTROLLER") or \
            not handler.DECODABLE[0] <= version <= handler.DECODABLE[1]:
        return reply(ErrorCode.invalid_request)
    flexible = kio_codec.is_flexible(api_key, version)
    n, pos = read_i16(frame, 8)
    client_id = frame[pos:pos + n].decode("utf-8", "replace") if n >= 0 else None
    pos += max(n, 0)
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    address = bytes(body.client_host_address)
    try:
        host = "/" + str(ipaddress.ip_address(address))
    except ValueError:
        return reply(ErrorCode.invalid_request)
    try:
        principal = deserialize_principal(body.request_principal or b"")
    except MalformedRequest:
        return reply(ErrorCode.principal_deserialization_failure)
    inner = Request(api_key, version, corr, client_id, frame, pos, flexible, host, principal, req.listener)
    result = handler.handle(broker, inner)
    if inspect.isawaitable(result):
        result = await result
    chunks = [result] if isinstance(result, (bytes, bytearray, memoryview)) else list(result)
    head = struct.pack(">i", corr) + (b"\x00" if flexible else b"")
    return reply(0, head + b"".join(bytes(c) for c in chunks))
