"""The whole error hierarchy of tierlog, rooted at :class:`TierlogError`.

Three families:

* Protocol errors (h11's split): :class:`LocalProtocolError` is raised by our own codecs when
  *we* are asked to produce something invalid or when a peer's bytes are malformed while we
  parse them; the connection layer re-raises it as :class:`RemoteProtocolError` so the type
  says whose fault it was.
* Kafka error codes: :class:`ApiError` subclasses carry ``error_code``, ``retriable`` and a
  ``description``; :func:`for_code` maps a wire code back to its class (aiokafka's registry).
* Storage errors: corrupt derived state (indexes, snapshots) is recoverable by design — the
  caller deletes and rebuilds it, as Kafka's ProducerStateManager and RemoteIndexCache do.
  :class:`KafkaStorageError` wraps ``OSError``.

Built-in ``ValueError``/``TypeError`` are for caller bugs only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar


class TierlogError(Exception):
    """Root of every error tierlog raises on purpose."""


# --------------------------------------------------------------------------- protocol


class ProtocolError(TierlogError):
    """Bytes on the wire that do not follow the Kafka protocol. Abstract: use a subclass."""

    def __init__(self, msg: str) -> None:
        if type(self) is ProtocolError:
            raise TypeError("ProtocolError is abstract; raise Local- or RemoteProtocolError")
        super().__init__(msg)


class LocalProtocolError(ProtocolError):
    """Raised by our codecs: the bytes we were given (or asked to write) are invalid."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something invalid; the connection that carried it must be closed."""


# --------------------------------------------------------------------------- configs


