"""The fast object stores of KIP-1176, by zone: `remote.wal.storage.url` is the store of every rack without its own,
`remote.wal.storage.rack.<rack>.url` the store of one rack (S3 Express One Zone buckets live in one zone each). A
leader uploads to the store of its own rack, and its pointers name that store, so a follower in another zone
downloads from the leader's zone's store. Every broker is configured with the same list."""
from __future__ import annotations

from storage.objectstore.object_store import ObjectStore, open_object_store

DEFAULT = ""


class WalStores:
    def __init__(self, urls: dict[str, str], options: dict[str, str], rack: str = ""):
        """`urls`: store name (a rack, or "" for the default) -> URL; `options` as open_object_store takes them."""
        self.urls = {name: url for name, url in urls.items() if url}
        self.options = options
        self.local_name = rack if rack in self.urls else DEFAULT
        if self.local_name not in self.urls:
            raise ValueError(f"no fast store for rack {rack!r}: set remote.wal.storage.url")
        self._open: dict[str, ObjectStore] = {}

    def get(self, name: str) -> ObjectStore:
        """The store a pointer names; KeyError when this broker does not know it."""
        store = self._open.get(name)
        if store is None:
            store = self._open[name] = open_object_store(self.urls[name], **self.options)
        return store

    @property
    def local(self) -> ObjectStore:
        return self.get(self.local_name)

    async def close(self) -> None:
        for store in self._open.values():
            await store.close()
        self._open.clear()
