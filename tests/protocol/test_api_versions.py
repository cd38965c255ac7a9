"""The advertised table against design/protocol.md's client caps and traps, and kio's schemas."""

from __future__ import annotations

import pytest
from kio.schema.index import api_key_map, schema_name_map

from tierlog.protocol import (
    ADVERTISED,
    ApiKey,
    _legacy,
    advertised,
    api_name,
    api_versions_response,
    implemented_min,
    is_advertised,
    request_class,
    response_class,
)

# protocol.md, "Version caps per client": api key -> highest version each client sends
# (kafka-python, librdkafka, aiokafka, kafkajs)
CLIENT_CAPS: dict[int, tuple[int, ...]] = {
    ApiKey.PRODUCE: (9, 10, 7, 7),
    ApiKey.FETCH: (12, 16, 11, 11),
    ApiKey.LIST_OFFSETS: (11, 7, 3, 3),
    ApiKey.METADATA: (13, 13, 5, 6),
    ApiKey.OFFSET_COMMIT: (8, 9, 3, 5),
    ApiKey.OFFSET_FETCH: (8, 9, 3, 4),
    ApiKey.FIND_COORDINATOR: (6, 2, 1, 2),
    ApiKey.JOIN_GROUP: (7, 5, 5, 5),
    ApiKey.SYNC_GROUP: (5, 3, 3, 3),
    ApiKey.HEARTBEAT: (4, 3, 1, 3),
    ApiKey.LEAVE_GROUP: (5, 1, 1, 3),
    ApiKey.INIT_PRODUCER_ID: (4, 4, 0, 1),
    ApiKey.CREATE_TOPICS: (7, 4, 3, 3),
    ApiKey.DELETE_TOPICS: (6, 4, 3, 1),
    ApiKey.DESCRIBE_CONFIGS: (4, 1, 2, 2),
    ApiKey.ALTER_CONFIGS: (2, 2, 1, 1),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (1, 1),
    ApiKey.DELETE_RECORDS: (2, 2, 2, 1),
    ApiKey.API_VERSIONS: (4, 3, 0, 2),
    # kafka-python 3's transaction manager (max_version=3), aiokafka 0.14 (v0)
    ApiKey.ADD_PARTITIONS_TO_TXN: (3, 0),
    ApiKey.ADD_OFFSETS_TO_TXN: (3, 0),
    ApiKey.END_TXN: (3, 0),
    ApiKey.TXN_OFFSET_COMMIT: (3, 0),
}

# librdkafka up to 2.11 checks single versions: these must start at 0
LIBRDKAFKA_MIN_0 = [
    ApiKey.PRODUCE,
    ApiKey.FIND_COORDINATOR,
    ApiKey.JOIN_GROUP,
    ApiKey.SYNC_GROUP,
    ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.INIT_PRODUCER_ID,
    ApiKey.LIST_OFFSETS,
    ApiKey.SASL_HANDSHAKE,  # librdkafka 2.0 (Debian's kcat): no SASL without v0
]

# issue 3: the APIs the broker implements
ISSUE_3 = {
    "ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "DeleteRecords",
    "CreateTopics", "DeleteTopics", "CreatePartitions", "DescribeConfigs", "AlterConfigs",
    "IncrementalAlterConfigs", "DescribeCluster", "FindCoordinator", "JoinGroup", "SyncGroup",
    "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch", "ListGroups", "DescribeGroups",
    "DeleteGroups", "InitProducerId",
}  # fmt: skip
# issue 9: the cluster's (followers truncate by leader epoch; consumers validate positions)
ISSUE_9 = {
    "OffsetForLeaderEpoch",
    "ElectLeaders",
    "AlterPartitionReassignments",
    "ListPartitionReassignments",
}
# issue 12: listener security
ISSUE_12 = {
    "SaslHandshake", "SaslAuthenticate", "DescribeUserScramCredentials",
    "AlterUserScramCredentials", "DescribeAcls", "CreateAcls", "DeleteAcls",
}  # fmt: skip
# issue 15: the admin APIs operators use
ISSUE_15 = {
    "DescribeLogDirs", "OffsetDelete", "DescribeProducers", "DescribeClientQuotas",
    "AlterClientQuotas",
}  # fmt: skip
ISSUE_15 |= {"ConsumerGroupHeartbeat", "ConsumerGroupDescribe"}  # KIP-848
# issue 10: JBOD moves of a partition between the log dirs of a broker
ISSUE_10 = {"AlterReplicaLogDirs"}

