"""Remote deletions owed by a deleted topic (tierlog.server.tiered_storage): recorded in
``remote-log-pending-deletions.json`` before the topic goes, so neither a crash nor a remote
store that is down leaks remote data -- a deletion pending at a crash is carried out after
the restart, one failing while the store is down is retried until the store is back.

Real parts: the broker's LogManager and TieredStorage (its plugins, the topic-based metadata
manager over ``__remote_log_metadata``, the RemoteLogManager with its scheduler) on log dirs
and a ``file://`` remote store under tmp_path; the topic is deleted as the DeleteTopics
handler does. "Nothing leaked" is read from the files: no object left under the topic's
prefix, and the metadata topic replayed (as ``tierlog remote ls`` does) says
DELETE_SEGMENT_FINISHED for every segment and DELETE_PARTITION_FINISHED for each partition.
The SIGKILL of a real broker process is in tests/integration/test_tiered_faults.py."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.tiered_support import FileStore
from tierlog.log.log_manager import LogManager
from tierlog.log.topic_registry import TopicInfo
from tierlog.records.default_records import build_batch
from tierlog.server.kafka_config import KafkaConfig
from tierlog.server.tiered_storage import (
    PENDING_DELETIONS_FILENAME,
    PendingDeletions,
    TieredStorage,
)
from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition, kafka_uuid_str
from tierlog.tiered.storage import pyarrow_remote_storage_manager as prsm
from tierlog.tiered.storage.segment_objects import INDEXES_SUFFIX
from tierlog.tools.remote_cli import load_histories

DELETED, KEPT = "orders", "kept"
SEGMENTS = 4  # per partition, the active one included


class Crash(BaseException):
    """The broker dies: nothing after this point runs (not an Exception: no cleanup)."""


def wait_until(cond: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class Node:
    """One broker's storage: LogManager + TieredStorage over ``tmp_path`` (as Broker.start
    builds them), with :meth:`TieredStorage.run` (polls, retries) on an event loop thread."""

    def __init__(self, tmp_path: Path) -> None:
        self.config = KafkaConfig.from_props(
            {
                "log.dirs": str(tmp_path / "logs"),
                "remote.log.storage.system.enable": "true",
                "rsm.config.uri": (tmp_path / "remote").as_uri(),
                "remote.log.manager.task.interval.ms": "100",
                "remote.log.metadata.topic.num.partitions": "2",
            }
        )
        c = self.config
        self.lm = LogManager(
            c.log_dirs, c.log_config(), node_id=c.node_id, remote_log_storage_system_enable=True
        )
        self.lm.startup()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.ts = TieredStorage(c, self.lm, self.loop)
        self.ts.start()
        self._run = asyncio.run_coroutine_threadsafe(self.ts.run(), self.loop)

    def create_tiered_topic(self, name: str, partitions: int) -> TopicInfo:
        """A topic with :data:`SEGMENTS` segments per partition, all but the active one copied."""
        info = self.lm.create_topic(
            name,
            partitions,
            {
                "remote.storage.enable": "true",
                "segment.bytes": "1024",
                "local.retention.bytes": "1",
            },
        )
        fut = self.ts.topic_changed(name)
        assert fut is not None
        fut.result(30)
        now = int(time.time() * 1000)
        for p in range(partitions):
            lg = self.lm.get_log(name, p)
            assert lg is not None
            while lg.number_of_segments < SEGMENTS or lg.active_segment.size == 0:
                lg.append(build_batch([(now, b"k", b"v" * 200)] * 2), leader_epoch=0)
            lg.update_high_watermark(lg.log_end_offset)
            tp = TopicIdPartition(info.topic_id, name, p)
            wait_until(
                lambda lg=lg, tp=tp: (
                    self.ts.rlm.highest_offset_in_remote_storage(tp)
                    == lg.active_segment.base_offset - 1
                ),
                f"{tp} copied",
            )
        return info

    def delete_topic(self, name: str, *, crash_before_deleting: bool = False) -> None:
        """As the DeleteTopics handler: record the owed deletion, delete the topic, delete its
        remote data in the background -- unless the broker dies before that last step."""
        info = self.lm.topic(name)
        assert info is not None
        pending = self.ts.before_topic_deleted(info)
        self.lm.delete_topic(name)
        if not crash_before_deleting:
            self.ts.after_topic_deleted(pending)

    def close(self) -> None:
        self._run.cancel()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self.loop.close()
        self.ts.close()
        self.lm.shutdown()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Callable[[], Node]]:
    """Start a Node on tmp_path (one at a time; each is closed before the next starts)."""
    started: list[Node] = []

    def start() -> Node:
        n = Node(tmp_path)
        started.append(n)
        return n

    yield start
    for n in started:
        if not n.loop.is_closed():
            n.close()


def pending_topics(tmp_path: Path) -> list[str]:
    """The topics whose remote deletion ``remote-log-pending-deletions.json`` lists."""
    return [
        d.topic for d in PendingDeletions(tmp_path / "logs" / PENDING_DELETIONS_FILENAME).entries()
    ]


def topic_objects(remote: Path, info: TopicInfo) -> list[Path]:
    """The remote objects under the topic's prefix (``<topic>-<topic id>/``)."""
    root = remote / f"{info.name}-{kafka_uuid_str(info.topic_id)}"
    return sorted(p for p in root.rglob("*") if p.is_file())


