"""Writes the data directory that tests/upgrade/test_upgrade.py opens with the current code.

Run with the code of the release being upgraded FROM (it was run at commit 32c7839, the last single-broker layout
with `__strata_metadata.json`), then commit the tarball it prints. It starts a real broker process, fills it with
what a user has (plain, compacted and tiered topics, an idempotent producer, a group's committed offsets, deleted
records, a config override), stops it cleanly and packs `logs/` and `objects/`.

    .venv/bin/python tests/upgrade/make_datadir.py tests/upgrade/datadir-32c7839.tar.gz
"""
from __future__ import annotations

import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic  # noqa: E402

from tests.conftest import BrokerProcess  # noqa: E402


def main(out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        b = BrokerProcess(d, {"remote.log.storage.system.enable": "true",
                              "remote.log.storage.manager.store.url": f"file://{d / 'objects'}",
                              "remote.log.manager.task.interval.ms": "200",
                              "log.retention.check.interval.ms": "200"}).start()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([
                NewTopic("plain", 3, 1),
                NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"}),
                NewTopic("tiered", 1, 1, config={"remote.storage.enable": "true", "segment.bytes": "4096",
                                                "local.retention.bytes": "4096"})]).values():
            f.result(10)
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        for i in range(300):
            p.produce("plain", key=f"k{i}".encode(), value=f"plain-{i}".encode(), partition=i % 3,
                      headers=[("h", f"{i}".encode())])
        for i in range(50):
            p.produce("compacted", key=f"key{i % 10}".encode(), value=f"v{i}".encode())
        for i in range(400):
            p.produce("tiered", key=None, value=(f"tiered-{i}-" + "x" * 100).encode())
            if i % 20 == 19:
                p.flush(10)      # small batches: several 4 KiB segments to offload
        assert p.flush(30) == 0
        res = ConfigResource(ConfigResource.Type.TOPIC, "plain", incremental_configs=[
            ConfigEntry("retention.ms", "123456789", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(10)
        admin.delete_records([TopicPartition("plain", 0, 10)])[TopicPartition("plain", 0, 10)].result(10)
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "upgrade-group", "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("plain", 0, 42), TopicPartition("plain", 1, 7)], asynchronous=False)
        c.close()
        # wait for the tiered topic to offload most of its segments
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            segs = list((d / "objects").rglob("*.log"))
            if len(segs) >= 5:
                break
            time.sleep(0.2)
        assert len(list((d / "objects").rglob("*.log"))) >= 5, "tiered topic did not offload"
        time.sleep(1)
        assert b.stop() == 0
        with tarfile.open(out, "w:gz") as tar:
            tar.add(d / "logs", arcname="logs")
            tar.add(d / "objects", arcname="objects")
    print(out)


if __name__ == "__main__":
    main(sys.argv[1])
