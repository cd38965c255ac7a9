"""Client quota entities, precedence, filters, op validation and the throttle arithmetic."""

from __future__ import annotations

import pytest

from tierlog.quotas.client_quota_entity import (
    DEFAULT,
    ClientQuotaEntity,
    InvalidQuotaError,
    candidate_entities,
    matches_filter,
    quota_for,
    validate_filter,
    validate_ops,
)
from tierlog.quotas.client_quota_manager import ClientQuotaManager, Rate
from tierlog.quotas.file_quota_store import FileQuotaStore

E = ClientQuotaEntity


def test_kafkas_precedence_order():
    assert [e.path for e in candidate_entities("alice", "app")] == [
        "users/alice/clients/app",
        "users/alice/clients/<default>",
        "users/alice",
        "users/<default>/clients/app",
        "users/<default>/clients/<default>",
        "users/<default>",
        "clients/app",
        "clients/<default>",
    ]
    quotas = {
        E(None, DEFAULT): {"producer_byte_rate": 10.0},
        E("alice"): {"producer_byte_rate": 5.0},
    }
    assert quota_for(quotas, "producer_byte_rate", "alice", "app") == (E("alice"), 5.0)
    assert quota_for(quotas, "producer_byte_rate", "bob", "x") == (E(None, DEFAULT), 10.0)
    assert quota_for(quotas, "consumer_byte_rate", "bob", "x") is None


def test_paths_round_trip_with_sanitized_names():
    e = E("CN=a b/c", "app:1")
    assert e.path == "users/CN%3Da%20b%2Fc/clients/app%3A1"
    assert ClientQuotaEntity.from_path(e.path) == e
    assert E.from_wire([("client-id", None)]) == E(None, DEFAULT)
    assert E(DEFAULT, "x").to_wire() == [("user", None), ("client-id", "x")]


@pytest.mark.parametrize(
    ("components", "message"),
    [
        ([("user", "a"), ("user", "b")], "duplicate entity type 'user'"),
        ([("ip", "1.2.3.4")], "ip quotas (connection_creation_rate) are not supported"),
        ([("group", "g")], "unknown entity type 'group'"),
        ([("user", "")], "an empty user name (the default is null)"),
        ([], "an entity needs a user, a client id or both"),
    ],
)
def test_bad_entities(components, message):
    with pytest.raises(InvalidQuotaError) as e:
        E.from_wire(components)
    assert str(e.value) == message


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([("request_percentage", 50.0, False)],
         "request_percentage is not supported (tierlog enforces producer_byte_rate and "
         "consumer_byte_rate)"),
        ([("producer_byte_rat", 1.0, False)],
         "unknown quota key 'producer_byte_rat' (known: producer_byte_rate, consumer_byte_rate)"),
        ([("producer_byte_rate", 0.0, False)],
         "producer_byte_rate must be a positive whole number of bytes per second, got 0.0"),
        ([("producer_byte_rate", 1.5, False)],
         "producer_byte_rate must be a positive whole number of bytes per second, got 1.5"),
        ([("producer_byte_rate", 1.0, False), ("producer_byte_rate", 2.0, False)],
         "duplicate quota key 'producer_byte_rate'"),
    ],
)  # fmt: skip
def test_bad_ops(ops, message):
    with pytest.raises(InvalidQuotaError) as e:
        validate_ops(ops)
    assert str(e.value) == message


def test_ops():
    assert validate_ops([("producer_byte_rate", 1e6, False), ("consumer_byte_rate", 0, True)]) == {
        "producer_byte_rate": 1e6,
        "consumer_byte_rate": None,
    }


