"""The gateway pipeline: key → session → transcript → agent → transcript → delivery (issue 2 item 8)."""

from .context import build_session_context, build_session_context_prompt, should_redact
from .deps import PipelineDeps
from .runner import GatewayRunner

__all__ = ["GatewayRunner", "PipelineDeps", "build_session_context", "build_session_context_prompt",
           "should_redact"]
