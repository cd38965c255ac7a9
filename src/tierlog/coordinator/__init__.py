"""The coordinators (Kafka's ``kafka.coordinator``): state machines kept in internal topics.

* :mod:`~tierlog.coordinator.offset_store` -- :class:`OffsetStore`, what a coordinator needs
  from its internal topic: append records to a partition, replay a partition. The broker's
  implementation over the replica manager is :mod:`tierlog.server.offset_store`.
* :mod:`~tierlog.coordinator.group` -- the classic consumer-group coordinator on
  ``__consumer_offsets`` (Kafka's ``kafka.coordinator.group``).

Imports point one way: ``server`` imports the coordinators, never the reverse.
"""
