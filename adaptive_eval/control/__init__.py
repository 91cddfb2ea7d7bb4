"""The controller and what runs beside it: the run's frozen end, round events, the pilot, the
trial library (layer 4; the Ray cluster and pre-flight checks are dispatch's)."""
