"""The controller and what runs beside it: the run's frozen end, round events, the in-process
simulator, the Ray cluster, pre-flight checks, the trial library (layer 4)."""
