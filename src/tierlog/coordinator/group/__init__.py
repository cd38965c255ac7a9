"""The classic consumer-group coordinator (Kafka's ``kafka.coordinator.group``).

* :mod:`~tierlog.coordinator.group.group_coordinator` -- :class:`GroupCoordinator`: the
  membership protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit's member
  checks), rebalances and their timers.
* :mod:`~tierlog.coordinator.group.group_metadata_manager` -- :class:`GroupMetadataManager`:
  the groups cache, the ``__consumer_offsets`` partitions this broker owns and their loading,
  storing group metadata and offsets, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups.
* :mod:`~tierlog.coordinator.group.group_metadata` -- :class:`GroupMetadata`: one group's
  state machine and bookkeeping; :mod:`~tierlog.coordinator.group.member_metadata` -- one
  member (:class:`MemberMetadata`) and the answers it awaits.
* :mod:`~tierlog.coordinator.group.group_records` -- the record key and value schemas of
  ``__consumer_offsets``.
"""
