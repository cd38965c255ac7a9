from pathlib import Path

import pytest

from tierlog.errors import InconsistentLogDirError, KafkaStorageError
from tierlog.log.meta_properties import (
    META_PROPERTIES_FILENAME,
    check_meta_properties,
    new_cluster_id,
    stored_cluster_id,
)
from tierlog.log.partition_metadata_file import kafka_str_to_uuid, uuid_to_kafka_str


def storage_error(e: OSError, path: Path, action: str) -> KafkaStorageError:
    return KafkaStorageError(f"cannot {action} {path}: {e}")


def check(dirs: list[Path], node_id: int = 0, cluster_id: str | None = None):
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return check_meta_properties(
        dirs, node_id=node_id, cluster_id=cluster_id, storage_error=storage_error
    )


def read_props(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k] = v
    return out


@pytest.fixture
def dirs(tmp_path):
    return [tmp_path / "d1", tmp_path / "d2"]


def test_written_in_every_dir_and_kept(dirs):
    cluster, ids = check(dirs, node_id=3)
    assert len(cluster) == 22 and set(ids) == set(dirs)
    assert len(set(ids.values())) == 2  # one directory id per log dir
    for d in dirs:
        assert read_props(d / META_PROPERTIES_FILENAME) == {
            "cluster.id": cluster,
            "directory.id": uuid_to_kafka_str(ids[d]),
            "node.id": "3",
            "version": "1",
        }
    mtimes = [(d / META_PROPERTIES_FILENAME).stat().st_mtime_ns for d in dirs]
    assert check(dirs, node_id=3) == (cluster, ids)
    assert [(d / META_PROPERTIES_FILENAME).stat().st_mtime_ns for d in dirs] == mtimes


def test_expected_cluster_id_is_written(dirs):
    cluster = new_cluster_id()
    assert check(dirs, cluster_id=cluster)[0] == cluster
    assert stored_cluster_id(dirs) == cluster


def test_version_0_is_rewritten_as_version_1(dirs):
    dirs[0].mkdir(parents=True)
    (dirs[0] / META_PROPERTIES_FILENAME).write_text("version=0\nbroker.id=7\ncluster.id=abc\n")
    cluster, ids = check(dirs, node_id=7)
    assert cluster == "abc"
    props = read_props(dirs[0] / META_PROPERTIES_FILENAME)
    assert props["version"] == "1" and props["node.id"] == "7" and "broker.id" not in props
    assert kafka_str_to_uuid(props["directory.id"]) == ids[dirs[0]]


def test_a_copied_directory_id_is_replaced(dirs):
    _, ids = check(dirs)
    (dirs[1] / META_PROPERTIES_FILENAME).write_bytes(
        (dirs[0] / META_PROPERTIES_FILENAME).read_bytes()
    )
    _, again = check(dirs)
    assert again[dirs[0]] == ids[dirs[0]]
    assert again[dirs[1]] not in (ids[dirs[0]], ids[dirs[1]])


def test_log_dir_of_another_node_is_rejected(dirs):
    check(dirs, node_id=1)
    with pytest.raises(InconsistentLogDirError, match="node id"):
        check(dirs, node_id=2)


def test_log_dirs_of_different_clusters_are_rejected(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    check([a])
    check([b])
    with pytest.raises(InconsistentLogDirError, match="different clusters"):
        check([a, b])
    with pytest.raises(InconsistentLogDirError, match="different clusters"):
        check([a], cluster_id=new_cluster_id())


@pytest.mark.parametrize(
    ("text", "message"),
    [("version=2\n", "unknown meta.properties version 2"), ("directory.id=x\n", "directory.id")],
)
def test_unknown_version_and_bad_directory_id_are_rejected(dirs, text, message):
    dirs[0].mkdir(parents=True)
    (dirs[0] / META_PROPERTIES_FILENAME).write_text(text)
    with pytest.raises(InconsistentLogDirError, match=message):
        check(dirs)


def test_an_unreadable_file_is_a_storage_error(dirs):
    (dirs[0] / META_PROPERTIES_FILENAME).mkdir(parents=True)  # a dir: read fails
    with pytest.raises(KafkaStorageError, match="cannot read"):
        check(dirs)


def test_stored_cluster_id_is_the_first_readable_one(tmp_path):
    missing, empty, a, b = (tmp_path / n for n in ("missing", "empty", "a", "b"))
    empty.mkdir()
    (empty / META_PROPERTIES_FILENAME).write_text("# no cluster yet\nnode.id=0\n")
    cluster_a, _ = check([a])
    check([b])
    assert stored_cluster_id([missing, empty, a, b]) == cluster_a
    assert stored_cluster_id([missing, empty]) is None
