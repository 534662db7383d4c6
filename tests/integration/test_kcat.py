"""Debian's kcat 1.7.1 (librdkafka 2.0.2) against a real Strata broker.

librdkafka 2.0.2 silently stops compressing when the broker's Produce minimum version is above 2, so the codec
tests read the broker's raw segment file and check the batch attributes carry the codec that was asked for.
"""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

try:
    from .helpers import CODEC_IDS, create_topic, read_batches, segment_path, stored_batches
except ImportError:  # tests/integration is not a package
    from helpers import CODEC_IDS, create_topic, read_batches, segment_path, stored_batches

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (make kcat)")]


def kcat(broker, *args, stdin: bytes | None = None, timeout: float = 30) -> str:
    cmd = [KCAT, "-b", broker.bootstrap, "-X", "broker.address.family=v4", *args]
    r = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
    assert r.returncode == 0, f"{cmd} exited {r.returncode}:\n{r.stderr.decode(errors='replace')}"
    return r.stdout.decode()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_produce_compressed_and_consume(broker, topic_name, codec):
    n = 100
    lines = b"".join(b"key%d:value-%d-%s\n" % (i, i, b"x" * 50) for i in range(n))
    # auto-created topic on first metadata request
    kcat(broker, "-P", "-t", topic_name, "-p", "0", "-z", codec, "-K:", "-X", "linger.ms=50", stdin=lines)

    out = kcat(broker, "-C", "-t", topic_name, "-p", "0", "-o", "beginning", "-e", "-f", "%k %s %o\n")
    assert out.splitlines() == [f"key{i} value-{i}-{'x' * 50} {i}" for i in range(n)]

    batches = stored_batches(broker, topic_name, min_records=n)
    assert sum(b["records_count"] for b in batches) == n
    for b in batches:
        assert b["magic"] == 2
        # attributes are bytes 21-22 of the batch; the low 3 bits of the low byte hold the codec
        assert b["raw_attr_bytes"][1] & 0x07 == CODEC_IDS[codec], (codec, b)


def test_uncompressed_batches_are_stored_uncompressed(broker, topic_name):
    kcat(broker, "-P", "-t", topic_name, "-p", "0", "-K:", stdin=b"a:1\nb:2\nc:3\n")
    out = kcat(broker, "-C", "-t", topic_name, "-p", "0", "-o", "beginning", "-e", "-f", "%k=%s@%o\n")
    assert out.splitlines() == ["a=1@0", "b=2@1", "c=3@2"]
    assert {b["codec"] for b in read_batches(segment_path(broker, topic_name))} == {0}


def test_headers_null_values_and_offsets(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    # -Z: empty values are sent as NULL (tombstones); -H adds headers to every message
    kcat(broker, "-P", "-t", topic_name, "-p", "0", "-K:", "-Z", "-H", "h=1", "-H", "h=2",
         stdin=b"k0:v0\nk1:\nk2:v2\nk3:v3\nk4:v4\n")
    out = kcat(broker, "-C", "-t", topic_name, "-p", "0", "-o", "beginning", "-e", "-f", "%o|%k|%S|%h\n")
    assert out.splitlines() == ["0|k0|2|h=1,h=2", "1|k1|-1|h=1,h=2", "2|k2|2|h=1,h=2", "3|k3|2|h=1,h=2",
                                "4|k4|2|h=1,h=2"]
    # start at an absolute offset, read a bounded count
    out = kcat(broker, "-C", "-t", topic_name, "-p", "0", "-o", "3", "-c", "2", "-e", "-f", "%o %s\n")
    assert out.splitlines() == ["3 v3", "4 v4"]
    # negative offset: relative to the end
    out = kcat(broker, "-C", "-t", topic_name, "-p", "0", "-o", "-1", "-e", "-f", "%o %s\n")
    assert out.splitlines() == ["4 v4"]


def test_metadata_listing_shows_topic(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    md = json.loads(kcat(broker, "-L", "-J"))
    assert [(b["id"], b["name"]) for b in md["brokers"]] == [(1, f"127.0.0.1:{broker.port}")]
    [t] = [t for t in md["topics"] if t["topic"] == topic_name]
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2]
    assert all(p["leader"] == 1 and p["replicas"] == [{"id": 1}] and p["isrs"] == [{"id": 1}]
               for p in t["partitions"])

    text = kcat(broker, "-L", "-t", topic_name)
    assert f'topic "{topic_name}" with 3 partitions:' in text
    assert f"broker 1 at 127.0.0.1:{broker.port}" in text
