"""Shared fixtures: real `strata broker` processes on free loopback ports, each with its own data directory."""
from __future__ import annotations

import os
import signal
import socket
import contextlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def small_tmpfs_at(path: Path, size: str = "4m"):
    """`path` (created) on a tmpfs of `size`, to fill a log directory; skips the test when mounting is not allowed
    (not root), and unmounts lazily at the end."""
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, never one handed out before in this process: a port bound and released
    can come back from the next bind to port 0, and a cluster's brokers then got the same one (one failed to
    listen: "address already in use")."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def terminate(proc: subprocess.Popen, timeout: float) -> int:
    """SIGTERM (a clean shutdown), SIGKILL if it has not exited after `timeout`; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class BrokerProcess:
    """A broker subprocess. `restart()` keeps the data dir; `kill9()` simulates a crash."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None, open_files: int | None = None):
        self.data_dir = data_dir
        self.open_files = open_files         # RLIMIT_NOFILE (soft and hard) of the broker process, when set
        self.port = free_port()
        self.overrides = {"node.id": "1", "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                          "log.dirs": str(data_dir / "logs"), "num.partitions": "1",
                          **(overrides or {})}
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir / "broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


    def start(self, timeout: float = 30) -> "BrokerProcess":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "broker.cli", "broker"]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        self._log = open(self.log_path, "ab")
        if self.open_files is not None:      # prlimit (util-linux), not preexec_fn: the test process has threads
            args = ["prlimit", f"--nofile={self.open_files}:{self.open_files}", *args]
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        waiting = self.listener_ports()
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", waiting[0]), timeout=0.5):
                    waiting.pop(0)
                if not waiting:
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"broker did not listen within {timeout}s:\n{self.log_text()[-3000:]}")

    def listener_ports(self) -> list[int]:
        """Every port of `listeners` (the broker opens them one after another): start() returns once all listen."""
        ports = []
        for listener in self.overrides.get("listeners", "").split(","):
            try:
                ports.append(int(listener.rsplit(":", 1)[1]))
            except (IndexError, ValueError):
                pass
        return ports or [self.port]

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 20) -> int | None:
        if self.proc is None:
            return None
        rc = terminate(self.proc, timeout)
        self.proc = None
        self._log.close()
        return rc

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        self._log.close()

    def restart(self) -> "BrokerProcess":
        self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """One broker shared by a whole test session (fast); tests use unique topic names."""
    b = BrokerProcess(tmp_path_factory.mktemp("shared-broker")).start()
    yield b
    rc = b.stop()
    assert rc == 0, f"shared broker exited with {rc}:\n{b.log_text()[-3000:]}"
    assert "Traceback" not in b.log_text(), b.log_text()[-5000:]


@pytest.fixture
def make_broker(tmp_path):
    """Factory for private brokers (restarts, kill -9, special configs)."""
    made: list[BrokerProcess] = []

    def factory(overrides: dict[str, str] | None = None, name: str = "b", open_files: int | None = None) -> BrokerProcess:
        b = BrokerProcess(tmp_path / f"{name}{len(made)}", overrides, open_files).start()
        made.append(b)
        return b

    yield factory
    for b in made:
        b.stop()


@pytest.fixture
def topic_name(request) -> str:
    """A unique, legal topic name per test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80].strip("-")
    return f"t-{base}-{time.monotonic_ns() % 10**9}"
