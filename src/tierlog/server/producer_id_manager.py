"""Producer id allocation for idempotent producers (InitProducerId), persistent across restarts.

Kafka's controller hands out producer ids in blocks (``ProducerIdsBlock``, 1000 ids) and
remembers the next block in its metadata log, so an id is never given twice. A single node
keeps the same promise with one small file in the first log dir::

    <log.dir>/producer-id-block        text: "version=0\\nnext.block.start=<int64>\\n"

Before the first id of a block is handed out, ``next.block.start`` is moved past the block
and written atomically (temp file + fsync + rename). A crash loses at most the rest of the
current block: ids are skipped, never repeated.

In a cluster the blocks come from ZooKeeper instead (``/latest_producer_id_block``, Kafka's
ZooKeeper-mode ``ZkProducerIdManager``): ``allocate_block`` claims the next one with a
compare-and-set, so no two brokers hand out the same id (a repeated id would make a new
producer's first batches look like another producer's duplicates). The claim runs in a thread,
ahead of need, as Kafka's ``RPCProducerIdManager`` does: :meth:`ProducerIdManager.prefetch`
at startup and again when 90% of the block is given out; an InitProducerId that finds no id
left gets the retriable COORDINATOR_LOAD_IN_PROGRESS while the claim is on its way. (It was a
ZooKeeper request on the event loop: with ZooKeeper away, each InitProducerId froze the whole
broker for ``zookeeper.connection.timeout.ms``, replication and every client with it.)

Not thread-safe: call from the event loop thread. Allocation is idempotent only in the sense
that a restart never returns an id given before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from tierlog.errors import CoordinatorLoadInProgress, KafkaStorageError
from tierlog.log.log_file_utils import write_atomically

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_FILENAME = "producer-id-block"
PRODUCER_ID_BLOCK_SIZE = 1000
_VERSION = 0


class ProducerIdManager:
    """Hands out producer ids that never repeat, even across crashes."""

    def __init__(
        self,
        log_dir: Path | str,
        block_size: int = PRODUCER_ID_BLOCK_SIZE,
        *,
        allocate_block: Callable[[int], int] | None = None,
    ) -> None:
        self._path = Path(log_dir) / PRODUCER_ID_BLOCK_FILENAME
        self._block_size = block_size
        self._next = 0
        self._block_end = 0  # exclusive; _next == _block_end means a new block is needed
        #: The cluster's block source (block size -> first id; blocking); None: the local file.
        self._allocate_block = allocate_block
        self._stored_next_block = self._load() if allocate_block is None else 0
        #: Cluster: the next block, claimed ahead; the claim on its way; why the last failed.
        self._claimed: tuple[int, int] | None = None
        self._claiming: asyncio.Future[int] | None = None
        self._claim_error = ""

    def _load(self) -> int:
        try:
            text = self._path.read_text("ascii")
        except FileNotFoundError:
            return 0
        except OSError as e:
            raise KafkaStorageError(f"cannot read {self._path}: {e}") from e
        values = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip()
        try:
            start = int(values["next.block.start"])
        except (KeyError, ValueError):
            # A torn or foreign file: never reuse ids; jump far ahead of anything plausible.
            return 1 << 40
        return max(0, start)

    def prefetch(self) -> None:
        """Cluster: claim the next block in a thread, unless one is claimed or on its way
        (Kafka's ``maybeRequestNextBlock``). Call on the event loop."""
        if self._allocate_block is None or self._claimed is not None or self._claiming is not None:
            return
        loop = asyncio.get_running_loop()
        self._claiming = loop.run_in_executor(None, self._allocate_block, self._block_size)
        self._claiming.add_done_callback(self._on_claimed)

    def _on_claimed(self, fut: asyncio.Future[int]) -> None:
        self._claiming = None
        if fut.cancelled():
            return
        e = fut.exception()
        if e is not None:
            self._claim_error = str(e)
            log.warning("cannot claim a producer id block: %s", e)
            return
        start = fut.result()
        self._claim_error = ""
        self._claimed = (start, start + self._block_size)
        log.info("claimed producer id block [%d, %d)", start, start + self._block_size)

    def generate_producer_id(self) -> int:
        """The next unused producer id.

        Raises:
            KafkaStorageError: the block file could not be written.
            CoordinatorLoadInProgress: cluster, no id left and the next block not claimed
                yet (retriable: the claim is on its way).
        """
        if self._allocate_block is not None:
            return self._from_claimed_blocks()
        if self._next >= self._block_end:
            start = self._stored_next_block
            end = start + self._block_size
            data = f"version={_VERSION}\nnext.block.start={end}\n".encode("ascii")
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                write_atomically(self._path, data)
            except OSError as e:
                raise KafkaStorageError(f"cannot write {self._path}: {e}") from e
            self._stored_next_block = end
            self._next, self._block_end = start, end
        pid = self._next
        self._next += 1
        return pid

    def _from_claimed_blocks(self) -> int:
        if self._next >= self._block_end:
            claimed, self._claimed = self._claimed, None
            if claimed is None:
                self.prefetch()
                why = f" (the last claim failed: {self._claim_error})" if self._claim_error else ""
                raise CoordinatorLoadInProgress(
                    f"no producer id left: the next block is being claimed from ZooKeeper{why}"
                )
            self._next, self._block_end = claimed
        pid = self._next
        self._next += 1
        if self._block_end - self._next <= self._block_size // 10:
            self.prefetch()
        return pid
