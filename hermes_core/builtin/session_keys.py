"""Default key-building hookimpls (seed §4, §5): one rule for the key and the shared predicate.
The default `hermes_canonical_identity` (stored aliases) is in `builtin/identity.py`."""

from __future__ import annotations

from ..keys import build_session_key, is_shared_multi_user_session
from ..markers import hookimpl


@hookimpl(trylast=True)
def hermes_session_key(source, policy):
    """Core default: `keys.build_session_key` with the policy's flags and canonicaliser."""
    return build_session_key(
        source,
        group_sessions_per_user=policy.group_sessions_per_user,
        thread_sessions_per_user=policy.thread_sessions_per_user,
        canonicalize=policy.canonicalize,
    )


@hookimpl(trylast=True)
def hermes_session_shared(source, policy):
    """Core default: `keys.is_shared_multi_user_session`, the same rule as the key."""
    return is_shared_multi_user_session(
        source,
        group_sessions_per_user=policy.group_sessions_per_user,
        thread_sessions_per_user=policy.thread_sessions_per_user,
    )
