"""The pure parts of the session layer: ``zookeeper.connect`` parsing and reading the
outcome of a controller-fenced multi (no server)."""

from __future__ import annotations

import pytest
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from tierlog.cluster.zookeeper_client import ControllerMovedError, checked_outcome, parse_connect


@pytest.mark.parametrize(
    ("connect", "expected"),
    [
        ("zk1:2181", ("zk1:2181", None)),
        ("zk1:2181,zk2:2181,zk3:2181/kafka", ("zk1:2181,zk2:2181,zk3:2181", "/kafka")),
        ("127.0.0.1:2181/a/b", ("127.0.0.1:2181", "/a/b")),
        ("127.0.0.1:2181/", ("127.0.0.1:2181", None)),
    ],
)
def test_parse_connect(connect, expected):
    assert parse_connect(connect) == expected


@pytest.mark.parametrize("bad", ["", "/kafka", "zk:2181/kafka/", "zk:2181/a//b"])
def test_a_bad_connect_string_is_refused(bad):
    with pytest.raises(ValueError, match=r"zookeeper\.connect"):
        parse_connect(bad)


def test_checked_outcome():
    stat = object()
    assert checked_outcome([True, stat]) == [stat]
    # the fenced operation failed: ZooKeeper reports the check as rolled back
    failed = checked_outcome([RolledBackError(), BadVersionError()])
    assert isinstance(failed, BadVersionError)
    failed = checked_outcome([RolledBackError(), NodeExistsError(), RuntimeInconsistency()])
    assert isinstance(failed, NodeExistsError)
    # the check itself failed: another controller
    with pytest.raises(ControllerMovedError, match="/controller_epoch"):
        checked_outcome([BadVersionError(), RuntimeInconsistency()])
    with pytest.raises(ControllerMovedError):
        checked_outcome([NoNodeError(), RuntimeInconsistency()])
    # a whole-request failure passes through
    assert isinstance(checked_outcome(NoNodeError()), NoNodeError)
