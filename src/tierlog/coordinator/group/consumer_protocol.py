"""The topics of a classic consumer's subscription (Kafka's ``ConsumerProtocolSubscription``),
read from the member metadata a consumer sends in JoinGroup. Sans-IO.

Every version (0-3) starts the same way, not flexible::

    version  int16
    topics   int32 count, then each an int16 length and that many UTF-8 bytes
    (user_data, owned_partitions, generation_id, rack_id follow; not read here)

OffsetDelete uses it as Kafka's ``GroupMetadata.subscribedTopics``: the offsets of a topic a
live consumer group subscribes to are not deleted (GROUP_SUBSCRIBED_TO_TOPIC).
"""

from __future__ import annotations

import struct

__all__ = ["PROTOCOL_TYPE", "subscribed_topics"]

#: The protocol type of Kafka's consumers (as opposed to Connect's "connect").
PROTOCOL_TYPE = "consumer"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of a subscription; None when ``metadata`` does not parse as one."""
    try:
        pos = _I16.size  # the version: every one begins with the topics
        (count,) = _I32.unpack_from(metadata, pos)
        pos += _I32.size
        if count < 0 or count > len(metadata):
            return None
        topics = []
        for _ in range(count):
            (n,) = _I16.unpack_from(metadata, pos)
            pos += _I16.size
            if n < 0 or pos + n > len(metadata):
                return None
            topics.append(metadata[pos : pos + n].decode())
            pos += n
    except (struct.error, UnicodeDecodeError):
        return None
    return frozenset(topics)
