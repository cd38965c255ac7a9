"""SCRAM credentials in ZooKeeper, as Kafka's ZooKeeper mode keeps them (``kafka-configs.sh
--zookeeper ... --entity-type users --alter --add-config 'SCRAM-SHA-256=[...]'`` writes the
same; cluster-reference.md §1)::

    /config/users/<sanitized user>
        {"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,
                                                iterations=8192"}}
    /config/changes/config_change_<seq>
        {"version":2,"entity_path":"users/<sanitized user>"}

The user's znode holds its other configs too (quotas such as ``producer_byte_rate``): a write
changes only the SCRAM keys in it. The name is Kafka's ``Sanitizer.sanitize`` of the user (URL
encoding, ``*`` as ``%2A``). A write is a compare-and-set on the znode's version (retried when
another broker wrote in between), then a sequential change node; every broker watches
``/config/changes`` and reloads the users named by the changes it has not processed yet
(Kafka's ``ZkNodeChangeNotificationListener``), so a new user can log in on every broker at
once.

Reads (:meth:`ZkCredentialStore.get`, :meth:`ZkCredentialStore.users`) come from memory: they
run on the event loop during a SASL exchange. Writes and reloads are ZooKeeper round trips, in
worker threads (the change watch hands its work to one reload thread).

Thread-safe (one lock around the cache); :meth:`alter` is idempotent.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import urllib.parse
from typing import TYPE_CHECKING

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from tierlog.cluster import zk_data as zd
from tierlog.cluster.zookeeper_client import create_call, set_call
from tierlog.errors import ZooKeeperClientError
from tierlog.security.scram import ScramCredential, ScramMechanism

if TYPE_CHECKING:
    from tierlog.cluster.kafka_zk_client import KafkaZkClient
    from tierlog.cluster.zk_watches import WatchHandle

__all__ = ["CONFIG_USERS_PATH", "ZkCredentialStore", "desanitize", "sanitize"]

log = logging.getLogger(__name__)

CONFIG_USERS_PATH = "/config/users"
_CAS_ATTEMPTS = 20
_MECHANISMS = frozenset(m.mechanism_name for m in ScramMechanism)


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: Java's URLEncoder (``[A-Za-z0-9._-*]`` kept) with
    ``+`` as ``%20`` and ``*`` as ``%2A``, so any user name is one znode name."""
    return urllib.parse.quote(name, safe="._-").replace("~", "%7E")


def desanitize(name: str) -> str:
    """The inverse of :func:`sanitize`."""
    return urllib.parse.unquote(name)


def _user_path(user: str) -> str:
    return f"{CONFIG_USERS_PATH}/{sanitize(user)}"


def _scram_of(config: dict[str, str], where: str) -> dict[str, ScramCredential]:
    out: dict[str, ScramCredential] = {}
    for key, value in config.items():
        if key in _MECHANISMS:
            try:
                out[key] = ScramCredential.from_kafka_string(value)
            except ValueError as e:
                log.warning("ignoring the unreadable %s credential in %s: %s", key, where, e)
    return out


