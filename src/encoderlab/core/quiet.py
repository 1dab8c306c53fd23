"""transformers' progress bars ("Loading weights", "Writing model shards") and its info and warning log lines, kept
off stderr while encoderlab loads or saves a model through it: encoderlab says what it reads and writes in its own
lines, and what is wrong in one line. transformers' error lines still show, and every exception still propagates."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' verbosity at error and its progress bars off for the block, then both as they were (a bar the
    caller turned off stays off; blocks nest)."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
