"""The busy-input placement policy on its own (docs/behaviour.md §5, §10, §11): a session's queue
state and an incoming event in, a Placement out. No runner, no store, no I/O.

Literal texts: the acknowledgements of `hermes_core.pipeline.busy`."""

from __future__ import annotations

import pytest

from hermes_core.model import MessageEvent, SessionSource
from hermes_core.model.events import INTERNAL as INTERNAL_KIND
from hermes_core.pipeline.busy import BURST, COMMAND, CONTROL, INTERNAL, TURN, Job, SessionQueue
from hermes_core.pipeline.placement import (ANSWER_NOW, APPEND, CLEAR_ALL, CLEAR_SLOT, FRONT, HAND_TO_TURN,
                                            INTERRUPT, MERGE, QUEUE, SEQUENTIAL, STEER, Placement, place)

ANN = SessionSource("testchat", "100", chat_type="dm", user_id="u1", user_name="Ann")
BOB = SessionSource("testchat", "100", chat_type="group", user_id="u2", user_name="Bob")


def ev(text="", source=ANN, **kw) -> MessageEvent:
    return MessageEvent(source=source, text=text, **kw)


def queue_of(*jobs: Job) -> SessionQueue:
    queue = SessionQueue()
    for job in jobs:
        queue.append(job)
    return queue


def running_burst(text="A") -> Job:
    job = Job(ev(text), kind=BURST)
    job.sealed = True
    return job


def test_idle_session_appends_a_burst_without_acknowledgement():
    assert place(SessionQueue(), None, ev("hi"), mode=INTERRUPT, live=True) == Placement(APPEND, BURST)


def test_follow_up_interrupts_a_running_plain_turn_once_then_merges():
    running = running_burst()
    assert place(SessionQueue(), running, ev("B"), mode=INTERRUPT, live=True) == Placement(
        APPEND, BURST, ack="Interrupting the current reply…", interrupt=True)
    waiting = Job(ev("B"), kind=BURST)
    assert place(queue_of(waiting), running, ev("C"), mode=INTERRUPT, live=True) == Placement(MERGE)


def test_follow_up_of_another_sender_opens_its_own_burst_and_waits():
    running = running_burst()
    waiting = Job(ev("B"), kind=BURST)
    assert place(queue_of(waiting), running, ev("C", source=BOB), mode=INTERRUPT, live=True) == Placement(
        APPEND, BURST, ack="Queued (position 2).")


def test_follow_up_behind_a_queue_turn_waits_instead_of_interrupting():
    running = Job(ev("X"), kind=TURN, from_queue=True)
    assert place(SessionQueue(), running, ev("B"), mode=INTERRUPT, live=True) == Placement(
        APPEND, BURST, ack="Queued (position 1).")


def test_queue_mode_appends_silent_turns():
    assert place(queue_of(Job(ev("B"), kind=TURN)), running_burst(), ev("C"), mode=QUEUE, live=True) == Placement(
        APPEND, TURN)


def test_queue_command_is_one_turn_with_its_argument_and_empty_one_is_refused():
    assert place(SessionQueue(), running_burst(), ev("/queue X"), mode=INTERRUPT, live=True) == Placement(
        APPEND, TURN, text="X", from_queue=True, ack="Queued (position 1).")
    empty = "Nothing to queue: write /queue followed by your message (or attach a file)."
    assert place(SessionQueue(), running_burst(), ev("/queue"), mode=INTERRUPT, live=True) == Placement(
        ANSWER_NOW, COMMAND, notice=empty)
    assert place(SessionQueue(), None, ev("/queue"), mode=INTERRUPT, live=True) == Placement(
        APPEND, COMMAND, notice=empty)


@pytest.mark.parametrize("name,clear", [("new", CLEAR_ALL), ("reset", CLEAR_ALL), ("stop", CLEAR_SLOT)])
def test_control_commands_go_in_front_and_interrupt_an_agent_turn(name, clear):
    assert place(SessionQueue(), running_burst(), ev(f"/{name}"), mode=QUEUE, live=True) == Placement(
        FRONT, CONTROL, clear=clear, interrupt=True)
    # The start-up replay rebuilds the queue only: nothing is interrupted.
    assert place(SessionQueue(), None, ev(f"/{name}"), mode=QUEUE, live=False) == Placement(
        FRONT, CONTROL, clear=clear, interrupt=False)


