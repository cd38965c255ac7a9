"""The hand-written SigV4 ranged GET, and exactly two S3 requests per cold segment read."""

from __future__ import annotations

import uuid

import pytest

from tierlog.errors import RemoteResourceNotFoundError
from tierlog.tiered.remote_log_manager import RemoteStorageFetchInfo
from tierlog.tiered.storage import PyArrowRemoteStorageManager
from tierlog.tiered.storage.s3_ranged_get import (
    EMPTY_SHA256,
    S3Credentials,
    S3RangedGetClient,
    sign_v4,
)

from .tiered_harness import HOUR, T0, World, config


def test_signature_matches_the_aws_documentation_example() -> None:
    # "Example: GET Object" of AWS's "Signature Calculations for the Authorization Header".
    headers = sign_v4(
        method="GET",
        host="examplebucket.s3.amazonaws.com",
        path="/test.txt",
        region="us-east-1",
        credentials=S3Credentials(
            "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
        ),
        amz_date="20130524T000000Z",
        payload_hash=EMPTY_SHA256,
        extra_headers={"Range": "bytes=0-9"},
    )
    assert headers["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )


def test_session_token_is_signed() -> None:
    headers = sign_v4(
        method="GET", host="h", path="/b/k", region="eu-west-1",
        credentials=S3Credentials("A", "S", "TOKEN"), amz_date="20240101T000000Z",
    )  # fmt: skip
    assert headers["x-amz-security-token"] == "TOKEN"
    assert "x-amz-security-token" in headers["authorization"]


@pytest.fixture
def s3_client(seaweedfs):
    client = S3RangedGetClient(
        endpoint=seaweedfs.endpoint,
        region="us-east-1",
        credentials=S3Credentials(seaweedfs.access_key, seaweedfs.secret_key),
    )
    yield client
    client.close()


def test_ranged_get_against_a_real_s3_server(seaweedfs, s3_client) -> None:
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(
        access_key=seaweedfs.access_key, secret_key=seaweedfs.secret_key,
        endpoint_override=f"127.0.0.1:{seaweedfs.port}", scheme="http", region="us-east-1",
    )  # fmt: skip
    key = f"rg-{uuid.uuid4().hex}/a b+c~é.bin"  # needs URI encoding
    data = bytes(range(256)) * 40
    with fs.open_output_stream(f"{seaweedfs.bucket}/{key}") as out:
        out.write(data)
    assert s3_client.get(seaweedfs.bucket, key) == data
    assert s3_client.get(seaweedfs.bucket, key, 10, 19) == data[10:20]
    assert s3_client.get(seaweedfs.bucket, key, 10_000) == data[10_000:]
    assert s3_client.get(seaweedfs.bucket, key, len(data)) == b""
    assert s3_client.get(seaweedfs.bucket, key, 100, 10**9) == data[100:]
    with pytest.raises(RemoteResourceNotFoundError):
        s3_client.get(seaweedfs.bucket, key + ".missing")
    bad = S3RangedGetClient(
        endpoint=seaweedfs.endpoint, region="us-east-1", credentials=S3Credentials("x", "y")
    )
    with pytest.raises(Exception, match="HTTP 403"):
        bad.get(seaweedfs.bucket, key)
    bad.close()


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_cold_remote_read_is_exactly_two_s3_requests(
    seaweedfs, s3_request_counter, tmp_path, compression
) -> None:
    rsm = PyArrowRemoteStorageManager(
        f"s3://{seaweedfs.bucket}/rlm-{uuid.uuid4().hex[:8]}",
        endpoint=s3_request_counter.endpoint,
        region="us-east-1",
        access_key=seaweedfs.access_key,
        secret_key=seaweedfs.secret_key,
        compression=compression,
    )
    w = World(tmp_path, topic_config=config(local_retention_ms=0), rsm=rsm)
    try:
        w.fill_segments(4)
        before = w.local_bytes()
        w.rlm.run_copy(w.tp)
        w.clock.now = T0 + HOUR
        w.log.delete_old_segments()
        rsm.close()  # forget what the uploads taught the RSM (chunk layout): truly cold
        for md in w.rlmm.list_remote_log_segments(w.tp):
            s3_request_counter.clear()
            info = w.rlm.read(RemoteStorageFetchInfo(w.tp, md.start_offset, 300, True))
            assert info.records
            assert s3_request_counter.methods() == ["GET", "GET"], s3_request_counter.requests
        s3_request_counter.clear()
        assert w.remote_bytes(0, w.log.local_log_start_offset) + w.local_bytes() == before
        assert "HEAD" not in s3_request_counter.methods()
    finally:
        w.close()
