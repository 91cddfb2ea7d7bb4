"""Foundation: value types, errors, redaction, compute accounting, interrupts, the error log, Ray
addresses (layer 1; `stats/` beside it)."""
