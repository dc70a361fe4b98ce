"""Platforms built into the core (the local terminal)."""
