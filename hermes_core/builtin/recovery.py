"""Default recovery planning (seed §7; docs/behaviour.md §6): what to do with a failed or interrupted turn."""

from __future__ import annotations

from ..markers import hookimpl
from ..model.entry import AUTO_RESUME_REASONS  # resumes once; repeats are bounded by the stuck-loop count
from ..types import RecoveryPlan


def default_recovery_plan(failure: str) -> RecoveryPlan:
    """The core's rule, as a pure function of the failure reason.

    Args:
        failure: `"restart_timeout"`, `"shutdown_timeout"`, `"restart_interrupted"` → resume;
            `"stuck_loop"` → give up (the session is suspended, the user starts afresh);
            anything else (`"agent_error"`, …) → give up, the user sees the error notice.
    """
    if failure in AUTO_RESUME_REASONS:
        return RecoveryPlan(action="resume", reason=failure)
    if failure == "stuck_loop":
        return RecoveryPlan(action="give_up", reason="active across 3+ restarts: suspended")
    return RecoveryPlan(action="give_up", reason=failure or "unknown failure")


@hookimpl(trylast=True)
def hermes_recovery_plan(session, failure):
    """Core default (trylast): `default_recovery_plan(failure)`."""
    return default_recovery_plan(failure)
