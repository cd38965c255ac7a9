"""Legal topic names: Kafka's ``Topic`` (clients' ``common.internals``).

A topic name is 1..249 characters of ``[a-zA-Z0-9._-]``, and neither "." nor "..", so it can
be a directory name (``<topic>-<partition>``) that never contains a path separator or reaches
outside its log dir. '.' and '_' collide (Kafka's metric names replace one by the other), so
two topics whose names differ only there cannot both exist.

The internal topics clients may read but never produce to are named here too, as Kafka's
``Topic.GROUP_METADATA_TOPIC_NAME`` and ``Topic.isInternal``.
"""

from __future__ import annotations

import re

from tierlog.errors import InvalidTopic

__all__ = [
    "GROUP_METADATA_TOPIC_NAME",
    "INTERNAL_TOPICS",
    "MAX_TOPIC_NAME_LENGTH",
    "unify_collision_chars",
    "validate_topic_name",
]

#: Internal topics that clients may read but never produce to.
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
INTERNAL_TOPICS = frozenset(
    {GROUP_METADATA_TOPIC_NAME, "__remote_log_metadata", "__transaction_state"}
)

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``: 1..249 characters of ``[a-zA-Z0-9._-]``, not "." or "..".

    So no topic name can contain a path separator or reach outside its log dir.

    Raises:
        InvalidTopic: with Kafka's message.
    """
    if not name:
        raise InvalidTopic("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopic('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopic(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
            f"characters, topic name: {name}"
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopic(
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )


def unify_collision_chars(name: str) -> str:
    """Kafka's ``Topic.unifyCollisionChars``: '.' and '_' collide in metric names, so two
    names with the same result collide."""
    return name.replace(".", "_")
