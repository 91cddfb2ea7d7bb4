"""What decides after a round: the contracts policies see, the round-decision core, the run's
applied state, the non-inferiority test (layer 3)."""
