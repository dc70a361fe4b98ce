"""Restart and crash recovery (seed §7; docs/behaviour.md §6): what a gateway does at start-up with the
turns, replies and messages a previous run left behind. It queues work on the runner; the
pipeline itself never imports this package (app → recovery → pipeline's public runner API)."""

from .startup import RecoveryReport, load_restart_counts, restore_at_startup, save_restart_counts

__all__ = ["RecoveryReport", "load_restart_counts", "restore_at_startup", "save_restart_counts"]
