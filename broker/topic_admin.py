"""Topic creation, validation and config resolution shared by CreateTopics, Metadata auto-creation, CreatePartitions,
DescribeConfigs and IncrementalAlterConfigs. Error codes and messages follow Kafka's."""
from __future__ import annotations

import logging
import re
import uuid

from metadata.placement import PlacementError, check_assignment, place_replicas
from metadata.records import TOPIC_RESOURCE, ConfigRecord, PartitionRecord, TopicRecord
from storage.log.log_config import TOPIC_CONFIGS, LogConfig, parse_value
from protocol.errors import ErrorCode

log = logging.getLogger("strata.admin")

INT_MAX = 2**31 - 1
MAX_PARTITIONS = 10_000  # a guard against a typo creating millions of directories
LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


def topic_name_error(name: str | None) -> str | None:
    """Kafka's Topic.validate: None when legal, else the reason."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters"
    if not LEGAL_TOPIC.match(name):
        return f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


class AdminError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def validate_configs(configs: dict[str, str | None]) -> dict[str, str]:
    out = {}
    for name, value in configs.items():
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            raise AdminError(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
        if value is None:
            raise AdminError(ErrorCode.invalid_config, f"Null value not supported for topic configs: {name}")
        try:
            out[name] = str(parse_value(d, value)).lower() if d.kind is bool else str(parse_value(d, value))
        except ValueError as e:
            raise AdminError(ErrorCode.invalid_config, str(e)) from None
    return out


def default_replication_factor(broker, image) -> int:
    """default.replication.factor when set; unset, sized to the cluster: 3 with three or more unfenced brokers,
    else all of them (1 on a single broker, Kafka's default)."""
    if "default.replication.factor" in broker.config.props or not getattr(broker, "cluster_mode", False):
        return broker.config.get_int("default.replication.factor")
    return max(1, min(3, len(image.unfenced_brokers())))


def check_create(broker, image, name: str, num_partitions: int, replication_factor: int,
                 assignments=(), configs: dict | None = None,
                 indexes: list[int] | None = None, by_a_broker: bool = False) -> tuple[list[list[int]], dict[str, str]]:
    """Validate a topic creation against `image` (the controller's latest); returns (replica assignment,
    normalized configs) or raises AdminError. `indexes`: the partition index of each of `assignments` (CreateTopics
    names them; None: in order). `by_a_broker`: another broker's own request (its internal topics are not held to
    max.broker.partitions)."""
    reason = topic_name_error(name)
    if reason:
        raise AdminError(ErrorCode.invalid_topic_exception, reason)
    limit = max_broker_partitions(broker)
    if image.get(name) is not None:
        raise AdminError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    if "." in name or "_" in name:
        # Kafka: '.' and '_' become the same in metric names, so names differing only there collide
        norm = name.replace(".", "_")
        other = next((t.name for t in image.topics() if t.name.replace(".", "_") == norm), None)
        if other is not None:
            raise AdminError(ErrorCode.invalid_topic_exception,
                             f"Topic '{name}' collides with existing topic: {other}")
    if assignments:
        if num_partitions != -1 or replication_factor != -1:
            raise AdminError(ErrorCode.invalid_request, "Both numPartitions or replicationFactor and replicasAssignments "
                                                   "were set. Both cannot be used at the same time.")
        if indexes is not None:
            assignments = _by_index(indexes, assignments)
        if len(assignments) > MAX_PARTITIONS:
            raise AdminError(ErrorCode.invalid_partitions, f"Number of partitions {len(assignments)} exceeds "
                                                           f"{MAX_PARTITIONS}")
        assignment = check_replica_assignment(image, assignments)
    else:
        if num_partitions == -1:
            num_partitions = broker.config.get_int("num.partitions")
        if replication_factor == -1:
            replication_factor = default_replication_factor(broker, image)
        if num_partitions <= 0 or num_partitions > MAX_PARTITIONS:
            raise AdminError(ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive "
                             "value." if num_partitions <= 0 else f"Number of partitions {num_partitions} exceeds "
                                                                  f"{MAX_PARTITIONS}")
        assignment = place(image, num_partitions, replication_factor, limit=limit)
    if not (by_a_broker and name in _BROKERS_OWN_TOPICS):
        check_broker_partitions(image, assignment, limit)
    normalized = validate_configs(configs or {})
    validate_remote_storage(broker, name, normalized)   # also resolves the full config
    return assignment, normalized


def _by_index(indexes: list[int], assignments) -> list:
    """A manual assignment given per partition index, in index order; as Kafka's ReplicationControlManager, each
    index once and together 0..n-1 (INVALID_REPLICA_ASSIGNMENT otherwise)."""
    by_index: dict[int, object] = {}
    for i, replicas in zip(indexes, assignments):
        if i in by_index:
            raise AdminError(ErrorCode.invalid_replica_assignment,
                             f"Found multiple manual partition assignments for partition {i}")
        by_index[i] = replicas
    if sorted(by_index) != list(range(len(by_index))):
        raise AdminError(ErrorCode.invalid_replica_assignment,
                         "partitions should be a consecutive 0-based integer sequence")
    return [by_index[i] for i in range(len(by_index))]


def max_broker_partitions(broker) -> int:
    """`max.broker.partitions` (KIP-578); unset, half of this process's open-file limit."""
    value = broker.config.get("max.broker.partitions").strip()
    if value:
        return int(value)            # checked at start-up (BrokerConfig.load)
    import resource
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return INT_MAX if soft == resource.RLIM_INFINITY else max(1, soft // 2)


# the internal topics brokers create for their own services, of a size fixed by config: not held to
# max.broker.partitions, so a broker filled by clients still gets its group and transaction coordinators
_BROKERS_OWN_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__remote_log_metadata"})


def check_broker_partitions(image, assignment: list[list[int]], limit: int) -> None:
    """Refuse new partitions that would take a broker above `limit` (max.broker.partitions, KIP-578), with the
    POLICY_VIOLATION Kafka's controller answers for an operation too large to apply."""
    added: dict[int, int] = {}
    for replicas in assignment:
        for b in replicas:
            added[b] = added.get(b, 0) + 1
    over = sorted(b for b, n in added.items() if image.replica_counts.get(b, 0) + n > limit)
    if over:
        b = over[0]
        raise AdminError(ErrorCode.policy_violation,
                         f"Adding {added[b]} partition replica(s) to broker {b}, which hosts "
                         f"{image.replica_counts.get(b, 0)}, would exceed max.broker.partitions={limit} "
                         f"(brokers over it: {over})")


def place(image, partitions: int, replication_factor: int, first_partition: int = 0,
          limit: int | None = None) -> list[list[int]]:
    """Replica lists for new partitions over the usable brokers (metadata/placement.py), or INVALID_REPLICATION_FACTOR.
    With `limit` (max.broker.partitions), brokers already at it are left out while enough others remain (KIP-578:
    placement respects the bound; check_broker_partitions then refuses what still does not fit)."""
    brokers = image.unfenced_brokers()
    if limit is not None:
        room = {b: rack for b, rack in brokers.items() if image.replica_counts.get(b, 0) < limit}
        if len(room) >= replication_factor:
            brokers = room
    try:
        return place_replicas(brokers, partitions, replication_factor, first_partition=first_partition)
    except PlacementError as e:
        raise AdminError(ErrorCode.invalid_replication_factor, str(e)) from None


def check_replica_assignment(image, assignments) -> list[list[int]]:
    assignment = [list(a) for a in assignments]
    why = check_assignment(assignment, image.brokers)
    if why:
        raise AdminError(ErrorCode.invalid_replica_assignment, why)
    return assignment


_DISABLE_WITHOUT_DELETE = (
    "It is invalid to disable remote storage without deleting remote data. If you want to keep the remote data and "
    "turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. If you want to disable "
    "remote storage and delete all remote data, please set "
    "`remote.storage.enable=false,remote.log.delete.on.disable=true`.")


def validate_remote_storage(broker, name: str, new: dict[str, str], old: dict[str, str] | None = None) -> None:
    """Kafka's tiered-storage topic config rules (LogConfig.validate*): the broker must have
    remote.log.storage.system.enable=true, internal topics are never tiered, only cleanup.policy=delete, local
    retention within the total retention, and turning tiering off needs remote.log.delete.on.disable=true."""
    try:
        cfg = broker.config.log_config(new)
        was = broker.config.log_config(old).remote_storage_enable if old is not None else False
    except ValueError as e:
        raise AdminError(ErrorCode.invalid_config, str(e)) from None
    if cfg.remote_storage_enable:
        if not broker.config.get_bool("remote.log.storage.system.enable"):
            raise AdminError(ErrorCode.invalid_config, "Tiered Storage functionality is disabled in the broker. Topic cannot be "
                                             "configured with remote log storage.")
        if name.startswith("__"):
            raise AdminError(ErrorCode.invalid_config, f"Remote log storage cannot be enabled for the internal topic {name}")
        if cfg.cleanup_policy != "delete":
            raise AdminError(ErrorCode.invalid_config, "Remote log storage only supports topics with cleanup.policy=delete")
        for kind, total, local in (("ms", cfg.retention_ms, cfg.local_retention_ms),
                                   ("bytes", cfg.retention_bytes, cfg.local_retention_bytes)):
            if total > -1 and local != -2:
                if local == -1:
                    raise AdminError(ErrorCode.invalid_config, f"Invalid value -1 for configuration local.retention.{kind}: "
                                                     f"Value must not be -1 as retention.{kind} value is set as {total}.")
                if local > total:
                    raise AdminError(ErrorCode.invalid_config, f"Invalid value {local} for configuration local.retention.{kind}: "
                                                     f"Value must not be more than retention.{kind} property value: "
                                                     f"{total}")
    elif was and not cfg.remote_log_delete_on_disable:
        raise AdminError(ErrorCode.invalid_config, _DISABLE_WITHOUT_DELETE)




def partition_records(topic_id: str, first: int, assignment: list[list[int]]) -> list[PartitionRecord]:
    """Partitions `first`, `first` + 1, ... of a topic with these replica lists: the first replica (the preferred
    leader) leads, every replica is in sync, leader epoch 0."""
    return [PartitionRecord(topic_id, first + i, replicas, replicas, replicas[0])
            for i, replicas in enumerate(assignment)]


def topic_records(name: str, assignment: list[list[int]], configs: dict[str, str]) -> list:
    topic_id = uuid.uuid4().hex
    return [TopicRecord(name, topic_id), *partition_records(topic_id, 0, assignment),
            *(ConfigRecord(TOPIC_RESOURCE, name, k, v) for k, v in sorted(configs.items()))]


async def submit(broker, operation):
    """Run an admin operation (image -> (records, answer), raising AdminError when the request is refused) on the
    controller's event queue, against the latest image; its answer. A lost controller role, or records that do not
    apply (a bug: the operation validated against the same image), become the Kafka error the client sees."""
    from metadata.object_store_controller import NotControllerError
    try:
        return await broker.controller.run(operation)
    except NotControllerError as e:
        raise AdminError(ErrorCode.not_controller, str(e)) from None
    except ValueError as e:
        raise AdminError(ErrorCode.invalid_request, f"the change does not apply: {e}") from None


def take_mutations(quota, permits: int) -> None:
    """controller_mutation_rate (broker/quotas.py MutationQuota, None: no quota): take `permits` partitions created
    or deleted, or refuse the topic with THROTTLING_QUOTA_EXCEEDED, as Kafka's controller does after validating it."""
    from broker.quotas import MutationQuotaExceeded
    if quota is not None:
        try:
            quota.record(permits)
        except MutationQuotaExceeded as e:
            raise AdminError(ErrorCode.throttling_quota_exceeded, e.message) from None


async def create_topic(broker, name: str, partitions: int, replication_factor: int, assignments=(),
                       configs: dict | None = None, validate_only: bool = False,
                       indexes: list[int] | None = None, quota=None,
                       by_a_broker: bool = False) -> tuple[list[list[int]], dict, str]:
    """Validate and create a topic in one controller operation (the metadata publisher opens its partitions):
    (replica assignment, normalized configs, topic id or "" when only validated), or AdminError."""
    def operation(image):
        assignment, cfg = check_create(broker, image, name, partitions, replication_factor, assignments, configs,
                                       indexes, by_a_broker)
        take_mutations(quota, len(assignment))
        if validate_only:
            return [], (assignment, cfg, "")
        records = topic_records(name, assignment, cfg)
        return records, (assignment, cfg, records[0].topic_id)

    assignment, cfg, topic_id = await submit(broker, operation)
    if topic_id:
        log.info("created topic %s with %d partition(s) x %d replica(s) %s", name, len(assignment),
                 len(assignment[0]), cfg or "")
    return assignment, cfg, topic_id


async def create_through_controller(broker, name: str, partitions: int, replication_factor: int,
                                    configs: dict[str, str]) -> int:
    """A CreateTopics request to the active controller (Kafka's AutoTopicCreationManager), then this broker reads
    the metadata log so its image has the topic; the topic's error code, LEADER_NOT_AVAILABLE without a controller."""
    from broker.controller_channel import ControllerUnavailable
    try:
        resp = await broker.controller_channel.send(19, 7, {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": replication_factor, "assignments": [],
            "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
            "timeout": 30000, "validate_only": False})
    except ControllerUnavailable:
        return ErrorCode.leader_not_available
    await broker.controller.refresh()
    return resp.topics[0].error_code


async def auto_create(broker, name: str) -> tuple[int, object | None]:
    """Metadata-triggered creation (auto.create.topics.enable): num.partitions and default.replication.factor, or an
    internal topic's own settings (broker.internal_topic); LEADER_NOT_AVAILABLE (retriable) while fewer brokers than
    an internal topic's replication factor are up (a client never makes it smaller: only the brokers' own creation
    does, after their grace period). A broker that is not the controller asks the controller with a CreateTopics
    request, as Kafka's AutoTopicCreationManager does."""
    internal = broker.internal_topic(name)
    partitions, configs, rf = internal if internal is not None else (-1, {}, -1)
    if internal is not None:
        rf = broker.internal_replication_factor(rf)
        if rf is None:
            return ErrorCode.leader_not_available, None
    if not broker.controller.active:
        err = await create_through_controller(broker, name, partitions, rf, configs)
        if err not in (0, ErrorCode.topic_already_exists):
            return err, None
        info = broker.topics.get(name)
        return (0, info) if info is not None else (ErrorCode.leader_not_available, None)
    try:
        await create_topic(broker, name, partitions, rf, configs=configs)
        return 0, broker.topics.get(name)
    except AdminError as e:
        return e.code, None


def effective_log_config(broker, info) -> LogConfig:
    return broker.config.log_config(info.configs)
