"""Forecasts: the campaign's own decision core run forward on simulated truths, before a run
(:mod:`.campaign`, from a pilot or earlier trials) and beside it (:mod:`.live`), with the
core's I/O-free loop (:mod:`.simulate`), where simulated truths come from (:mod:`.predictive`),
what is known (:mod:`.evidence`) and the run against its forecast (:mod:`.check`)."""
