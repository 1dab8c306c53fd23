"""The QA and retrieval tasks of the offline suite as independent jobs, and the second process that builds some of
them while build.py writes the other tasks and normalises the corpus.

A job reads `raw` (build.build_tasks' second value), writes one task folder under `root` (atomically, as every task
folder; `before_write()` first) and returns ({name: stats}, the task's validation and test texts). Which process
runs it changes nothing in its files, so the suite is the same bytes with one core or two; with one core every job
runs in this process.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path

from encoderlab.core.errors import Failed
from encoderlab.core.leftovers import remove_dead_leftovers
from encoderlab.core.process import die_with_parent
from encoderlab.data.offline import ir, qa

Result = tuple[dict[str, dict], list[str]]
# In the order of suite.json's tasks, which is also the order in which a failure is reported: the first failing job.
JOBS: dict[str, Callable[[dict, Path, Callable[[], None]], Result]] = {
    **{name: partial(qa.build_qa_task, name) for name in qa.DESCRIPTIONS},
    **{name: partial(ir.build_ir_task, name) for name in ir.DATASETS},
}
# The parts of `raw` that each job reads: only those travel to the second process (CoNLL's nested tuples cost ~0.4 s
# to pickle and unpickle, the reviews are not needed at all).
READS = {"conll-cloze": ("conll",), "imdb-long": ("imdb_polarity",),
         **{name: ("wiki", "units") for name in JOBS if name.startswith("wiki-")}}
# The second process's jobs, ~5.5 s on one core of 2, the Wikipedia ones first (build.build_tasks shares Wikipedia
# first), while this one builds the other tasks, writes them, builds conll-cloze (0.25 s, less than CoNLL's trip
# through the pipe) and normalises the corpus (~5.5 s too).
SECOND = ("wiki-cloze", "wiki-title-span", "wiki-description", "wiki-title", "imdb-long")
STOP_WAIT_S = 30.0  # for the second process to remove the folder it was writing, once told to stop
VERIFIED = "files verified"  # the part `Jobs.verified` sends: the second process may write from then on


def cores() -> int:
    """The cores this process may run on (`taskset`, a cpuset), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def run_jobs(names: Sequence[str], inputs: Callable[[str], dict], root: Path,
             before_write: Callable[[], None] = lambda: None) -> dict[str, Result | Exception]:
    """Run the jobs `names`, each on `inputs(name)`; returns what each gave, an exception for one that failed. Once
    one has failed, only those before it in JOBS order still run (one of them may fail too, and would be reported
    first): in JOBS order, as one process runs them, that is none."""
    done: dict[str, Result | Exception] = {}
    order = list(JOBS)
    first_failed = len(order)
    for name in names:
        if order.index(name) > first_failed:
            continue
        try:
            done[name] = JOBS[name](inputs(name), root, before_write)
        except Exception as exc:  # handed to `Jobs.results`, which raises the first in JOBS order
            done[name] = exc
            first_failed = min(first_failed, order.index(name))
    return done


