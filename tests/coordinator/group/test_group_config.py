"""Group configs (resource type 32): Kafka's names and bounds, each bad value's message."""

from __future__ import annotations

import pytest

from tierlog.coordinator.group.consumer_group import ConsumerGroupConfig
from tierlog.coordinator.group.group_config import (
    GroupConfigBounds,
    effective_config,
    validate_group_config,
)
from tierlog.errors import ConfigError

DEFAULTS = ConsumerGroupConfig(session_timeout_ms=45_000, heartbeat_interval_ms=5_000)
BOUNDS = GroupConfigBounds()


def test_valid_overrides_apply_on_top_of_the_broker():
    checked = validate_group_config(
        {"consumer.session.timeout.ms": " 50000", "consumer.heartbeat.interval.ms": "6000"},
        DEFAULTS,
        BOUNDS,
    )
    assert checked == {
        "consumer.session.timeout.ms": 50_000,
        "consumer.heartbeat.interval.ms": 6000,
    }
    config = effective_config(DEFAULTS, checked)
    assert (config.session_timeout_ms, config.heartbeat_interval_ms) == (50_000, 6000)
    assert effective_config(DEFAULTS, {}) == DEFAULTS


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"consumer.session.timeout.ms": "1"}, "greater than or equal to group.consumer.min"),
        ({"consumer.session.timeout.ms": "70000"}, "less than or equal to group.consumer.max"),
        ({"consumer.heartbeat.interval.ms": "x"}, "'x' is not an integer"),
        ({"consumer.rebalance.timeout.ms": "1"}, "unknown group config"),
        (
            {"consumer.session.timeout.ms": "45000", "consumer.heartbeat.interval.ms": "15000"},
            None,
        ),
    ],
)
def test_bad_values_are_refused_with_their_reason(overrides, message):
    if message is None:  # 15000 < 45000: fine
        validate_group_config(overrides, DEFAULTS, BOUNDS)
        return
    with pytest.raises(ConfigError, match=message):
        validate_group_config(overrides, DEFAULTS, BOUNDS)


def test_heartbeat_must_stay_below_the_session():
    bounds = GroupConfigBounds(min_session_timeout_ms=1000, min_heartbeat_interval_ms=100)
    with pytest.raises(ConfigError, match=r"must be less than consumer\.session\.timeout\.ms"):
        validate_group_config(
            {"consumer.session.timeout.ms": "2000", "consumer.heartbeat.interval.ms": "2000"},
            DEFAULTS,
            bounds,
        )
