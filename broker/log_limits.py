"""Rate-limited log lines, for messages a remote peer can make the broker write at will (a connection closed for a
malformed frame, a connection refused over max.connections.per.ip): one million bad frames once wrote 670,000
warning lines. The first lines of a kind are written, then at most `per_interval` every `interval` seconds, and the
lines dropped meanwhile are summed up in one "suppressed K similar messages" line, so nothing is lost silently."""
from __future__ import annotations

import asyncio
import logging
import time


class RateLimitedLog:
    """A token bucket per kind of message: `burst` lines may be written at once (the first ones always are), and
    the bucket refills at `per_interval` lines per `interval` seconds. A dropped line is counted; the count is
    written as its own line before the next line that is let through, or, when an event loop runs, once the next
    token is due (so a flood that stops is reported within interval / per_interval seconds)."""

    __slots__ = ("logger", "level", "burst", "rate", "interval", "what", "clock", "tokens", "stamp", "suppressed",
                 "suppressed_since", "_timer")

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING, *, burst: int = 20,
                 per_interval: int = 10, interval: float = 60.0, what: str = "similar messages", clock=time.monotonic):
        self.logger, self.level = logger, level
        self.burst = burst
        self.rate = per_interval / interval            # tokens per second
        self.interval = interval
        self.what = what
        self.clock = clock
        self.tokens = float(burst)
        self.stamp = clock()
        self.suppressed = 0
        self.suppressed_since = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def log(self, msg: str, *args, **kwargs) -> bool:
        """Write the line if the bucket allows (True), else count it (False). Arguments as Logger.log's."""
        if not self.logger.isEnabledFor(self.level):
            return False
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            self.flush()
            self.logger.log(self.level, msg, *args, **kwargs)
            return True
        if self.suppressed == 0:
            self.suppressed_since = now
            self._schedule_flush()
        self.suppressed += 1
        return False

    def flush(self) -> None:
        """Write the summary of the lines dropped since the last one, if any."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.suppressed:
            n, self.suppressed = self.suppressed, 0
            self.logger.log(self.level, "suppressed %d %s in the last %.1f s", n, self.what,
                            self.clock() - self.suppressed_since)

    def _schedule_flush(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return                                      # no loop: the next line let through reports the count
        self._timer = loop.call_later(max(0.0, (1 - self.tokens) / self.rate), self._timed_flush)

    def _timed_flush(self) -> None:
        self._timer = None
        self.flush()
