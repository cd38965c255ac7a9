"""SCRAM credentials on one node: ``<first log dir>/scram-credentials``.

The file is JSON, each credential in Kafka's own string form (what ZooKeeper's
``/config/users/<user>`` holds, so a later move to ZooKeeper keeps the values)::

    {"version": 1,
     "users": {"alice": {"SCRAM-SHA-256":
                           "salt=...,stored_key=...,server_key=...,iterations=8192"}}}

Written atomically (a 0600 temporary file, fsync, rename, fsync of the directory), so a crash
leaves the old or the new file, never a torn one. Salted, iterated keys only: never a password.

A broker re-reads the file when its modification time or size changed, so ``tierlog scram
add`` run beside a live broker takes effect at the next authentication.

Thread-safe (one lock); :meth:`upsert` and :meth:`delete` are idempotent.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Protocol

from tierlog.errors import ConfigError
from tierlog.security.scram import ScramCredential, ScramMechanism

__all__ = ["SCRAM_CREDENTIALS_FILE", "CredentialStore", "ScramCredentialStore"]

SCRAM_CREDENTIALS_FILE = "scram-credentials"


class ScramCredentialStore(Protocol):
    """Where a broker's SCRAM credentials live: this file on one node, ZooKeeper's
    ``/config/users`` in a cluster (:mod:`~tierlog.security.zk_credential_store`).
    :meth:`get` and :meth:`users` are cheap (the event loop calls them); :meth:`alter` blocks."""

    def get(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None: ...
    def users(self) -> dict[str, dict[ScramMechanism, int]]: ...
    def alter(
        self,
        upserts: list[tuple[str, ScramMechanism, ScramCredential]],
        deletions: list[tuple[str, ScramMechanism]],
    ) -> None: ...


class CredentialStore:
    """The SCRAM credentials of every user, backed by one file.

    Raises:
        ValueError: (from the constructor and reads) the file exists but is not a credential
            file (the broker refuses to start rather than lose the users in it).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._stamp: tuple[int, int] | None = None
        with self._lock:
            self._reload_if_changed()

    @classmethod
    def in_log_dir(cls, log_dir: Path) -> CredentialStore:
        return cls(Path(log_dir) / SCRAM_CREDENTIALS_FILE)

    # ----------------------------------------------------------------- reads

    def get(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        with self._lock:
            self._reload_if_changed()
            return self._users.get(user, {}).get(mechanism.mechanism_name)

    def users(self) -> dict[str, dict[ScramMechanism, int]]:
        """User → mechanism → iterations (DescribeUserScramCredentials)."""
        with self._lock:
            self._reload_if_changed()
            out: dict[str, dict[ScramMechanism, int]] = {}
            for user, creds in self._users.items():
                for name, c in creds.items():
                    m = ScramMechanism.for_name(name)
                    if m is not None:
                        out.setdefault(user, {})[m] = c.iterations
            return out

    # ----------------------------------------------------------------- writes

    def alter(
        self,
        upserts: list[tuple[str, ScramMechanism, ScramCredential]],
        deletions: list[tuple[str, ScramMechanism]],
    ) -> None:
        """Apply upserts and deletions, then write the file once.

        Raises:
            OSError: the file cannot be written (nothing changed then).
        """
        with self._lock:
            self._reload_if_changed()
            users = {u: dict(c) for u, c in self._users.items()}
            for user, m, cred in upserts:
                users.setdefault(user, {})[m.mechanism_name] = cred
            for user, m in deletions:
                creds = users.get(user, {})
                creds.pop(m.mechanism_name, None)
                if not creds:
                    users.pop(user, None)
            self._write(users)
            self._users = users

    def upsert(self, user: str, mechanism: ScramMechanism, credential: ScramCredential) -> None:
        self.alter([(user, mechanism, credential)], [])

    def delete(self, user: str, mechanism: ScramMechanism) -> None:
        self.alter([], [(user, mechanism)])

    # ----------------------------------------------------------------- file

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _reload_if_changed(self) -> None:
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return
        users: dict[str, dict[str, ScramCredential]] = {}
        if stamp is not None:
            try:
                doc: Any = json.loads(self.path.read_text(encoding="utf-8"))
                for user, creds in doc["users"].items():
                    users[str(user)] = {
                        str(name): ScramCredential.from_kafka_string(str(text))
                        for name, text in creds.items()
                    }
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                raise ConfigError(str(self.path), f"not a SCRAM credential file: {e}") from None
        self._users = users
        self._stamp = stamp

    def _write(self, users: dict[str, dict[str, ScramCredential]]) -> None:
        doc = {
            "version": 1,
            "users": {
                u: {name: c.to_kafka_string() for name, c in sorted(creds.items())}
                for u, creds in sorted(users.items())
            },
        }
        data = (json.dumps(doc, indent=1) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self._stamp = self._file_stamp()
