"""The client quotas of a single node: ``<first log dir>/client-quotas.json``.

Format (the entity paths and string values of Kafka's ``/config`` znodes)::

    {"version": 1,
     "quotas": {"clients/<default>": {"producer_byte_rate": "1048576"},
                "users/alice/clients/app": {"consumer_byte_rate": "2097152"}}}

Written whole on every change (temp file, fsync, rename); read once at startup. A file that
does not parse stops the broker with its path (it holds operator decisions; guessing would
lift or impose quotas silently). Thread-safe: one lock around read-modify-write.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path

from tierlog.errors import ConfigError
from tierlog.log.log_file_utils import write_atomically
from tierlog.quotas.client_quota_entity import (
    QUOTA_KEYS,
    ClientQuotaEntity,
    InvalidQuotaError,
)

__all__ = ["FILE_NAME", "FileQuotaStore", "QuotaMap"]

FILE_NAME = "client-quotas.json"

QuotaMap = dict[ClientQuotaEntity, dict[str, float]]


class FileQuotaStore:
    """Loads and writes the quota file (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def load(self) -> QuotaMap:
        """Every entity's quotas.

        Raises:
            ConfigError: the file does not parse (named, with why).
        """
        with self._lock:
            return self._read()

    def _read(self) -> QuotaMap:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("version") != 1:
                raise ValueError("not a version 1 quota file")
            out: QuotaMap = {}
            for path, config in dict(doc.get("quotas") or {}).items():
                entity = ClientQuotaEntity.from_path(path)
                values = {k: float(v) for k, v in dict(config).items() if k in QUOTA_KEYS}
                if values:
                    out[entity] = values
        except (ValueError, TypeError, InvalidQuotaError) as e:
            raise ConfigError(str(self.path), f"unreadable client quota file: {e}") from e
        return out

    def alter(self, changes: Mapping[ClientQuotaEntity, Mapping[str, float | None]]) -> QuotaMap:
        """Apply ``changes`` (None: remove the key), write the file; the new quotas."""
        with self._lock:
            quotas = self._read()
            for entity, ops in changes.items():
                current = quotas.setdefault(entity, {})
                for key, value in ops.items():
                    if value is None:
                        current.pop(key, None)
                    else:
                        current[key] = value
                if not current:
                    del quotas[entity]
            doc = {
                "version": 1,
                "quotas": {
                    e.path: {k: str(int(v)) for k, v in sorted(q.items())}
                    for e, q in sorted(quotas.items(), key=lambda kv: kv[0].path)
                },
            }
            write_atomically(self.path, json.dumps(doc, indent=1).encode())
            return quotas
