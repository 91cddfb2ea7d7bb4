"""A pilot: the first ``K`` trials per question of every model, recorded as the run's own.

A pilot is the start of the very run that ``run`` later continues in the same folder: the
campaign's decision core plans its rounds (with ``policy.min_trials_per_question`` raised to
``K``, which the folder's ``pilot.json`` keeps for the rest of the run), and
:class:`PilotCore` only stops planning once every cell has ``K`` trials planned (or its
model's cap). The rounds in flight then finish and are recorded, so nothing sampled is thrown
away and nothing is sampled twice; ``run`` on the folder resumes from them exactly as from an
interrupted run, so a run after a pilot of ``K`` equals a run with ``min_trials_per_question: K``
trial for trial.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from adaptive_eval.base.types import Stop
from adaptive_eval.control.controller import Controller
from adaptive_eval.decide.contracts import CampaignView
from adaptive_eval.decide.core import CoreState, DecidedByCore, RoundCore, RoundDecision

#: The smallest pilot that estimates anything (a per-question variance needs two trials).
MIN_PILOT = 2


class PilotCore(DecidedByCore):
    """The campaign's decision core, holding back every plan once each cell has ``trials``
    trials planned (its model's cap, if lower), or, once :meth:`extend` ed, once the campaign
    has ``target`` trials planned in all (its own rounds: an automatic pilot sampling on). It
    decides exactly as the core does (a :class:`~adaptive_eval.decide.core.RoundCore`)."""

    def __init__(self, core: RoundCore, trials: int) -> None:
        self.core: RoundCore = core
        self.trials = trials
        self.target: int | None = None
        self.done = False

    def extend(self, target: int) -> None:
        """Plan the campaign's own rounds on until ``target`` trials are planned in all."""
        self.target = target
        self.done = False

    @property
    def state(self) -> CoreState:
        return self.core.state

    def decide(self, view: CampaignView) -> RoundDecision:
        return self.core.decide(view)

    def interrupt(self, stop: Stop | None) -> None:
        self.core.interrupt(stop)

    def next_plan(self, view: CampaignView, in_flight: int) -> np.ndarray | None:
        if self.target is not None:
            reached = int(view.planned.sum()) >= self.target
        else:
            reached = bool((view.planned >= np.minimum(self.trials, view.capacity)[:, None]).all())
        if reached:
            self.done = True
            return None
        return self.core.next_plan(view, in_flight)


class PilotLook(Protocol):
    """What a growing pilot decided after a stretch: the total trials to sample on to
    (``None``: the pilot is done), in a line for the console."""

    @property
    def target(self) -> int | None: ...

    def line(self) -> str: ...


#: Asked once a pilot's trials are all in (``forecast --pilot auto``'s,
#: :func:`adaptive_eval.forecast.pilot.next_target`).
Grow = Callable[[Controller], PilotLook]


def run_pilot(
    controller: Controller,
    trials: int,
    grow: Grow | None = None,
    say: Callable[[str], None] | None = None,
) -> bool:
    """Drive ``controller`` until every cell has ``trials`` trials recorded (or the campaign
    stops first), then, while ``grow`` names a larger total, on through the campaign's own
    rounds to it (each look an event ``pilot_growth``, and a line to ``say``); returns whether
    the campaign finished during the pilot."""
    pilot = PilotCore(controller.core, trials)
    controller.core = pilot
    controller.resume()
    while controller.step():
        if pilot.done and not controller.rounds:
            if grow is None:
                break
            look = grow(controller)
            controller.log.info(
                "pilot_growth",
                trials=controller.state.trials_used,
                target=look.target,
                message=look.line(),
            )
            if say is not None:
                say(look.line())
            if look.target is None or look.target <= controller.state.trials_used:
                break
            pilot.extend(look.target)
            controller.plan()
    controller.core = pilot.core
    finished = controller.finished()
    controller.store.set_meta(elapsed_s=controller.elapsed_s)
    if finished:
        controller.store.set_meta(finished=True)
    return finished