class ZkCredentialStore:
    """The SCRAM credentials of a ZooKeeper cluster; see the module docstring.

    Built before the ZooKeeper session exists (the listeners' SASL servers hold it); serves
    nothing until :meth:`start`.
    """

    path = CONFIG_USERS_PATH

    def __init__(self) -> None:
        self._zk: KafkaZkClient | None = None
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._last_change = -1
        self._watch: WatchHandle | None = None
        self._reloader: concurrent.futures.ThreadPoolExecutor | None = None

    # ----------------------------------------------------------------- lifecycle

    def start(self, zk: KafkaZkClient, *, watch: bool = True) -> None:
        """Read every user, then (``watch``) follow ``/config/changes``. Blocking."""
        self._zk = zk
        zk.ensure_paths([CONFIG_USERS_PATH, zd.CONFIG_CHANGES_PATH])
        # The changes made before this read are in it: only later ones need processing.
        seqs = [_seq(c) for c in zk.get_children(zd.CONFIG_CHANGES_PATH)]
        self._last_change = max([s for s in seqs if s is not None], default=-1)
        users: dict[str, dict[str, ScramCredential]] = {}
        for child in zk.get_children(CONFIG_USERS_PATH):
            creds = self._read_user(desanitize(child))
            if creds:
                users[desanitize(child)] = creds
        with self._lock:
            self._users = users
        if watch:
            self._reloader = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="scram-credentials"
            )
            self._watch = zk.watch_children(zd.CONFIG_CHANGES_PATH, self._changes_seen)

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._reloader is not None:
            self._reloader.shutdown(wait=False, cancel_futures=True)
            self._reloader = None

    # ----------------------------------------------------------------- reads

    def get(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        with self._lock:
            return self._users.get(user, {}).get(mechanism.mechanism_name)

    def users(self) -> dict[str, dict[ScramMechanism, int]]:
        """User → mechanism → iterations (DescribeUserScramCredentials)."""
        with self._lock:
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
        """Apply upserts and deletions: per user one compare-and-set of its znode and one
        change notification. Blocking.

        Raises:
            ZooKeeperClientError: no session, or a user's znode lost too many races.
        """
        by_user: dict[str, tuple[dict[str, str], set[str]]] = {}
        for user, m, cred in upserts:
            by_user.setdefault(user, ({}, set()))[0][m.mechanism_name] = cred.to_kafka_string()
        for user, m in deletions:
            by_user.setdefault(user, ({}, set()))[1].add(m.mechanism_name)
        zk = self._require_zk()
        for user, (put, remove) in by_user.items():
            self._cas(zk, user, put, remove)
            notification = zd.encode_config_change_notification(f"users/{sanitize(user)}")
            change = f"{zd.CONFIG_CHANGES_PATH}/{zd.CONFIG_CHANGE_PREFIX}"
            zk._one(create_call(change, notification, sequence=True))
            self._reload_user(user)  # this broker sees its own write at once

    def upsert(self, user: str, mechanism: ScramMechanism, credential: ScramCredential) -> None:
        self.alter([(user, mechanism, credential)], [])

    def delete(self, user: str, mechanism: ScramMechanism) -> None:
        self.alter([], [(user, mechanism)])

    def _cas(self, zk: KafkaZkClient, user: str, put: dict[str, str], remove: set[str]) -> None:
        path = _user_path(user)
        for _ in range(_CAS_ATTEMPTS):
            got = zk.get_data(path)
            config = {} if got is None else zd.decode_topic_config(got[0], path)
            for name in remove:
                config.pop(name, None)
            config.update(put)
            data = zd.encode_topic_config(config)  # {"version":1,"config":{...}}, as users'
            try:
                if got is None:
                    zk._one(create_call(path, data))
                else:
                    zk._one(set_call(path, data, int(got[1].version)))
                return
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker wrote in between: read again
        raise ZooKeeperClientError(f"{path}: credential update lost {_CAS_ATTEMPTS} races")

    # ----------------------------------------------------------------- changes

    def _require_zk(self) -> KafkaZkClient:
        if self._zk is None:
            raise ZooKeeperClientError("the SCRAM credential store is not started")
        return self._zk

    def _read_user(self, user: str) -> dict[str, ScramCredential]:
        zk = self._require_zk()
        path = _user_path(user)
        got = zk.get_data(path)
        if got is None:
            return {}
        try:
            config = zd.decode_topic_config(got[0], path)
        except ValueError as e:
            log.warning("ignoring the unreadable user config %s: %s", path, e)
            return {}
        return _scram_of(config, path)

    def _reload_user(self, user: str) -> None:
        creds = self._read_user(user)
        with self._lock:
            if creds:
                self._users[user] = creds
            else:
                self._users.pop(user, None)

    def _changes_seen(self, children: list[str]) -> None:
        # kazoo's callback thread: hand the ZooKeeper reads to the reload thread
        reloader = self._reloader
        if reloader is not None:
            try:
                reloader.submit(self._process_changes, list(children))
            except RuntimeError:  # shut down meanwhile
                pass

    def _process_changes(self, children: list[str]) -> None:
        zk = self._require_zk()
        pending = sorted(
            (s, c) for c in children if (s := _seq(c)) is not None and s > self._last_change
        )
        for seq, child in pending:
            try:
                got = zk.get_data(f"{zd.CONFIG_CHANGES_PATH}/{child}")
                if got is not None:
                    entity = zd.decode_config_change_notification(got[0])
                    kind, _, name = entity.partition("/")
                    if kind == "users" and name:
                        self._reload_user(desanitize(name))
                        log.info("SCRAM credentials of %s reloaded", desanitize(name))
            except (ValueError, ZooKeeperClientError) as e:
                log.warning("config change %s not processed: %s", child, e)
            self._last_change = seq


def _seq(child: str) -> int | None:
    if not child.startswith(zd.CONFIG_CHANGE_PREFIX):
        return None
    try:
        return int(child[len(zd.CONFIG_CHANGE_PREFIX) :])
    except ValueError:
        return None