# issue 11: transactions (the log's side; the coordinator's APIs add to it)
ISSUE_11 = {
    "WriteTxnMarkers",
    "AddPartitionsToTxn",
    "AddOffsetsToTxn",
    "EndTxn",
    "TxnOffsetCommit",
    "DescribeTransactions",
    "ListTransactions",
}


def test_exactly_the_apis_of_issues_3_9_10_11_12_and_15() -> None:
    assert {api_name(k) for k in ADVERTISED} == (
        ISSUE_3 | ISSUE_9 | ISSUE_10 | ISSUE_11 | ISSUE_12 | ISSUE_15
    )
    assert set(ADVERTISED) == set(ApiKey)


@pytest.mark.parametrize("key", LIBRDKAFKA_MIN_0)
def test_librdkafka_single_version_checks_see_min_0(key: int) -> None:
    assert ADVERTISED[key][0] == 0


@pytest.mark.parametrize("key", sorted(CLIENT_CAPS))
def test_max_covers_every_clients_cap(key: int) -> None:
    assert ADVERTISED[key][1] >= max(CLIENT_CAPS[key])


def test_aiokafka_low_versions_are_inside_the_ranges() -> None:
    for key, low in [
        (ApiKey.METADATA, 5),
        (ApiKey.LIST_OFFSETS, 3),
        (ApiKey.FIND_COORDINATOR, 1),
        (ApiKey.OFFSET_COMMIT, 2),
        (ApiKey.OFFSET_FETCH, 1),
    ]:
        assert is_advertised(key, low)
    assert is_advertised(ApiKey.OFFSET_COMMIT, 3) and is_advertised(ApiKey.OFFSET_FETCH, 3)


def test_fetch_with_topic_ids_up_to_16_and_implemented_minimums() -> None:
    assert ADVERTISED[ApiKey.FETCH] == (4, 16)
    assert implemented_min(ApiKey.PRODUCE) == 3
    assert implemented_min(ApiKey.FETCH) == 4
    assert implemented_min(ApiKey.METADATA) == 0
    with pytest.raises(KeyError):
        implemented_min(57)  # UpdateFeatures: not served


@pytest.mark.parametrize("key", sorted(ADVERTISED))
def test_every_version_has_a_schema(key: int) -> None:
    lo, hi = ADVERTISED[key]
    kio_versions = schema_name_map[api_key_map[key]]
    for v in range(lo, hi + 1):
        if v >= implemented_min(key):
            assert v in kio_versions
            assert request_class(key, v).__module__.startswith("kio.")
        else:
            assert (key, v) in _legacy.REQUESTS
        assert response_class(key, v) is not None
    assert not is_advertised(key, hi + 1)
    assert not is_advertised(key, lo - 1)
    with pytest.raises(KeyError):
        request_class(key, hi + 1)
    with pytest.raises(KeyError):
        response_class(key, hi + 1)


def test_lookups() -> None:
    assert advertised(ApiKey.API_VERSIONS) == (0, 4)
    assert advertised(57) is None  # UpdateFeatures
    assert api_name(ApiKey.INIT_PRODUCER_ID) == "InitProducerId"
    assert api_name(1000) == "ApiKey1000"


@pytest.mark.parametrize("version", range(5))
def test_api_versions_response_lists_the_table(version: int) -> None:
    resp = api_versions_response(version)
    assert type(resp) is response_class(ApiKey.API_VERSIONS, version)
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == dict(ADVERTISED)
    assert all(type(k.api_key) is int for k in resp.api_keys)
