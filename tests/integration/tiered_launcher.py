"""``tierlog`` with fault hooks in the remote storage manager, for kill tests (run as
``python -m tests.integration.tiered_launcher serve ...``; otherwise the real broker).

The hooks act while a file of their name exists in the directory ``$TIERLOG_TEST_FAULTS``:

* ``hang-indexes-upload``: an upload writes its ``.log`` object, then hangs before the
  ``.indexes`` object (a copy caught between the two, COPY_SEGMENT_STARTED published);
* ``hang-delete``: a segment deletion removes the ``.indexes`` object, then hangs before the
  ``.log`` object (DELETE_SEGMENT_STARTED published).

A hook that hangs first writes the file ``hanging`` (the object it stopped at), so the test
knows when to SIGKILL the broker.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from tierlog.tiered.storage import pyarrow_remote_storage_manager as prsm
from tierlog.tiered.storage.segment_objects import INDEXES_SUFFIX

FAULTS = Path(os.environ.get("TIERLOG_TEST_FAULTS", "/nonexistent"))


def _hang(what: str) -> None:
    (FAULTS / "hanging").write_text(what)
    while True:  # until the test kills the process
        time.sleep(1)


_write = prsm.PyArrowRemoteStorageManager._write
_delete = prsm.PyArrowRemoteStorageManager.delete_log_segment_data


def _hooked_write(self: Any, path: str, parts: Any) -> None:
    if path.endswith(INDEXES_SUFFIX) and (FAULTS / "hang-indexes-upload").exists():
        _hang(path)
    _write(self, path, parts)


def _hooked_delete(self: Any, metadata: Any) -> None:
    if (FAULTS / "hang-delete").exists():
        path = self.object_path(metadata, INDEXES_SUFFIX)
        try:
            self.filesystem.delete_file(path)
        except FileNotFoundError:
            pass
        _hang(path)
    _delete(self, metadata)


prsm.PyArrowRemoteStorageManager._write = _hooked_write  # type: ignore[method-assign]
prsm.PyArrowRemoteStorageManager.delete_log_segment_data = _hooked_delete  # type: ignore[method-assign]

if __name__ == "__main__":
    from tierlog.cli import main

    sys.exit(main(sys.argv[1:]))
