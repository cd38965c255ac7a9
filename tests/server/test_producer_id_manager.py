"""ProducerIdManager: ids never repeat, across restarts and crashes."""

from __future__ import annotations

from tierlog.server.producer_id_manager import PRODUCER_ID_BLOCK_FILENAME, ProducerIdManager


def test_ids_are_unique_within_and_across_restarts(tmp_path):
    seen: set[int] = set()
    for _ in range(3):
        m = ProducerIdManager(tmp_path, block_size=10)
        for _ in range(25):
            pid = m.generate_producer_id()
            assert pid not in seen
            seen.add(pid)
    assert len(seen) == 75


def test_block_is_reserved_before_the_first_id_is_given(tmp_path):
    m = ProducerIdManager(tmp_path, block_size=100)
    assert m.generate_producer_id() == 0
    text = (tmp_path / PRODUCER_ID_BLOCK_FILENAME).read_text()
    assert "next.block.start=100" in text
    # a crash now: the next process starts after the reserved block
    assert ProducerIdManager(tmp_path, block_size=100).generate_producer_id() == 100


def test_torn_file_jumps_far_ahead(tmp_path):
    (tmp_path / PRODUCER_ID_BLOCK_FILENAME).write_text("garbage")
    assert ProducerIdManager(tmp_path).generate_producer_id() >= 1 << 40
