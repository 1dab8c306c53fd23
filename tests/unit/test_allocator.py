"""`keep_freed_memory` (core/process.py): with it, a large block (a step's largest tensors) freed and allocated again
reuses its pages (no page faults); glibc's default maps and faults it in anew every time. Counted in fresh processes
through glibc's malloc itself (what torch's CPU tensors use), never timed."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from encoderlab.core import process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc, Linux only")

FAULTS = """
import ctypes, resource, sys
from encoderlab.core.process import keep_freed_memory
print(keep_freed_memory() if sys.argv[1] == "keep" else False)
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]

def faults():  # minor page faults of allocating, writing and freeing 64 MiB (the size of a micro CLM step's logits)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(64 * 2**20)
    ctypes.memset(block, 1, 64 * 2**20)
    libc.free(block)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

faults()  # the first one faults in any setting: the memory is new to the process
print(min(faults() for _ in range(3)))
"""


def second_allocation(mode: str, **env: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True,
                         env={**os.environ, **env}).stdout.split()
    return out[0] == "True", int(out[1])


def test_a_freed_large_block_is_allocated_again_without_page_faults():
    applied, kept = second_allocation("keep")
    _, default = second_allocation("default")
    assert applied
    assert default >= 32  # 16,384 pages of 4 KiB (32 with 2 MiB pages): the cost the setting removes
    assert kept < default / 10


def test_the_users_own_allocator_setting_wins(monkeypatch):
    applied, faults = second_allocation("keep", MALLOC_MMAP_MAX_="65536")
    _, default = second_allocation("default")
    assert not applied and faults >= default / 2
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1000")
    assert process.keep_freed_memory() is False  # refused before any call: this test process is left alone