class ConfigError(TierlogError, ValueError):
    """An unknown configuration key or a value that does not validate. Names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


# --------------------------------------------------------------------------- Kafka error codes


class ApiError(TierlogError):
    """An error with a Kafka wire error code. Subclasses set the class attributes."""

    error_code: ClassVar[int] = -1
    retriable: ClassVar[bool] = False
    description: ClassVar[str] = "The server experienced an unexpected error."

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.description)
        self.message = message or self.description


class UnknownServerError(ApiError):
    error_code = -1
    description = "The server experienced an unexpected error when processing the request."


class OffsetOutOfRange(ApiError):
    error_code = 1
    description = "The requested offset is not within the range of offsets maintained."


class CorruptRecordError(ApiError):
    """A record batch failed its size or CRC-32C check (Kafka's CORRUPT_MESSAGE)."""

    error_code = 2
    retriable = True
    description = "This message has failed its CRC checksum, exceeds the valid size, or is corrupt."


class UnknownTopicOrPartition(ApiError):
    error_code = 3
    retriable = True
    description = "This server does not host this topic-partition."


class InvalidFetchSize(ApiError):
    error_code = 4
    description = "The requested fetch size is invalid."


class LeaderNotAvailable(ApiError):
    error_code = 5
    retriable = True
    description = "There is no leader for this topic-partition as we are in the middle of a leadership election."


class NotLeaderOrFollower(ApiError):
    error_code = 6
    retriable = True
    description = "This server is not the leader for that topic-partition."


class RequestTimedOut(ApiError):
    error_code = 7
    retriable = True
    description = "The request timed out."


class MessageTooLarge(ApiError):
    error_code = 10
    description = (
        "The request included a message larger than the max message size the server will accept."
    )


class OffsetMetadataTooLarge(ApiError):
    error_code = 12
    description = "The metadata field of the offset request was too large."


class CoordinatorLoadInProgress(ApiError):
    error_code = 14
    retriable = True
    description = "The coordinator is loading and hence can't process requests."


class CoordinatorNotAvailable(ApiError):
    error_code = 15
    retriable = True
    description = "The coordinator is not available."


class NotCoordinator(ApiError):
    error_code = 16
    retriable = True
    description = "This is not the correct coordinator."


class InvalidTopic(ApiError):
    error_code = 17
    description = "The request attempted to perform an operation on an invalid topic."


class RecordListTooLarge(ApiError):
    error_code = 18
    description = (
        "The request included message batch larger than the configured segment size on the server."
    )


class NotEnoughReplicas(ApiError):
    error_code = 19
    retriable = True
    description = "Messages are rejected since there are fewer in-sync replicas than required."


class NotEnoughReplicasAfterAppend(ApiError):
    error_code = 20
    retriable = True
    description = "Messages are written to the log, but to fewer in-sync replicas than required."


class InvalidRequiredAcks(ApiError):
    error_code = 21
    description = "Produce request specified an invalid value for required acks."


class IllegalGeneration(ApiError):
    error_code = 22
    description = "Specified group generation id is not valid."


class InconsistentGroupProtocol(ApiError):
    error_code = 23
    description = (
        "The group member's supported protocols are incompatible with those of existing members."
    )


class InvalidGroupId(ApiError):
    error_code = 24
    description = "The configured groupId is invalid."


class UnknownMemberId(ApiError):
    error_code = 25
    description = "The coordinator is not aware of this member."


class InvalidSessionTimeout(ApiError):
    error_code = 26
    description = "The session timeout is not within the range allowed by the broker."


class RebalanceInProgress(ApiError):
    error_code = 27
    description = "The group is rebalancing, so a rejoin is needed."


class InvalidCommitOffsetSize(ApiError):
    error_code = 28
    description = "The committing offset data size is not valid."


class TopicAuthorizationFailed(ApiError):
    error_code = 29
    description = "Topic authorization failed."


class GroupAuthorizationFailed(ApiError):
    error_code = 30
    description = "Group authorization failed."


class ClusterAuthorizationFailed(ApiError):
    error_code = 31
    description = "Cluster authorization failed."


class InvalidTimestamp(ApiError):
    error_code = 32
    description = "The timestamp of the message is out of acceptable range."


class UnsupportedVersion(ApiError):
    error_code = 35
    description = "The version of API is not supported."


class TopicAlreadyExists(ApiError):
    error_code = 36
    description = "Topic with this name already exists."


class InvalidPartitions(ApiError):
    error_code = 37
    description = "Number of partitions is below 1."


class InvalidReplicationFactor(ApiError):
    error_code = 38
    description = "Replication factor is below 1 or larger than the number of available brokers."


class InvalidReplicaAssignment(ApiError):
    error_code = 39
    description = "Replica assignment is invalid."


class NoReassignmentInProgress(ApiError):
    error_code = 85
    description = "No partition reassignment is in progress."


class InvalidRequest(ApiError):
    error_code = 42
    description = (
        "This most likely occurs because of a request being malformed by the client library."
    )


class UnsupportedForMessageFormat(ApiError):
    error_code = 43
    description = "The message format version on the broker does not support the request."


class PolicyViolation(ApiError):
    error_code = 44
    description = "Request parameters do not satisfy the configured policy."


class OutOfOrderSequenceNumber(ApiError):
    error_code = 45
    description = "The broker received an out of order sequence number."


class DuplicateSequenceNumber(ApiError):
    error_code = 46
    description = "The broker received a duplicate sequence number."


class InvalidProducerEpoch(ApiError):
    error_code = 47
    description = "Producer attempted to produce with an old epoch."


class InvalidTxnState(ApiError):
    error_code = 48
    description = "The producer attempted a transactional operation in an invalid state."


class TransactionCoordinatorFenced(ApiError):
    error_code = 52
    description = (
        "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer "
        "the current coordinator for a given producer."
    )


class InvalidConfig(ApiError):
    error_code = 40
    description = "Configuration is invalid."


class UnknownProducerId(ApiError):
    error_code = 59
    description = "This exception is raised by the broker if it could not locate the producer metadata associated with the producerId in question."


class KafkaStorageError(ApiError):
    """Disk error when trying to access a log file (Kafka's KAFKA_STORAGE_ERROR)."""

    error_code = 56
    retriable = True
    description = "Disk error when trying to access log file on the disk."


class LogDirNotFound(ApiError):
    """AlterReplicaLogDirs named a dir that is not one of the broker's ``log.dirs``."""

    error_code = 57
    description = "The user-specified log directory is not found in the broker config."


class ReplicaNotAvailable(ApiError):
    error_code = 9
    retriable = True
    description = (
        "The replica is not available for the requested topic-partition. Produce/Fetch "
        "requests and other requests intended only for the leader or follower return "
        "NOT_LEADER_OR_FOLLOWER if the broker is not a replica of the topic-partition."
    )


class GroupIdNotFound(ApiError):
    error_code = 69
    description = "The group id does not exist."


class NonEmptyGroup(ApiError):
    error_code = 68
    description = "The group is not empty."


class GroupSubscribedToTopic(ApiError):
    error_code = 86
    description = "The consumer group is actively subscribed to the topic."


class FencedLeaderEpoch(ApiError):
    error_code = 74
    retriable = True
    description = "The leader epoch in the request is older than the epoch on the broker."


class UnknownLeaderEpoch(ApiError):
    error_code = 75
    retriable = True
    description = "The leader epoch in the request is newer than the epoch on the broker."


class UnsupportedCompressionType(ApiError):
    error_code = 76
    description = "The requesting client does not support the compression type of given partition."


class MemberIdRequired(ApiError):
    error_code = 79
    description = "The group member needs to have a valid member id before actually entering a consumer group."


class FencedInstanceId(ApiError):
    error_code = 82
    description = "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id."


class GroupMaxSizeReached(ApiError):
    error_code = 81
    description = "The consumer group has reached its max size."


class FencedMemberEpoch(ApiError):
    """KIP-848: the member epoch is not the one the coordinator expects."""

    error_code = 110
    description = "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin."


class UnreleasedInstanceId(ApiError):
    error_code = 111
    description = "The instance ID is still used by another member in the consumer group. That member must leave first."


class UnsupportedAssignor(ApiError):
    error_code = 112
    description = "The assignor or its version range is not supported by the consumer group."


class StaleMemberEpoch(ApiError):
    error_code = 113
    description = "The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API."


class InvalidRegularExpression(ApiError):
    error_code = 128
    description = "The regular expression is not valid."


class InvalidRecord(ApiError):
    error_code = 87
    description = "This record has failed the validation on broker and hence will be rejected."

    def __init__(
        self,
        message: str | None = None,
        *,
        record_errors: Sequence[tuple[int, str | None]] = (),
    ) -> None:
        """``record_errors``: (index of the record in its batch, message) pairs, the Produce
        response's ``record_errors`` (Kafka's ``RecordError``)."""
        super().__init__(message)
        self.record_errors = tuple(record_errors)


class UnknownTopicId(ApiError):
    error_code = 100
    retriable = True
    description = "This server does not host this topic ID."


class InconsistentTopicId(ApiError):
    error_code = 103
    description = "The log's topic ID did not match the topic ID in the request."


class OffsetMovedToTieredStorage(ApiError):
    error_code = 109
    description = "The requested offset is moved to tiered storage."


class TransactionalIdNotFound(ApiError):
    error_code = 105
    description = "The transactionalId could not be found."


class TransactionalIdAuthorizationFailed(ApiError):
    error_code = 53
    description = "Transactional Id authorization failed."


class SecurityDisabled(ApiError):
    error_code = 54
    description = "Security features are disabled."


class UnsupportedSaslMechanism(ApiError):
    error_code = 33
    description = "The broker does not support the requested SASL mechanism."


class IllegalSaslState(ApiError):
    error_code = 34
    description = "Request is not valid given the current SASL state."


class SaslAuthenticationFailed(ApiError):
    """Raised by a SASL mechanism with the message the client is told (Kafka's
    SaslAuthenticationException: "Authentication failed: Invalid username or password")."""

    error_code = 58
    description = "SASL Authentication failed."


class ResourceNotFound(ApiError):
    error_code = 91
    description = "A request illegally referred to a resource that does not exist."


class DuplicateResource(ApiError):
    error_code = 92
    description = "A request illegally referred to the same resource twice."


class UnacceptableCredential(ApiError):
    error_code = 93
    description = "Requested credential would not meet criteria for acceptability."


# The transaction coordinator's codes (Kafka's Errors.java).


class InvalidProducerIdMapping(ApiError):
    error_code = 49
    description = (
        "The producer attempted to use a producer id which is not currently assigned to its "
        "transactional id."
    )


class InvalidTransactionTimeout(ApiError):
    error_code = 50
    description = (
        "The transaction timeout is larger than the maximum value allowed by the broker (as "
        "configured by transaction.max.timeout.ms)."
    )


class ConcurrentTransactions(ApiError):
    error_code = 51
    retriable = True
    description = (
        "The producer attempted to update a transaction while another concurrent operation on "
        "the same transaction was ongoing."
    )


class UnstableOffsetCommit(ApiError):
    error_code = 88
    retriable = True
    description = "There are unstable offsets that need to be cleared."


class ProducerFenced(ApiError):
    error_code = 90
    description = (
        "There is a newer producer with the same transactionalId which fences the current one."
    )


_REGISTRY: dict[int, type[ApiError]] = {}


def _register(cls: type[ApiError]) -> None:
    for sub in cls.__subclasses__():
        _REGISTRY.setdefault(sub.error_code, sub)
        _register(sub)


_register(ApiError)


def for_code(error_code: int) -> type[ApiError]:
    """The ApiError class for a Kafka wire error code (UnknownServerError when unknown)."""
    return _REGISTRY.get(error_code, UnknownServerError)


class SaslError(TierlogError):
    """A SASL exchange that cannot go on (a malformed token, a wrong proof) whose details the
    client must not learn (Kafka's SaslException: the client is told only that the credentials
    were invalid)."""


# --------------------------------------------------------------------------- storage


class StorageError(TierlogError):
    """Base of local-storage errors that are not Kafka wire errors."""


class CorruptIndexError(StorageError):
    """An index file failed its sanity check; delete and rebuild it from the log."""


class CorruptSnapshotError(StorageError):
    """A producer-state snapshot failed its CRC or format check; delete it and rebuild."""


class IndexOffsetOverflowError(StorageError):
    """An offset does not fit an index's 32-bit relative offset."""


class InvalidOffsetError(StorageError):
    """An index append whose offset is not larger than the last one (Kafka's InvalidOffsetException)."""


class CorruptCheckpointError(StorageError):
    """A checkpoint or metadata file (``*-checkpoint``, ``partition.metadata``) is malformed."""


class InconsistentLogDirError(StorageError):
    """A log dir's ``meta.properties`` names another node or cluster, or is malformed."""


class LogCleaningAbortedError(StorageError):
    """A log's cleaning stopped before its swap: the log changed under the cleaner (segments
    deleted or truncated, the log closed or deleted) or the cleaner is shutting down. The
    cleaned files are dropped; the log is as before (Kafka's LogCleaningAbortedException)."""


class LogSegmentOffsetOverflowError(StorageError):
    """An append would put an offset outside ``[base_offset, base_offset + 2**31 - 1]``."""

    def __init__(self, segment: object, offset: int) -> None:
        super().__init__(f"offset {offset} does not fit segment {segment}")
        self.segment = segment
        self.offset = offset


# --------------------------------------------------- remote storage plugin boundary


class RemoteStorageError(TierlogError):
    """A remote storage operation failed (Kafka's RemoteStorageException).

    ``segment``: the remote segment id (``topic-partition:uuid``) whose read failed, set by
    the reader when known; the broker keys its rate-limited error log on it.
    """

    segment: str | None = None

    @property
    def permanent(self) -> bool:
        """True when retrying cannot help: the object is gone or its bytes are corrupt."""
        return False


class CorruptRemoteDataError(RemoteStorageError):
    """A remote object's bytes are corrupt (a bad batch, CRC or index)."""

    @property
    def permanent(self) -> bool:
        return True


class RemoteDecryptionError(RemoteStorageError):
    """A remote object cannot be decrypted: encrypted with another key, or an AES-GCM
    authentication tag fails (the object was changed or moved), or it is encrypted and no key
    is configured. Never retried into garbage: the read fails."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """The remote object does not exist (Kafka's RemoteResourceNotFoundException)."""

    @property
    def permanent(self) -> bool:
        return True


class RemoteStorageNotReadyError(RemoteStorageError):
    """Remote log metadata of a partition is still loading; retry (Kafka's RemoteStorageNotReadyException)."""


class InvalidRemoteStateTransitionError(RemoteStorageError):
    """A remote segment/partition state change that the lifecycle forbids (e.g. FINISHED -> STARTED)."""

    def __init__(self, src: object, dst: object, what: object) -> None:
        super().__init__(f"{what}: illegal state transition {src} -> {dst}")
        self.src = src
        self.dst = dst


class CorruptMetadataError(StorageError):
    """A remote log metadata record (``__remote_log_metadata`` value) is malformed."""


class CorruptMetadataCacheError(StorageError):
    """A remote log metadata cache file is missing, truncated or fails its CRC; re-read the topic."""


# --------------------------------------------------------------------------- cluster


class ZooKeeperClientError(TierlogError):
    """ZooKeeper cannot be reached or refused what a broker needs from it: no connection within
    ``zookeeper.connection.timeout.ms``, a broker id another live broker holds, a session that
    expired under a request (Kafka's ZooKeeperClientException and its startup failures)."""


# --------------------------------------------------------------------------- broker-to-broker


class BrokerNotAvailableError(TierlogError, ConnectionError):
    """Another broker cannot be reached: connection refused, reset or closed, or a request
    to it timed out. The message names the broker's ``host:port``; every request pending on
    the connection fails with it. A ``ConnectionError`` (an ``OSError``), so code that
    handles socket failures handles this too. Not a wire error (Kafka's BROKER_NOT_AVAILABLE,
    code 8, is what a broker *answers*)."""

    def __init__(self, host: str, port: int, message: str) -> None:
        super().__init__(f"{host}:{port}: {message}")
        self.host = host
        self.port = port


class BrokerAuthenticationError(BrokerNotAvailableError):
    """Another broker refused this broker's SASL login (a wrong inter-broker password, a user
    it does not know, a mechanism it does not enable). The message names the user, the
    mechanism and the peer's reason; the connection is closed."""


class BrokerRequestTimeoutError(BrokerNotAvailableError, TimeoutError):
    """A request to another broker got no response in time; the connection was closed (as
    Kafka's NetworkClient disconnects on a request timeout), failing the other requests."""


# --------------------------------------------------------------------------- Spark data source


class DataLossError(TierlogError):
    """Offsets a read needs are gone from the log (retention, DeleteRecords, topic deletion) and the source option ``failOnDataLoss`` is true."""


class DeliveryError(TierlogError):
    """The Spark sink could not deliver a record (the task fails and Spark retries it)."""


__all__ = [name for name, obj in globals().items() if isinstance(obj, type)] + ["for_code"]
