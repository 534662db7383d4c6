"""What the broker reads metadata through (Kafka's MetadataCache): always the newest published image."""
from __future__ import annotations

import uuid

from metadata.image import MetadataImage, TopicImage


class MetadataCache:
    def __init__(self, image: MetadataImage):
        self.image = image

    def update(self, _old: MetadataImage, new: MetadataImage) -> None:
        """A publisher: the controller calls it with every new image."""
        self.image = new

    def topics(self) -> list[TopicImage]:
        return self.image.topics()

    def get(self, name: str) -> TopicImage | None:
        return self.image.topics_by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.image.by_id(topic_id)
