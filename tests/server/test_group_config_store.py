"""The single node's group configs file: round trip, absent, and bad files refused."""

from __future__ import annotations

import pytest

from tierlog.errors import ConfigError
from tierlog.server.group_config_store import load_group_configs, save_group_configs


def test_round_trip_and_absent(tmp_path):
    path = tmp_path / "group-configs.json"
    assert load_group_configs(path) == {}
    save_group_configs(path, {"g": {"consumer.session.timeout.ms": "50000"}, "empty": {}})
    assert load_group_configs(path) == {"g": {"consumer.session.timeout.ms": "50000"}}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "unreadable group configs file"),
        ('{"version": 2}', "not a version 1 group configs file"),
        ('{"version": 1, "groups": {"g": {"k": 1}}}', "groups must map group ids"),
    ],
)
def test_bad_files_are_refused(tmp_path, content, message):
    path = tmp_path / "group-configs.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_group_configs(path)
