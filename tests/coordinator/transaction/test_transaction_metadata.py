"""The transaction states' transitions and TransactionMetadata's epochs (KIP-360)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.coordinator.transaction.transaction_metadata import (
    TransactionMetadata,
    is_epoch_exhausted,
)
from tierlog.coordinator.transaction.transaction_state import (
    VALID_PREVIOUS_STATES,
    TransactionState,
    is_valid_transition,
)
from tierlog.errors import ProducerFenced

S = TransactionState

ALLOWED = {
    (S.EMPTY, S.EMPTY), (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_ABORT, S.EMPTY),
    (S.ONGOING, S.ONGOING), (S.EMPTY, S.ONGOING), (S.COMPLETE_COMMIT, S.ONGOING),
    (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT), (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
    (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD), (S.COMPLETE_COMMIT, S.DEAD), (S.COMPLETE_ABORT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
}  # fmt: skip


@pytest.mark.parametrize(("source", "target"), list(itertools.product(S, S)))
def test_every_transition(source, target):
    assert is_valid_transition(source, target) == ((source, target) in ALLOWED)


def test_names_are_kafkas():
    assert [s.state_name for s in S] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
        "Dead", "PrepareEpochFence",
    ]  # fmt: skip
    assert S.from_name("Ongoing") is S.ONGOING
    assert S.from_name("ongoing") is None
    assert set(VALID_PREVIOUS_STATES) == set(S)


def md(state=S.EMPTY, epoch=-1, last_epoch=-1):
    return TransactionMetadata("t", 7, -1, epoch, last_epoch, 60_000, state)


def test_init_bumps_epoch_and_retry_gets_same_epoch():
    m = md()
    t = m.prepare_increment_producer_epoch(60_000, None, 1)
    assert (t.producer_epoch, t.last_producer_epoch) == (0, -1)
    m.complete_transition_to(t)
    # KIP-360: the producer names its current epoch -> the next one, previous remembered
    t = m.prepare_increment_producer_epoch(60_000, 0, 2)
    m.complete_transition_to(t)
    assert (m.producer_epoch, m.last_producer_epoch) == (1, 0)
    # a retry naming the previous epoch gets the current epoch again
    t = m.prepare_increment_producer_epoch(60_000, 0, 3)
    assert (t.producer_epoch, t.last_producer_epoch) == (1, 0)
    m.pending_transition_failed()
    with pytest.raises(ProducerFenced):
        m.prepare_increment_producer_epoch(60_000, 5, 4)


def test_transaction_round():
    m = md(epoch=0)
    m.complete_transition_to(m.prepare_add_partitions({("a", 0)}, 100))
    assert (m.state, m.txn_start_timestamp) == (S.ONGOING, 100)
    m.complete_transition_to(m.prepare_add_partitions({("b", 1)}, 200))
    assert m.txn_start_timestamp == 100 and m.topic_partitions == {("a", 0), ("b", 1)}
    m.complete_transition_to(m.prepare_abort_or_commit(S.PREPARE_COMMIT, 300))
    t = m.prepare_complete(400)
    assert t.txn_state is S.COMPLETE_COMMIT and not t.topic_partitions
    m.complete_transition_to(t)
    # the next transaction starts at its first AddPartitions
    m.complete_transition_to(m.prepare_add_partitions({("a", 0)}, 500))
    assert m.txn_start_timestamp == 500


def test_pending_blocks_and_wrong_completion_refused():
    m = md(epoch=0)
    t = m.prepare_add_partitions({("a", 0)}, 1)
    with pytest.raises(RuntimeError, match="pending"):
        m.prepare_add_partitions({("a", 1)}, 2)
    with pytest.raises(RuntimeError, match="invalid transition"):
        m.pending_transition_failed()
        m.prepare_abort_or_commit(S.PREPARE_COMMIT, 3)  # Empty -> PrepareCommit
    m.pending_state = None
    other = md(epoch=0).prepare_dead()
    m.prepare_add_partitions({("a", 0)}, 1)
    with pytest.raises(RuntimeError, match="completing Dead"):
        m.complete_transition_to(other)
    m.complete_transition_to(t)


def test_fence_bumps_once_even_after_a_failed_write():
    m = md(S.ONGOING, epoch=4)
    t = m.prepare_fence_producer_epoch()
    assert (t.txn_state, t.producer_epoch) == (S.PREPARE_EPOCH_FENCE, 5)
    m.pending_transition_failed()
    m.has_failed_epoch_fence = True
    assert m.prepare_fence_producer_epoch().producer_epoch == 4


def test_epoch_exhaustion():
    assert not is_epoch_exhausted(32_765)
    assert is_epoch_exhausted(32_766)
    m = md(epoch=32_766)
    with pytest.raises(RuntimeError, match="exhausted"):
        m.prepare_increment_producer_epoch(60_000, None, 1)
    t = m.prepare_producer_id_rotation(8, 60_000, 1, record_last_epoch=True)
    assert (t.producer_id, t.producer_epoch, t.last_producer_id, t.last_producer_epoch) == (
        8, 0, 7, 32_766,
    )  # fmt: skip


# --------------------------------------------------------------------------- random walks

STEPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["init", "init_expected", "add", "commit", "abort", "complete", "fence", "dead", "fail"]
        ),
        st.integers(0, 3),
    ),
    max_size=40,
)


@given(STEPS)
def test_random_walks_keep_the_invariants(steps):
    """Any sequence of prepares, each completed or failed: every applied state follows a
    valid transition, epochs never go down for one producer id, Empty and Complete states
    hold no partitions, and nothing is left pending."""
    m = md()
    now = 0
    for action, arg in steps:
        now += 1
        before = m.state
        try:
            if action == "init":
                t = m.prepare_increment_producer_epoch(60_000, None, now)
            elif action == "init_expected":
                t = m.prepare_increment_producer_epoch(60_000, m.producer_epoch - arg % 2, now)
            elif action == "add":
                t = m.prepare_add_partitions({("t", arg)}, now)
            elif action in ("commit", "abort"):
                nxt = S.PREPARE_COMMIT if action == "commit" else S.PREPARE_ABORT
                t = m.prepare_abort_or_commit(nxt, now)
            elif action == "complete":
                if not m.state.is_prepare:
                    continue
                t = m.prepare_complete(now)
            elif action == "fence":
                t = m.prepare_fence_producer_epoch()
                # the coordinator writes the fence as PrepareAbort with the bumped epoch
                m.pending_state = None
                m.producer_epoch, m.last_producer_epoch = t.producer_epoch, -1
                t = m.prepare_abort_or_commit(S.PREPARE_ABORT, now)
            elif action == "dead":
                t = m.prepare_dead()
            else:
                continue
        except (RuntimeError, ProducerFenced):
            assert m.pending_state is None or action == "fence"
            m.pending_state = None
            continue
        assert is_valid_transition(before, t.txn_state)
        if arg == 3:  # the log write failed
            m.pending_transition_failed()
            assert m.state is before
            continue
        old_epoch = m.producer_epoch
        m.complete_transition_to(t)
        assert m.pending_state is None
        assert m.producer_epoch >= old_epoch
        if m.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.DEAD):
            assert not m.topic_partitions
        if m.state is S.DEAD:
            return
