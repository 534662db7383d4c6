"""One module per API key. Each declares API_KEY, the advertised VERSIONS range, the DECODABLE range it can parse, and
`handle(broker, request)`; ApiVersions is derived from these declarations (as franz-go's kfake does).

`handle` returns the encoded response body (bytes or a list of chunks), None for no response (acks=0), or an
awaitable of either when it has to wait (Fetch long-polling).
"""
from __future__ import annotations

import importlib
import pkgutil
import time
from dataclasses import dataclass, field

@dataclass(slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    frame: bytearray          # the whole request (without the 4-byte size); writable so batches are rewritten in place
    body_offset: int          # where the body starts in frame
    flexible: bool
    client_host: str | None = None   # "/ip" as Kafka shows it in DescribeGroups
    principal: str = "User:ANONYMOUS"  # the authenticated principal (SASL or TLS), Kafka's KafkaPrincipal string
    listener: str = ""                 # the name of the listener the request came in on
    throttle_ms: int = 0               # set by a handler over a client quota: the connection is muted this long
    busy_since: float = field(default_factory=time.perf_counter)   # when handling began, moved past waits
                                                                    # (request_percentage)

    def readonly(self) -> memoryview:
        """kio's native reader rejects writable buffers."""
        return memoryview(self.frame).toreadonly()


def load_handlers() -> dict[int, object]:
    """Every module of this package is a handler: adding a file adds the API (and ApiVersions advertises it)."""
    handlers = {}
    for info in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if not hasattr(mod, "API_KEY"):
            continue                  # shared code of several handlers
        if mod.API_KEY in handlers:
            raise RuntimeError(f"API key {mod.API_KEY} is handled by both {handlers[mod.API_KEY].__name__} and "
                               f"{mod.__name__}")
        handlers[mod.API_KEY] = mod
    return handlers
