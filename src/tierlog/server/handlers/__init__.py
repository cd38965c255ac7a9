"""Request handlers, one module per API family, and the dispatch table by API key."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from tierlog.server.handlers import (
    acls,
    admin,
    client_quotas,
    cluster_admin,
    configs,
    consumer_group,
    fetch,
    group,
    list_offsets,
    log_dirs,
    metadata,
    offset_delete,
    produce,
    producer,
    replication,
    security,
    transactions,
    txn_markers,
)

HANDLERS: Mapping[int, Callable[[Any, Any], Any]] = MappingProxyType(
    {
        0: produce.handle_produce,
        1: fetch.handle_fetch,
        2: list_offsets.handle_list_offsets,
        3: metadata.handle_metadata,
        8: group.handle_offset_commit,
        9: group.handle_offset_fetch,
        10: group.handle_find_coordinator,
        11: group.handle_join_group,
        12: group.handle_heartbeat,
        13: group.handle_leave_group,
        14: group.handle_sync_group,
        15: group.handle_describe_groups,
        16: group.handle_list_groups,
        17: security.handle_sasl_handshake,
        18: metadata.handle_api_versions,
        19: admin.handle_create_topics,
        20: admin.handle_delete_topics,
        21: admin.handle_delete_records,
        22: producer.handle_init_producer_id,
        23: replication.handle_offset_for_leader_epoch,
        24: transactions.handle_add_partitions_to_txn,
        25: transactions.handle_add_offsets_to_txn,
        26: transactions.handle_end_txn,
        27: txn_markers.handle_write_txn_markers,
        28: transactions.handle_txn_offset_commit,
        29: acls.handle_describe_acls,
        30: acls.handle_create_acls,
        31: acls.handle_delete_acls,
        32: configs.handle_describe_configs,
        33: configs.handle_alter_configs,
        34: log_dirs.handle_alter_replica_log_dirs,
        35: log_dirs.handle_describe_log_dirs,
        36: security.handle_sasl_authenticate,
        37: admin.handle_create_partitions,
        42: group.handle_delete_groups,
        43: cluster_admin.handle_elect_leaders,
        44: configs.handle_incremental_alter_configs,
        45: cluster_admin.handle_alter_partition_reassignments,
        46: cluster_admin.handle_list_partition_reassignments,
        47: offset_delete.handle_offset_delete,
        48: client_quotas.handle_describe_client_quotas,
        49: client_quotas.handle_alter_client_quotas,
        50: security.handle_describe_user_scram_credentials,
        51: security.handle_alter_user_scram_credentials,
        60: metadata.handle_describe_cluster,
        68: consumer_group.handle_consumer_group_heartbeat,
        69: consumer_group.handle_consumer_group_describe,
        61: producer.handle_describe_producers,
        65: transactions.handle_describe_transactions,
        66: transactions.handle_list_transactions,
    }
)

__all__ = ["HANDLERS"]
