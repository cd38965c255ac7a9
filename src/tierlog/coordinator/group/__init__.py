"""The classic consumer-group coordinator (Kafka's ``kafka.coordinator.group``).

* :mod:`~tierlog.coordinator.group.group_coordinator` -- :class:`GroupCoordinator`: the
  membership protocol's requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit's
  member checks) and the coordinator's lifecycle.
* :mod:`~tierlog.coordinator.group.group_rebalance` -- :class:`GroupRebalance`: a classic
  group's join and sync phases and their timers;
  :mod:`~tierlog.coordinator.group.session_timers` -- members' session timers.
* :mod:`~tierlog.coordinator.group.group_metadata_manager` -- :class:`GroupMetadataManager`:
  the groups cache, the ``__consumer_offsets`` partitions this broker owns and their loading,
  the appends to them, storing group metadata, ListGroups, DescribeGroups, DeleteGroups.
* :mod:`~tierlog.coordinator.group.offset_metadata_manager` -- :class:`OffsetMetadataManager`:
  storing committed offsets (OffsetCommit, TxnOffsetCommit and its pending offsets),
  OffsetFetch, OffsetDelete.
* :mod:`~tierlog.coordinator.group.group_metadata` -- :class:`GroupMetadata`: one group's
  state machine and bookkeeping; :mod:`~tierlog.coordinator.group.member_metadata` -- one
  member (:class:`MemberMetadata`) and the answers it awaits.
* :mod:`~tierlog.coordinator.group.group_records` -- the record key and value schemas of
  ``__consumer_offsets``.

KIP-848 consumer groups, beside the classic ones (a group id is one or the other):

* :mod:`~tierlog.coordinator.group.consumer_group` -- :class:`ConsumerGroup`, the sans-IO
  heartbeat state machine; :mod:`~tierlog.coordinator.group.consumer_group_member` -- a
  member and the heartbeat's values;
  :mod:`~tierlog.coordinator.group.current_assignment_builder` -- reconciliation (revoke
  before reassign); :mod:`~tierlog.coordinator.group.assignors` -- ``uniform``, ``range``.
* :mod:`~tierlog.coordinator.group.consumer_group_coordinator` -- timers, appends,
  ConsumerGroupDescribe; :mod:`~tierlog.coordinator.group.consumer_group_records` -- record
  types 3-8; :mod:`~tierlog.coordinator.group.group_config` -- group configs.
"""