class Jobs:
    """Runs every job of JOBS under `root`: with `parallel`, those of SECOND in a spawned process (never forked: the
    caller may have imported torch), and all others here (`run_here`); `results` gives them in JOBS order, or raises
    the first failure in that order, as one process running them in order would.

    The process starts at once, so that its imports overlap the caller's work, and its jobs start as soon as `send`
    gave them what they read; they write their task folders only once `verified()` said that every pinned file is
    (a refused file must leave the suite as it was). Leaving the block on an error or Ctrl-C stops the process, and it
    removes the task folder it was writing (atomic_dir), as this process does."""

    def __init__(self, root: Path, parallel: bool) -> None:
        self.root, self.theirs = root, SECOND if parallel else ()
        self.mine: dict[str, Result | Exception] = {}
        self.received: dict[str, Result | Exception] | None = None
        self.process: multiprocessing.process.BaseProcess | None = None
        if self.theirs:
            context = multiprocessing.get_context("spawn")
            self.conn, child = context.Pipe()
            self.process = context.Process(target=_serve, args=(child, root, self.theirs, os.getpid()),
                                           name="offline-suite-jobs", daemon=True)
            with _interrupts_ignored():
                self.process.start()
            child.close()
            # Parts are written to the pipe by a thread: a pipe holds 64 KiB, and the other process reads a part only
            # when a job needs it (CoNLL after the Wikipedia jobs); this one must not wait for that.
            self.sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="offline-jobs-send")

    def __enter__(self) -> Jobs:
        return self

    def send(self, part: dict) -> None:
        reads = {key for name in self.theirs for key in READS[name]} | {VERIFIED}
        if self.process is not None and reads & part.keys():
            data = pickle.dumps({key: part[key] for key in reads & part.keys()}, protocol=pickle.HIGHEST_PROTOCOL)
            self.sender.submit(self.conn.send_bytes, data)

    def verified(self) -> None:
        self.send({VERIFIED: True})

    def run_here(self, raw: dict) -> None:
        self.mine = run_jobs([name for name in JOBS if name not in self.theirs], lambda name: raw, self.root)
        if any(isinstance(done, Exception) for done in self.mine.values()):
            self.results()  # raises now the first failure in JOBS order, which may be the other process's

    def results(self) -> dict[str, Result]:
        theirs = self._receive() if self.process is not None else {}
        out = {}
        for name in JOBS:  # a job that did not run follows, in this order, a failure in its process: raised first
            done = self.mine[name] if name in self.mine else theirs[name]
            if isinstance(done, Exception):
                raise done
            out[name] = done
        return out

    def _receive(self) -> dict[str, Result | Exception]:
        if self.received is None:
            # Not once every part is sent: a job that fails makes the other process skip the jobs after it and never
            # read their parts, whose send then waits on it while its results wait on this side.
            try:
                self.received = self.conn.recv()
            except (EOFError, BrokenPipeError):
                self._lost()
        return self.received

    def _lost(self) -> None:
        self.process.join(STOP_WAIT_S)
        code = self.process.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        raise Failed(f"the process building the offline tasks {', '.join(self.theirs)} (pid {self.process.pid}) "
                     f"ended before it was done ({how}: killed by hand or out of memory?); run the command again")

    def __exit__(self, kind, exc, tb) -> None:
        if self.process is None:
            return
        if kind is not None and self.received is None and self.process.is_alive():  # else it is ending anyway
            self.process.terminate()  # SIGTERM: `_serve` makes it a KeyboardInterrupt there
        self.process.join(STOP_WAIT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        if self.process.exitcode != 0:  # killed (by hand, out of memory): its atomic_dir could not remove its folder
            for name in self.theirs:
                remove_dead_leftovers(self.root / name)
        self.sender.shutdown(wait=True)  # a write under way ends once the process is gone (BrokenPipeError)
        self.conn.close()


def _serve(conn, root: Path, names: Sequence[str], parent: int) -> None:
    """The second process: run the jobs `names`, each once the parts of `raw` it reads arrived, writing once the
    pinned files are verified, and send back what each gave (a failure as a result)."""
    die_with_parent(parent)
    signal.signal(signal.SIGTERM, _interrupt)
    raw: dict = {}

    def received(*keys: str) -> dict:
        while not set(keys) <= raw.keys():
            raw.update(pickle.loads(conn.recv_bytes()))
        return raw

    # Stopped, or the parent is gone: what was being written is removed already, and nobody waits for more.
    with suppress(KeyboardInterrupt, EOFError, BrokenPipeError):
        done = run_jobs(names, lambda name: received(*READS[name]), root, lambda: received(VERIFIED))
        conn.send({name: _portable(result) for name, result in done.items()})


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt  # so that an atomic write under way removes its temporary folder


def _portable(done: Result | Exception) -> Result | Exception:
    """`done`, an exception with where it was raised in this process as a note (a bug's traceback in the parent
    shows only the parent's frames; a user error prints its message alone anyway), or, one that cannot be pickled,
    a RuntimeError saying the same."""
    if not isinstance(done, Exception):
        return done
    if hasattr(done, "add_note"):  # Python 3.11+
        done.add_note("raised in the process that builds some of the offline tasks:\n"
                      + "".join(traceback.format_exception(done)).rstrip())
    try:
        pickle.loads(pickle.dumps(done))
    except Exception:  # any exception type may fail to pickle, each in its own way
        return RuntimeError(f"{type(done).__name__}: {done}")
    return done


@contextmanager
def _interrupts_ignored() -> Iterator[None]:
    """SIGINT ignored while a process starts, which keeps it ignored: Ctrl-C at a terminal reaches every process of
    its group, and this process alone decides what the other one does then (`Jobs.__exit__`). Python makes SIGINT a
    KeyboardInterrupt only where its parent left SIGINT at the default."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread, where no handler can be set: Ctrl-C reaches both
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
