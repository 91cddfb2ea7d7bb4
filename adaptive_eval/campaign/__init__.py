"""A campaign built from its config (the only place config names become objects), its input checks,
and compare's checkpoint campaign (layer 4)."""
