"""Crash-safe files: the one owner of how pimjax writes and reads the state it keeps on disk.

Two ways to write, both safe against a process killed at any instruction (SIGKILL, OOM, a
power cut once fsync has returned) and against other processes writing the same file:

* `atomic_write(path, data)` -- a whole file replaced at once: a temporary file in the same
  folder, written, fsynced, `os.replace`d over `path`, the folder fsynced.  A reader sees the
  old file or the new one, never a mix; a kill leaves at most a stray `<name>.*.tmp`, which
  the next `locked(path)` writer removes (`sweep_temporaries`).
* `append_records(path, records)` -- JSON-lines, one record per line, each line carrying the
  CRC-32 of its own text as its first key (`{"_crc":"89abcdef",...}`: still one JSON object a
  line, so `pandas.read_json(lines=True)` reads the file).  The lines of one call go in one
  `write` on an `O_APPEND` descriptor under an exclusive `flock` of the file, then fsync: two
  processes never interleave, and neither loses the other's completed lines.  A writer killed
  mid-write leaves a torn last line without its newline; the next appender (under the lock)
  first ends that line, so the torn bytes stay one bad line and never swallow a good one.

And one way to read: `read_records(path, what)` returns the records whose checksum holds and
skips every other line -- a torn tail, a flipped byte, a truncated file -- with one
`CorruptStateWarning` naming the file and how many lines it skipped.  A line without a `_crc`
key (written by pimjax before checksums) is taken when it parses as an object and ends with a
newline.  `read_json(path, what)` is the whole-file counterpart for `atomic_write`'s files.

`locked(path)` is the exclusive `flock` on `<path>.lock` for a read-modify-write of a whole
file (the tuning cache merges what other processes wrote before it replaces the file).

Not ours (their libraries' guarantees, as of jax 0.10 / numba 0.60):
* JAX's persistent compilation cache (`api.enable_xla_cache`) writes an entry in place (no
  temporary file).  Entries are compressed, so a torn one fails to decompress: JAX warns and
  recompiles (the torn file stays until evicted).  pimjax sets its bound,
  `jax_compilation_cache_max_size` (`api.XLA_CACHE_BYTES`): JAX then takes a file lock for
  every read and write and evicts the least recently used entries past it.
* numba's `cache=True` files (`__pycache__/*.nbi / *.nbc`) go through a temporary file and
  `os.replace` (no fsync); an index of another source stamp or numba version is recompiled,
  not used; one entry per compiled signature, so they grow with the code, not with calls.  A
  kill mid-write leaves a `*.tmp.<uid>` that numba never removes.
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import tempfile
import warnings
import zlib

from .errors import user_stacklevel

_CRC_PREFIX = '{"_crc":"'
_CRC_LEN = len(_CRC_PREFIX) + 8 + 2          # '{"_crc":"' + 8 hex + '",'


class CorruptStateWarning(RuntimeWarning):
    """A file pimjax keeps state in held entries it could not use (a torn tail after a
    crash, a corrupt byte, another version's format): they were skipped, the rest was used."""


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:             # some filesystems do not open folders: the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes | str) -> None:
    """Replace `path` with `data` (bytes, or str written as UTF-8) atomically and durably:
    temporary file in `path`'s folder, fsync, `os.replace`, fsync of the folder.  Creates
    the folder.  Raises OSError when it cannot write (the old file is then untouched)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)


def sweep_temporaries(path: str) -> int:
    """Remove `atomic_write`'s leftovers of `path` (`<name>.*.tmp` of a writer killed before
    its rename); returns how many.  Call only under the lock every writer of `path` holds
    from its temporary file to its rename (`locked(path)`, or the file's own flock for
    `rewrite_records`), so none is in flight.  (A file written without a lock --
    model weights, a CSV -- keeps a killed writer's temporary file.)"""
    n = 0
    for tmp in glob.glob(glob.escape(os.path.abspath(path)) + ".*.tmp"):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
            n += 1
    return n


@contextlib.contextmanager
def locked(path: str):
    """Exclusive `flock` of `<path>.lock` for the block (threads of one process need their
    own lock besides: flock is per open file description, this opens one per call)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)            # closing releases the lock (a killed process's too)


def encode_record(record: dict) -> str:
    """One checksummed line (with its newline) of a non-empty JSON-able dict."""
    if not isinstance(record, dict) or not record:
        raise TypeError(f"a durable record is a non-empty dict, got {type(record).__name__}")
    if "_crc" in record:
        raise ValueError("a durable record may not have its own '_crc' key")
    text = json.dumps(record, separators=(",", ":"), allow_nan=True)
    return f'{_CRC_PREFIX}{zlib.crc32(text.encode("utf-8")):08x}",{text[1:]}\n'


def decode_record(line: str) -> dict | None:
    """The record of one line (without its newline), or None when the line is torn,
    corrupt or not a JSON object.  A line without `_crc` is a pre-checksum record."""
    if line.startswith(_CRC_PREFIX):
        crc, body = line[len(_CRC_PREFIX):len(_CRC_PREFIX) + 8], "{" + line[_CRC_LEN:]
        try:
            if line[_CRC_LEN - 2:_CRC_LEN] != '",' or int(crc, 16) != zlib.crc32(body.encode("utf-8")):
                return None
        except ValueError:
            return None
        text = body
    elif '"_crc"' in line:          # a checksum key not in front: not a line we wrote
        return None
    else:
        text = line
    try:
        out = json.loads(text)
    except (ValueError, RecursionError):      # RecursionError: nesting deeper than the parser's stack
        return None
    return out if isinstance(out, dict) else None


def _open_locked(path: str, flags: int) -> int:
    """A descriptor of `path` holding its exclusive flock, reopened when a compaction
    (`rewrite_records`) replaced the file while this one waited for the lock."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    while True:
        fd = os.open(path, flags | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def append_records(path: str, records) -> int:
    """Append `records` (non-empty dicts) to the JSON-lines file `path`, one checksummed line
    each, in one write under an exclusive flock, then fsync; returns the lines written.
    Creates the folder and the file.  Raises OSError when it cannot write."""
    text = "".join(encode_record(r) for r in records)
    if not text:
        return 0
    n = text.count("\n")
    fd = _open_locked(path, os.O_RDWR | os.O_APPEND)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":      # a killed writer's torn line: end it
            text = "\n" + text
        data = text.encode("utf-8")
        while data:             # a regular file takes the whole write unless a signal cuts it
            data = data[os.write(fd, data):]
        os.fsync(fd)
    finally:
        os.close(fd)            # releases the flock
    return n


def rewrite_records(path: str, keep) -> tuple[int, int]:
    """Compact the JSON-lines file `path` under its flock: its intact records, passed through
    `keep(records) -> records`, replace it atomically (torn and corrupt lines go).  Returns
    (records before, records after).  Appenders wait for the lock and then write to the new
    file (`_open_locked`), so none of their lines is lost."""
    fd = _open_locked(path, os.O_RDWR)
    try:
        sweep_temporaries(path)         # a compaction killed before its rename (all hold this lock)
        with os.fdopen(os.dup(fd), "rb") as f:
            records, _ = _scan(f.read())
        kept = list(keep(records))
        atomic_write(path, "".join(encode_record(r) for r in kept))
    finally:
        os.close(fd)
    return len(records), len(kept)


def _scan(raw: bytes) -> tuple[list[dict], int]:
    """(intact records, torn or corrupt lines) of a JSON-lines file's bytes."""
    text = raw.decode("utf-8", errors="replace")      # a bad byte spoils its line only
    lines = text.split("\n")
    tail = lines.pop()                                 # "" when the file ends with a newline
    out, bad = [], int(bool(tail.strip()))
    for line in lines:
        if not line.strip():
            continue
        rec = decode_record(line)
        if rec is None:
            bad += 1
        else:
            out.append(rec)
    return out, bad


def scan_records(path: str) -> tuple[list[dict], int]:
    """(intact records in file order, number of torn or corrupt lines) of `path` ([], 0 when
    absent), without warning: for a reader that warns itself (`read_records` does)."""
    try:
        with open(path, "rb") as f:
            return _scan(f.read())
    except FileNotFoundError:
        return [], 0


def read_records(path: str, what: str) -> list[dict]:
    """Every intact record of the JSON-lines file `path` in file order ([] when absent);
    torn or corrupt lines are skipped with one `CorruptStateWarning` naming `what` (e.g.
    "explore results"), the file and the count.  A last line without its newline is torn
    (its writer was killed before finishing it), whatever it holds."""
    out, bad = scan_records(path)
    if bad:
        warn_skipped(what, path, bad, len(out))
    return out


def warn_skipped(what: str, path: str, bad: int, used: int) -> None:
    """The one `CorruptStateWarning` of a reader that skipped `bad` entries and used `used`."""
    warnings.warn(f"pimjax {what} {path}: skipped {bad} torn or corrupt entr{'y' if bad == 1 else 'ies'} "
                  f"of {bad + used}; the other {used} are used", CorruptStateWarning, stacklevel=user_stacklevel())


def read_json(path: str, what: str):
    """The JSON value of a file written by `atomic_write` (None when absent); a file that
    cannot be read or does not parse is reported with a `CorruptStateWarning` and read as None (the caller
    starts again; `atomic_write` itself never leaves one behind)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        return json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as err:   # RecursionError: a file nested past the parser's stack
        warnings.warn(f"pimjax {what} {path}: unreadable ({type(err).__name__}: {str(err)[:200]}); "
                      "starting again without it",
                      CorruptStateWarning, stacklevel=user_stacklevel())
        return None