def test_filters():
    entities = [E("alice"), E("alice", "app"), E(DEFAULT), E(None, "app"), E(None, DEFAULT)]

    def match(components, strict=False):
        checked = validate_filter(components)
        return [e.path for e in entities if matches_filter(e, checked, strict)]

    assert match([("user", 0, "alice")]) == ["users/alice", "users/alice/clients/app"]
    assert match([("user", 0, "alice")], strict=True) == ["users/alice"]
    assert match([("user", 1, None)]) == ["users/<default>"]
    assert match([("user", 2, None)]) == ["users/alice", "users/alice/clients/app"]
    assert match([("client-id", 2, None)]) == ["users/alice/clients/app", "clients/app"]
    assert match([], strict=False) == [e.path for e in entities]
    with pytest.raises(InvalidQuotaError, match="duplicate filter component entity type 'user'"):
        validate_filter([("user", 1, None), ("user", 2, None)])
    with pytest.raises(InvalidQuotaError, match="unknown match type 7"):
        validate_filter([("user", 7, None)])
    with pytest.raises(InvalidQuotaError, match="an exact match of user needs a name"):
        validate_filter([("user", 0, None)])


def test_rate_pads_a_young_window():
    r = Rate(num_samples=11, window_ms=1000)
    r.record(10_000, now_ms=0)
    assert r.window_size_ms(0) == 10_000  # padded to num - 1 samples
    assert r.measure(0) == pytest.approx(1000.0)
    r.record(10_000, now_ms=15_000)  # the first sample is past the 11 s horizon
    assert r.measure(15_000) == pytest.approx(1000.0)


def test_throttle_time_brings_the_rate_back_to_the_quota():
    m = ClientQuotaManager("producer_byte_rate", num_samples=2, window_ms=1000)
    m.update_quotas({E(None, DEFAULT): {"producer_byte_rate": 1000.0}})
    assert m.record_and_get_throttle_time_ms("u", "a", 900, 0) == 0
    # 3000 bytes in a 1.01 s window (one padded sample + 10 ms): about 3x the quota, so
    # (rate - quota) / quota * window = 1.97 s, capped at the window.
    assert m.record_and_get_throttle_time_ms("u", "a", 2100, 10) == 1010
    # Just over the quota: throttled for the time the excess takes to drain.
    m2 = ClientQuotaManager("producer_byte_rate", num_samples=2, window_ms=1000)
    m2.update_quotas({E(None, DEFAULT): {"producer_byte_rate": 1000.0}})
    assert m2.record_and_get_throttle_time_ms("u", "a", 1100, 0) == 100
    # Another client id has its own rate under the default quota.
    assert m.record_and_get_throttle_time_ms("u", "b", 500, 10) == 0
    m.update_quotas({E("u"): {"producer_byte_rate": 1000.0}})  # shared by u's clients
    assert m.quota("u", "a") == (("u", ""), 1000.0)
    # A throttled fetch is answered empty: its bytes are taken back off the rate.
    f = ClientQuotaManager("consumer_byte_rate", num_samples=2, window_ms=1000)
    f.update_quotas({E(None, "c"): {"consumer_byte_rate": 1000.0}})
    assert f.max_value_in_quota_window("u", "c") == 2000.0  # the quota over a whole window
    assert f.max_value_in_quota_window("u", "other") is None
    assert f.record_and_get_throttle_time_ms("u", "c", 5000, 0, unrecord=True) == 1000
    assert f.record_and_get_throttle_time_ms("u", "c", 900, 1) == 0  # the 5000 did not count
    m.update_quotas({})
    assert not m.active and m.record_and_get_throttle_time_ms("u", "a", 1e9, 20) == 0


def test_file_store(tmp_path):
    store = FileQuotaStore(tmp_path / "client-quotas.json")
    assert store.load() == {}
    got = store.alter(
        {E(None, DEFAULT): {"producer_byte_rate": 1048576.0}, E("a"): {"consumer_byte_rate": 5.0}}
    )
    assert got == {
        E(None, DEFAULT): {"producer_byte_rate": 1048576.0},
        E("a"): {"consumer_byte_rate": 5.0},
    }
    assert '"clients/<default>": {\n   "producer_byte_rate": "1048576"' in store.path.read_text()
    assert store.alter({E("a"): {"consumer_byte_rate": None}}) == {
        E(None, DEFAULT): {"producer_byte_rate": 1048576.0}
    }
    assert FileQuotaStore(store.path).load() == {
        E(None, DEFAULT): {"producer_byte_rate": 1048576.0}
    }
    store.path.write_text("{not json")
    with pytest.raises(ValueError, match=r"client-quotas.json: unreadable client quota file"):
        store.load()
