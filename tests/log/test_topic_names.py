import pytest

from tierlog.errors import InvalidTopic
from tierlog.log.topic_names import (
    MAX_TOPIC_NAME_LENGTH,
    unify_collision_chars,
    validate_topic_name,
)


def test_legal_topic_names():
    for name in ["a", "A-b_c.d", "x" * 249, "__consumer_offsets", "1"]:
        validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "can't be empty"),
        (".", r'cannot be "\." or "\.\."'),
        ("..", r'cannot be "\." or "\.\."'),
        ("x" * (MAX_TOPIC_NAME_LENGTH + 1), "can't be longer than 249"),
        ("../x", "contains a character other than"),
        ("a/b", "contains a character other than"),
        ("a b", "contains a character other than"),
        ("caf\u00e9", "contains a character other than"),
        ("a\x00", "contains a character other than"),
    ],
)
def test_illegal_topic_names_have_kafkas_messages(name, message):
    with pytest.raises(InvalidTopic, match=message):
        validate_topic_name(name)


def test_dot_and_underscore_collide():
    assert unify_collision_chars("a.b_c") == unify_collision_chars("a_b.c") == "a_b_c"
    assert unify_collision_chars("a-b") != unify_collision_chars("a_b")
