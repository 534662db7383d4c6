"""Incremental fetch sessions (KIP-227), as kafka-python and Java consumers use them.

epoch -1: sessionless full fetch. epoch 0: open a new session (full request/response). epoch > 0: incremental, the
request lists only changed partitions and the response only partitions with news (data, error, moved watermarks).
librdkafka sends sessionless fetches; it gets session id 0 and full responses.
"""
from __future__ import annotations

import random
from collections import OrderedDict
from protocol.errors import ErrorCode



class SessionPartition:
    __slots__ = ("fetch_offset", "max_bytes", "log_start_offset", "last_hw", "last_lso", "last_log_start")

    def __init__(self, fetch_offset: int, max_bytes: int, log_start_offset: int):
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.log_start_offset = log_start_offset
        self.last_hw = -1
        self.last_lso = -1
        self.last_log_start = -1


class FetchSession:
    __slots__ = ("session_id", "epoch", "partitions")

    def __init__(self, session_id: int):
        self.session_id = session_id
        self.epoch = 1
        # key: (topic name, partition) -> SessionPartition; insertion order is the response order
        self.partitions: OrderedDict[tuple, SessionPartition] = OrderedDict()


class FetchSessionCache:
    def __init__(self, slots: int):
        self.slots = max(slots, 0)
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()

    def new_session(self) -> FetchSession | None:
        if self.slots == 0:
            return None
        while len(self.sessions) >= self.slots:
            self.sessions.popitem(last=False)  # evict least recently used
        sid = random.randint(1, 2**31 - 1)
        while sid in self.sessions:
            sid = random.randint(1, 2**31 - 1)
        s = FetchSession(sid)
        self.sessions[sid] = s
        return s

    def lookup(self, session_id: int, epoch: int) -> tuple[FetchSession | None, int]:
        s = self.sessions.get(session_id)
        if s is None:
            return None, ErrorCode.fetch_session_id_not_found
        if s.epoch != epoch:
            return None, ErrorCode.invalid_fetch_session_epoch
        self.sessions.move_to_end(session_id)
        return s, 0

    def remove(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)
