"""``rampwatch sim --chunk-gaps-out FILE``: the gaps between the token chunks the server
wrote, the ground truth a client's ITLs can be compared with.

Two files, written on a clean stop:

- ``FILE``: every gap, in seconds, one float64 ``.npy`` array, stream after stream (in
  the order the streams completed; within a stream, in order).
- ``FILE.streams.npy``: one row per stream, in the same order, uint64 ``[gaps, text
  key]``: how many of ``FILE``'s gaps are that stream's, and ``text_key`` of its answer's
  text, by which a client that kept the texts (`rampwatch run --save-generated-texts`)
  pairs each of its requests with the stream that served it, gap by gap.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from array import array
from pathlib import Path


def streams_path(path: Path) -> Path:
    return path.with_name(path.name + ".streams.npy")


def text_key(text: str) -> int:
    """A stream's key: the first 8 bytes of the BLAKE2b of its answer's text."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


class ChunkGaps:
    """The gaps of the completed streams, kept while the server runs."""

    def __init__(self) -> None:
        self.gaps: array[float] = array("d")
        self.counts: array[int] = array("Q")
        self.keys: array[int] = array("Q")

    def add_stream(self, gaps: array[float], key: int) -> None:
        self.gaps.extend(gaps)
        self.counts.append(len(gaps))
        self.keys.append(key)

    def extend(self, other: ChunkGaps) -> None:
        self.gaps.extend(other.gaps)
        self.counts.extend(other.counts)
        self.keys.extend(other.keys)

    def write(self, path: Path) -> None:
        """``path`` and its streams file (exactly those names), each written to a temporary
        file beside it, then both renamed over their names: a write that fails (disk
        full, directory gone) leaves no half-written file and nothing of a previous run's
        replaced. Raises ``OSError``."""
        import numpy as np  # here, not at the top: a simulator that keeps no gaps starts without it

        streams = np.stack([np.frombuffer(self.counts, dtype=np.uint64), np.frombuffer(self.keys, dtype=np.uint64)])
        pairs = [
            (path, np.frombuffer(self.gaps, dtype=np.float64)),
            (streams_path(path), streams.T.reshape(-1, 2)),
        ]
        written: list[Path] = []
        try:
            for target, values in pairs:
                temporary = _temporary_path(target)
                written.append(temporary)
                with open(temporary, "wb") as out:
                    np.save(out, values)
            for (target, _), temporary in zip(pairs, written, strict=True):
                os.replace(temporary, target)
        except BaseException:
            for temporary in written:
                temporary.unlink(missing_ok=True)  # those renamed are gone already
            raise

    @classmethod
    def read(cls, path: Path) -> ChunkGaps:
        import numpy as np  # here, not at the top: a simulator that keeps no gaps starts without it

        read = cls()
        read.gaps.frombytes(np.load(path).astype(np.float64).tobytes())
        streams = np.load(streams_path(path)).astype(np.uint64).reshape(-1, 2)
        read.counts.frombytes(np.ascontiguousarray(streams[:, 0]).tobytes())
        read.keys.frombytes(np.ascontiguousarray(streams[:, 1]).tobytes())
        return read


def _temporary_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def check_writable(path: Path) -> str | None:
    """Why ``path`` (and its streams file) could not be written at the stop, or None:
    a directory in the way, or a directory in which a file cannot be created (tried, and
    removed at once; ``os.access`` says yes to root on most read-only places)."""
    for target in (path, streams_path(path)):
        if target.is_dir():
            return f"{target} is a directory"
    parent = path.parent
    if not parent.is_dir():
        return f"{parent} is not a directory"
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.probe-")
    except OSError as exc:
        return f"cannot create a file in {parent}: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(probe)
    return None


def remove_files(path: Path) -> None:
    """``path`` and its streams file."""
    path.unlink()
    streams_path(path).unlink()
