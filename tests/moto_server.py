"""A real S3 endpoint for tests: `moto_server` (moto[server]) as a subprocess on a free loopback port.

A subprocess rather than moto's in-process mock because the S3 store must be tested over real HTTP (aiohttp
connection pool, timeouts, connection refused), and because tests need to take the endpoint away: `stop()`/`start()`
(connection refused; moto keeps state in memory, so buckets are gone after a restart) and `pause()`/`resume()`
(SIGSTOP: the kernel still accepts connections but nothing answers, i.e. timeouts; state survives).

Use the session fixture `moto_server` for ordinary tests (one bucket per test via `new_bucket()`); tests that
stop or pause the server use `private_moto_server` so they cannot disturb others. `inject_faults` covers what no
server produces on demand (a 503, a response lost after the write landed).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

S3_TEST_OPTIONS = {"max_attempts": 3, "retry_base_delay": 0.01, "multipart_threshold": 5 * 1024 * 1024,
                   "part_size": 5 * 1024 * 1024}    # quick retries, small multipart parts: what unit suites pass

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoServer:
    """One moto_server process. The port stays the same across stop()/start() so clients can reconnect."""

    def __init__(self, log_path: Path | None = None, port: int | None = None):
        self.port = port or _free_port()
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.paused = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> "MotoServer":
        assert self.proc is None, "already running"
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        if out is not subprocess.DEVNULL:
            out.close()  # the child holds its own copy
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                rc, self.proc = self.proc.returncode, None
                raise RuntimeError(f"moto_server exited with {rc} (port {self.port} taken?); log: {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto_server did not answer within {timeout}s")

    def stop(self) -> None:
        """Terminate the process (and lose its state). Safe to call twice."""
        if self.proc is None:
            return
        if self.paused:
            self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: connections are accepted by the kernel but never answered."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def create_bucket(self, name: str) -> str:
        # moto does not check signatures, so a bare PUT creates a bucket without pulling in boto3.
        req = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200, r.status
        return name

    def new_bucket(self) -> str:
        return self.create_bucket(f"strata-{uuid.uuid4().hex[:16]}")

    def store_options(self, **overrides) -> dict:
        """Options for `open_object_store("s3://...")` pointing at this server."""
        return {"endpoint_url": self.endpoint, "region": REGION, "access_key_id": ACCESS_KEY,
                "secret_access_key": SECRET_KEY, **overrides}

    def __enter__(self) -> "MotoServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def client_error(status: int, code: str):
    """A botocore ClientError as S3 would produce it, for fault injection."""
    from botocore.exceptions import ClientError
    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "PutObject")


def inject_faults(client, method: str, faults: list) -> list:
    """Make client.<method> fail per `faults` entries in order: an exception to raise instead of calling, or
    ("after", exc) to perform the real call and then raise exc (a response lost on the way back)."""
    real, calls = getattr(client, method), []

    async def wrapper(**kwargs):
        calls.append(kwargs)
        fault = faults.pop(0) if faults else None
        if isinstance(fault, tuple):
            await real(**kwargs)
            raise fault[1]
        if fault is not None:
            raise fault
        return await real(**kwargs)
    setattr(client, method, wrapper)
    return calls


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory):
    """One moto_server for the whole session; tests isolate themselves with `new_bucket()`. Never stop it."""
    with MotoServer(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


@pytest.fixture
def private_moto_server(tmp_path):
    """A moto_server of this test's own, for outage tests that stop or pause it."""
    with MotoServer(tmp_path / "moto.log") as server:
        yield server
