"""Agent backends: the `Agent` interface, `echo` (default) and `openai`."""

from __future__ import annotations

from .base import Agent, AgentError, AgentInterrupted, AgentReply
from .echo import EchoAgent

__all__ = ["Agent", "AgentError", "AgentInterrupted", "AgentReply", "EchoAgent", "create_agent"]


def create_agent(config) -> Agent:
    """Build the agent selected by `[agent] backend` (`"echo"` or `"openai"`).

    Args:
        config: a GatewayConfig.

    Raises:
        ValueError: an unknown backend name (settings validation normally prevents it).
    """
    backend = config.agent.backend
    if backend == "echo":
        return EchoAgent()
    if backend == "openai":
        from .openai_agent import OpenAIAgent  # imported only when chosen

        return OpenAIAgent(config.agent.openai)
    raise ValueError(f"unknown agent backend {backend!r} (config key agent.backend)")
