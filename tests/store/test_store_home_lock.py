"""docs/behaviour.md §3: one gateway per HERMES_HOME."""

from __future__ import annotations

import pytest

from hermes_core.store import HomeLockedError, SessionStore
from hermes_core.store.home_lock import home_is_locked


async def test_second_store_on_same_home_is_refused(config, clock):
    first = SessionStore(config.sessions_dir, config, clock=clock)
    await first.open()
    try:
        second = SessionStore(config.sessions_dir, config, clock=clock)
        with pytest.raises(HomeLockedError) as info:
            await second.open()
        assert str(config.home) in str(info.value)
        assert f"pid {__import__('os').getpid()}" in str(info.value)
        assert home_is_locked(config.home) == __import__("os").getpid()
        # a reader that does not take the lock still works alongside
        reader = SessionStore(config.sessions_dir, config, clock=clock, lock_home=False)
        await reader.open()
        assert await reader.has_any_sessions() is False
        await reader.close()
    finally:
        await first.close()
    assert home_is_locked(config.home) is None
    again = SessionStore(config.sessions_dir, config, clock=clock)
    await again.open()
    await again.close()
