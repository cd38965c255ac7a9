"""Client quotas in ZooKeeper, where Kafka's ZooKeeper mode keeps them::

    /config/users/<user>                      {"version":1,"config":{"producer_byte_rate":"..."}}
    /config/users/<user>/clients/<client-id>  (the same)
    /config/clients/<client-id>               (the same)
    /config/changes/config_change_<seq>       {"version":2,"entity_path":"users/alice/clients/a"}

Names are URL-encoded, ``<default>`` is the default entity (Kafka's ``Sanitizer`` and
``ConfigEntityName.Default``), so ``kafka-configs --zookeeper`` and ``zkCli.sh`` read the same
thing. A change writes the entity's znode, then a change notification; every broker watches
``/config/changes`` and reloads the quotas when a notification appears (any broker may
serve AlterClientQuotas). Blocking calls: run them in a thread. Thread-safe (the ZooKeeper
client is).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tierlog.cluster import zk_data as zd
from tierlog.cluster.kafka_zk_client import KafkaZkClient
from tierlog.quotas.client_quota_entity import QUOTA_KEYS, ClientQuotaEntity

__all__ = ["ZkClientQuotaStore"]

QuotaMap = dict[ClientQuotaEntity, dict[str, float]]


class ZkClientQuotaStore:
    """Loads and writes the quotas under ``/config`` (see the module docstring)."""

    def __init__(self, zk: KafkaZkClient) -> None:
        self.zk = zk

    def _read(self, path: str) -> dict[str, float]:
        got = self.zk.get_data(f"{zd.CONFIG_PATH}/{path}")
        if got is None or not got[0]:
            return {}
        config = zd.decode_topic_config(got[0], f"{zd.CONFIG_PATH}/{path}")
        return {k: float(v) for k, v in config.items() if k in QUOTA_KEYS}

    def load(self) -> QuotaMap:
        """Every entity's quotas."""
        paths = [f"clients/{c}" for c in self.zk.get_children(f"{zd.CONFIG_PATH}/clients")]
        for u in self.zk.get_children(f"{zd.CONFIG_PATH}/users"):
            paths.append(f"users/{u}")
            paths += [
                f"users/{u}/clients/{c}"
                for c in self.zk.get_children(f"{zd.CONFIG_PATH}/users/{u}/clients")
            ]
        out: QuotaMap = {}
        for path in paths:
            values = self._read(path)
            if values:
                out[ClientQuotaEntity.from_path(path)] = values
        return out

    def alter(self, changes: Mapping[ClientQuotaEntity, Mapping[str, float | None]]) -> QuotaMap:
        """Write each changed entity and announce it; the quotas after the change."""
        for entity, ops in changes.items():
            path = f"{zd.CONFIG_PATH}/{entity.path}"
            got = self.zk.get_data(path)
            config = zd.decode_topic_config(got[0], path) if got is not None and got[0] else {}
            for key, value in ops.items():
                if value is None:
                    config.pop(key, None)
                else:
                    config[key] = str(int(value))
            self.zk.set_or_create(path, zd.encode_topic_config(config))
            change = f"{zd.CONFIG_CHANGES_PATH}/{zd.CONFIG_CHANGE_PREFIX}"
            self.zk.kazoo.create(
                change,
                zd.encode_config_change_notification(entity.path),
                sequence=True,
                makepath=True,
            )
        return self.load()

    def watch(self, changed: Callable[[], None]) -> None:
        """``changed()`` (on ZooKeeper's thread) after every config change notification."""
        self.zk.watch_children(zd.CONFIG_CHANGES_PATH, lambda _children: changed())
