"""The one way a seed is derived from other values: `derive_seed(STEP_DRAWS, seed, step)`.

Every random stream of a run is named by its first key (the stream) and keyed by what it depends on (the run's
seed, a step, an epoch). Arithmetic mixes such as `seed * 7_919 + step` collide (seed 0 at step 7919 is seed 1 at
step 0); a cryptographic hash of the keys does not in practice, and unlike Python's `hash()` it is the same in
every process and on every platform, so a resumed or distributed run draws the same numbers.
"""
from __future__ import annotations

import hashlib

# The stream a pretraining step's random draws come from, whatever its objective (MLM's masks, any objective's own
# draws), keyed by (seed, step). Its string names what it first drew; it is hashed into every step's seed, so it stays
# as it is for every run made with it to reproduce.
STEP_DRAWS = "mlm-mask"


def derive_seed(*keys: str | int) -> int:
    """A 63-bit seed (fits torch's and numpy's generators) that depends on every key, in order.

    Keys are strings (the stream's name) and integers; their repr is hashed, so 1 and "1" are different keys.
    """
    for key in keys:
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise TypeError(f"seed keys are strings and integers, got {key!r}")
    plain = tuple(key if isinstance(key, str) else int(key) for key in keys)  # an IntEnum hashes as its value
    digest = hashlib.blake2b(repr(plain).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1
