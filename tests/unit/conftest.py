"""Fixtures of the unit suites: one object-store factory for both backends (the local filesystem store and S3 on a
moto_server subprocess), so every suite that builds on the store runs its scenarios against both."""
from __future__ import annotations

import pytest

from moto_server import S3_TEST_OPTIONS, MotoServer, moto_server  # noqa: F401  (moto_server is a fixture)
from storage.objectstore.object_store import ObjectStore, open_object_store


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
async def make_store(request, tmp_path):
    """Factory: every store it makes in one test shares the same root/bucket, like two brokers would."""
    made: list[ObjectStore] = []
    if request.param == "s3":
        server: MotoServer = request.getfixturevalue("moto_server")
        url = f"s3://{server.new_bucket()}/cluster-1"
        base = server.store_options(**S3_TEST_OPTIONS)
    else:
        url, base = f"file://{tmp_path}/store", {}

    def factory(**options) -> ObjectStore:
        made.append(open_object_store(url, **{**base, **options}))
        return made[-1]

    yield factory
    for s in made:
        await s.close()


@pytest.fixture
def store(make_store) -> ObjectStore:
    return make_store()


