"""What the pipeline's steps share: config, store, plugin manager, agent, adapters, deliverer."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

from ..model.timeutil import Clock, utc_now
from .access import AccessGate
from .agent_cache import AgentCache
from .delivery import Deliverer


@dataclass
class PipelineDeps:
    """Services of one running gateway.

    Attributes:
        config: GatewayConfig.
        store: an open `hermes_core.store.SessionStore`.
        pm: the application's plugin manager.
        agent: the `Agent` answering turns.
        adapters: platform name → started BaseAdapter.
        deliverer: sends replies and notices (built from `pm` when omitted).
        clock: aware-UTC clock for message timestamps.
        on_turn_completed: `(session_key) -> None | awaitable`, called after a turn completed
            (the app forgets the session's stuck-loop count, docs/behaviour.md §6).
        agent_cache: the sessions' live transcripts across turns (seed §11); built from
            `config` (`[agent.agent_cache]`) when omitted.
        access: who may talk to the agent (docs/behaviour.md §9); built from `config`'s
            `[platforms.<id>]` tables when omitted.
    """

    config: Any
    store: Any
    pm: Any
    agent: Any
    adapters: dict[str, Any] = field(default_factory=dict)
    deliverer: Deliverer | None = None
    clock: Clock = utc_now
    on_turn_completed: Callable[[str], Any] | None = None
    agent_cache: AgentCache | None = None
    access: AccessGate | None = None

    def __post_init__(self) -> None:
        if self.access is None:
            from ..plugin_system.settings import common_platform_settings

            self.access = AccessGate(self.pm, common_platform_settings(self.config, {}), self.store.canonical_id)
        if self.agent_cache is None:
            self.agent_cache = AgentCache.from_config(self.config)
        if self.deliverer is None:
            self.deliverer = Deliverer(self.pm, hook_timeout_s=self.config.plugins.hook_timeout_s)

    @property
    def hook_timeout_s(self) -> float:
        return self.config.plugins.hook_timeout_s


async def maybe_await(value: Any) -> Any:
    """Await `value` if it is awaitable (store methods may be sync or async by design)."""
    return await value if inspect.isawaitable(value) else value
