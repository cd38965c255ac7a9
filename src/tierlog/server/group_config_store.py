"""Where a single node keeps its group configs: ``<first log dir>/group-configs.json``.

Kafka keeps group configs in its KRaft metadata log; a single tierlog node has no metadata
log, so it keeps them in one small JSON file, replaced atomically on each change::

    {"version": 1, "groups": {"<group id>": {"consumer.session.timeout.ms": "50000"}}}

A ZooKeeper cluster has no place for them in Kafka's znodes (Kafka's ZooKeeper mode never had
group configs): there AlterConfigs on a group is refused with a message. Not thread-safe:
the event loop calls it (the write runs in a thread).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from tierlog.errors import ConfigError
from tierlog.log.log_file_utils import write_atomically

__all__ = ["GROUP_CONFIGS_FILE", "load_group_configs", "save_group_configs"]

GROUP_CONFIGS_FILE = "group-configs.json"


def load_group_configs(path: Path) -> dict[str, dict[str, str]]:
    """The stored configs (empty when the file does not exist).

    Raises:
        ConfigError: the file is not a version 1 group configs file.
    """
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return {}
    except (ValueError, OSError) as exc:
        raise ConfigError(str(path), f"unreadable group configs file: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != 1:
        raise ConfigError(str(path), "not a version 1 group configs file")
    groups = data.get("groups", {})
    if not isinstance(groups, dict) or not all(
        isinstance(v, dict) and all(isinstance(x, str) for x in v.values()) for v in groups.values()
    ):
        raise ConfigError(str(path), "groups must map group ids to string configs")
    return {g: dict(v) for g, v in groups.items()}


def save_group_configs(path: Path, configs: Mapping[str, Mapping[str, str]]) -> None:
    """Replace the file (temp file, fsync, rename).

    Raises:
        OSError: the write failed; the old file is intact.
    """
    groups = {g: dict(sorted(v.items())) for g, v in sorted(configs.items()) if v}
    data = json.dumps({"version": 1, "groups": groups}, indent=1).encode()
    write_atomically(path, data)
