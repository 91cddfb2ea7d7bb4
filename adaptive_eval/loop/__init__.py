"""The run loop: a locked run folder, the controller driven to its stop, progress (layer 5)."""