def remote_states(log_dir: Path, info: TopicInfo) -> dict[int, tuple[str | None, list[str]]]:
    """Per partition of this topic id: (partition delete state, every segment's state), from
    the ``__remote_log_metadata`` files."""
    return {
        tp.partition: (h.delete_state, [m.state.name for m in h.segments.values()])
        for tp, h in load_histories([log_dir], info.name).items()
        if tp.topic_id == info.topic_id
    }


def assert_all_gone(tmp_path: Path, info: TopicInfo, n_segments: dict[int, int]) -> None:
    assert topic_objects(tmp_path / "remote", info) == []
    assert remote_states(tmp_path / "logs", info) == {
        p: ("DELETE_PARTITION_FINISHED", ["DELETE_SEGMENT_FINISHED"] * n)
        for p, n in n_segments.items()
    }


def copied(tmp_path: Path, info: TopicInfo) -> dict[int, int]:
    """Per partition: how many segments are COPY_SEGMENT_FINISHED (and nothing else)."""
    out = {}
    for p, (delete_state, states) in remote_states(tmp_path / "logs", info).items():
        assert delete_state is None and set(states) == {"COPY_SEGMENT_FINISHED"}
        out[p] = len(states)
    return out


@pytest.mark.parametrize("crash", ["before-deleting", "in-a-segment-deletion"])
def test_deletions_pending_at_a_crash_are_carried_out_after_restart(
    tmp_path: Path, nodes: Callable[[], Node], monkeypatch: pytest.MonkeyPatch, crash: str
) -> None:
    n = nodes()
    deleted = n.create_tiered_topic(DELETED, 2)
    kept = n.create_tiered_topic(KEPT, 1)
    segments, kept_segments = copied(tmp_path, deleted), copied(tmp_path, kept)
    assert segments == {0: SEGMENTS - 1, 1: SEGMENTS - 1}
    kept_objects = topic_objects(tmp_path / "remote", kept)
    assert len(kept_objects) == 2 * (SEGMENTS - 1)

    if crash == "before-deleting":
        # The topic is gone, its remote deletion recorded, and the broker dies before it.
        n.delete_topic(DELETED, crash_before_deleting=True)
    else:
        # The broker dies in the first segment's deletion: DELETE_SEGMENT_STARTED published,
        # the .indexes object deleted, the .log object not.
        died = threading.Event()
        delete = prsm.PyArrowRemoteStorageManager.delete_log_segment_data

        def dying_delete(self: prsm.PyArrowRemoteStorageManager, metadata: Any) -> None:
            if died.is_set():
                return delete(self, metadata)
            self.filesystem.delete_file(self.object_path(metadata, INDEXES_SUFFIX))
            died.set()
            raise Crash

        rsm_class = prsm.PyArrowRemoteStorageManager
        monkeypatch.setattr(rsm_class, "delete_log_segment_data", dying_delete)
        n.delete_topic(DELETED)
        assert died.wait(30), "the deletion never started"
    n.close()  # waits for the admin thread: nothing more of the deletion runs
    monkeypatch.undo()
    # What the dead broker left: the deletion pending, the topic's objects still there.
    assert pending_topics(tmp_path) == [DELETED]
    assert len(topic_objects(tmp_path / "remote", deleted)) >= 2 * 2 * (SEGMENTS - 1) - 1
    if crash == "in-a-segment-deletion":
        states = remote_states(tmp_path / "logs", deleted)
        assert sum(s.count("DELETE_SEGMENT_STARTED") for _, s in states.values()) == 1

    n = nodes()  # the restart resumes the deletion
    wait_until(lambda: n.ts.pending.entries() == [], "the pending deletion done")
    assert_all_gone(tmp_path, deleted, segments)
    # The other topic's remote data is untouched.
    assert topic_objects(tmp_path / "remote", kept) == kept_objects
    assert copied(tmp_path, kept) == kept_segments
    assert n.lm.topic(DELETED) is None and n.lm.topic(KEPT) is not None
    assert pending_topics(tmp_path) == []


def test_deletions_failing_while_the_store_is_down_are_retried_until_done(
    tmp_path: Path, nodes: Callable[[], Node], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "tierlog.server.tiered_storage")
    n = nodes()
    deleted = n.create_tiered_topic(DELETED, 2)
    segments = copied(tmp_path, deleted)
    objects = topic_objects(tmp_path / "remote", deleted)
    assert len(objects) == 2 * sum(segments.values())
    store = FileStore(tmp_path / "remote")

    store.down()
    try:
        n.delete_topic(DELETED)
        wait_until(
            lambda: (
                "deleting the remote data of orders" in caplog.text and "(attempt 2," in caplog.text
            ),
            "a second failed attempt",
        )
        assert pending_topics(tmp_path) == [DELETED]
    finally:
        store.up()
    assert topic_objects(tmp_path / "remote", deleted) == objects  # nothing deleted yet
    states = remote_states(tmp_path / "logs", deleted)
    assert all(s == "DELETE_PARTITION_STARTED" for s, _ in states.values())

    wait_until(lambda: n.ts.pending.entries() == [], "the retried deletion done")
    assert_all_gone(tmp_path, deleted, segments)
    assert pending_topics(tmp_path) == []