@pytest.mark.parametrize("text", ["/undo", "/undo 2", "/retry", "/resume", "/resume 1", "/title x", "/compress"])
def test_conversation_commands_wait_in_arrival_order(text):
    assert place(SessionQueue(), running_burst(), ev(text), mode=INTERRUPT, live=True) == Placement(APPEND, COMMAND)


@pytest.mark.parametrize("text", ["/status", "/help", "/frobnicate"])
def test_read_only_and_unknown_commands_are_answered_at_once_while_busy(text):
    assert place(SessionQueue(), running_burst(), ev(text), mode=INTERRUPT, live=True) == Placement(
        ANSWER_NOW, COMMAND)
    assert place(SessionQueue(), None, ev(text), mode=INTERRUPT, live=True) == Placement(APPEND, COMMAND)


def test_wake_up_is_internal_and_never_interrupts_merges_or_steers():
    wake = ev("job done", kind=INTERNAL_KIND, bound_session_id="20260301_120000_abcdef01")
    for mode in (INTERRUPT, QUEUE, STEER, SEQUENTIAL):
        assert place(queue_of(Job(ev("B"), kind=BURST)), running_burst(), wake, mode=mode, live=True,
                     can_steer=True) == Placement(APPEND, INTERNAL)


def test_steer_hands_a_follow_up_to_the_running_turn_or_tells_the_fallback():
    assert place(SessionQueue(), running_burst(), ev("B"), mode=STEER, live=True, can_steer=True) == Placement(
        HAND_TO_TURN, TURN, fallback_ack="Queued (position 1).")
    assert place(SessionQueue(), running_burst(), ev("B"), mode=STEER, live=True, can_steer=False) == Placement(
        APPEND, TURN, ack="Queued (position 1): this assistant cannot take a message while it replies.")
    # Something already waits, or the running job is a command: no steering, a plain queued turn.
    assert place(queue_of(Job(ev("B"), kind=TURN)), running_burst(), ev("C"), mode=STEER, live=True,
                 can_steer=True) == Placement(APPEND, TURN, ack="Queued (position 2).")
    assert place(SessionQueue(), None, ev("B"), mode=STEER, live=True, can_steer=True) == Placement(APPEND, TURN)


def test_sequential_mode_queues_commands_in_order():
    assert place(SessionQueue(), running_burst(), ev("/status"), mode=SEQUENTIAL, live=True) == Placement(
        APPEND, COMMAND)
    assert place(SessionQueue(), running_burst(), ev("/queue X"), mode=SEQUENTIAL, live=True) == Placement(
        APPEND, TURN, text="X", from_queue=True)


def test_too_long_message_is_a_refusal_job():
    assert place(SessionQueue(), running_burst(), ev("x"), mode=INTERRUPT, live=True, too_long="too long") == \
        Placement(APPEND, COMMAND, notice="too long")


@pytest.mark.parametrize("mode", [INTERRUPT, QUEUE, STEER, SEQUENTIAL])
def test_album_parts_join_the_waiting_album_in_every_mode(mode):
    photo = {"kind": "photo", "path": "p1.jpg"}
    first = Job(ev("", media=[photo], media_group_id="album-1"), kind=TURN if mode != INTERRUPT else BURST)
    second = ev("", media=[photo], media_group_id="album-1")
    assert place(queue_of(first), running_burst(), second, mode=mode, live=True, can_steer=True) == Placement(MERGE)
    # Another album is not merged into it (in interrupt mode a burst of one sender merges anyway),
    # nor is another sender's photo.
    other = ev("", media=[photo], media_group_id="album-2")
    if mode != INTERRUPT:
        assert place(queue_of(first), running_burst(), other, mode=mode, live=True).action != MERGE
    bob = ev("", source=BOB, media=[photo], media_group_id="album-1")
    assert place(queue_of(first), running_burst(), bob, mode=mode, live=True).action != MERGE
