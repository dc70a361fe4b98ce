"""The gateway pipeline: key → session → transcript → agent → transcript → delivery ."""

from .context import build_session_context, build_session_context_prompt, should_redact
from .deps import PipelineDeps
from .runner import GatewayRunner

__all__ = ["GatewayRunner", "PipelineDeps", "build_session_context", "build_session_context_prompt",
           "should_redact"]
