"""User-facing errors.

Anything the user can fix (a missing file, a wrong column, a bad value) raises `EncoderlabError` with a message that
says what is wrong, where, and what is allowed. The CLI prints such errors in one line without a traceback; any other
exception is a bug and keeps its traceback.
"""


class EncoderlabError(Exception):
    """An error caused by input or environment that the user can fix."""


class Failed(EncoderlabError):
    """Work that started and failed for a reason the user can act on (a diverged run, a study with failed jobs): one
    line, like a refusal, but exit code 1: the input was accepted and work was done."""

    exit_code = 1


class WriteFailed(Failed):
    """A write that failed once work had started (a full disk, a quota, the file size limit, lost permissions):
    the input was accepted, so exit code 1 like any failed work; an output refused before any work is exit 2."""


class ChecksumError(EncoderlabError):
    """A downloaded file does not have the pinned sha256."""


class DataError(EncoderlabError):
    """A data source is missing, empty, malformed or unreachable."""


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` says memory ran out: Python's MemoryError, torch's `OutOfMemoryError` (CUDA: a RuntimeError
    saying "out of memory") or the CPU allocator's RuntimeError ("can't allocate memory"). What a process that the
    kernel's out-of-memory killer ends raises is nothing: it is gone (a study or sweep names its dead worker)."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in text.lower() or "can't allocate memory" in text)
