"""A fine-tuning run pauses Python's cyclic garbage collector (finetuning/training.py `collector_paused`): off for its
steps and its scoring, back as it was after, and the run's record the same bits as with the collector running."""
from __future__ import annotations

import gc
from contextlib import nullcontext

import pytest
from test_batched import CPU, setup, tok  # noqa: F401 - tok is a fixture

from encoderlab.finetuning import training
from encoderlab.finetuning.training import finetune

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest


def without_seconds(body: dict) -> dict:
    return {k: v for k, v in body.items() if k != "seconds"}


def test_the_collector_is_off_while_a_run_trains_and_scores_and_as_it_was_after(tok, monkeypatch):  # noqa: F811
    task, cfg, weights, protocol = setup("classification", tok)
    seen = []
    evaluate = task.evaluate
    monkeypatch.setattr(task, "evaluate", lambda *a: seen.append(("score", gc.isenabled())) or evaluate(*a))
    assert gc.isenabled()
    body = finetune(task, cfg, weights, lr=1e-3, seed=0, protocol=protocol, device=CPU,
                    on_step=lambda done, total: seen.append(("step", gc.isenabled())))
    assert body["status"] == "ok" and gc.isenabled()
    assert seen == [("step", False)] * body["steps"] + [("score", False)] * 2
    gc.disable()
    try:  # a caller that turned it off itself keeps it off
        finetune(task, cfg, weights, lr=1e-3, seed=0, protocol=protocol, device=CPU)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_run_with_the_collector_paused_records_the_same_bits(tok, monkeypatch):  # noqa: F811
    task, cfg, weights, protocol = setup("classification", tok)
    paused = [without_seconds(finetune(task, cfg, weights, lr=3e-3, seed=s, protocol=protocol, device=CPU))
              for s in (0, 1)]
    monkeypatch.setattr(training, "collector_paused", nullcontext)
    running = [without_seconds(finetune(task, cfg, weights, lr=3e-3, seed=s, protocol=protocol, device=CPU))
               for s in (0, 1)]
    assert paused == running and paused[0] != paused[1]


def test_what_a_pause_left_in_cycles_is_freed_as_it_ends_even_inside_another_pause():
    import weakref

    class Node:
        pass

    with training.collector_paused():  # a sweep's
        with training.collector_paused():  # a run's
            node = Node()
            node.me = node  # a cycle: reference counting never frees it
            alive = weakref.ref(node)
            del node
        assert alive() is None and not gc.isenabled()
    assert gc.isenabled()


def test_an_interrupt_as_the_pause_begins_leaves_the_collector_as_it_was(monkeypatch):
    """Ctrl-C landing just after the collector is turned off, before the block is entered: it was left off for the
    rest of the process."""
    turn_off = gc.disable

    def turned_off_then_interrupted():
        turn_off()
        raise KeyboardInterrupt

    monkeypatch.setattr(gc, "disable", turned_off_then_interrupted)
    try:
        with pytest.raises(KeyboardInterrupt), training.collector_paused():
            pass
        assert gc.isenabled()
    finally:
        gc.enable()
