"""TEMPORARY: the SDK names this plugin uses, until the shared SDK surface is on main."""
# ruff: noqa
from __future__ import annotations

try:
    from hermes_core.sdk import (PlatformSettings, MalformedPayload, SessionSource, MessageEvent,  # type: ignore
                                 hookimpl, SettingsSpec, AdapterSpec, BaseAdapter, SendResult, RetryAfter,
                                 chunk_text, ChatSendQueue, send_chunks, RetryPolicy, CAP_EDIT, CAP_THREADS,
                                 CAP_TYPING, CAP_WEBHOOK, INGRESS_SHARED, SendError)
except ImportError:
    from pydantic import BaseModel, ConfigDict, Field
    from hermes_core import SessionSource, MessageEvent, hookimpl, SettingsSpec, AdapterSpec
    from hermes_core.sdk import BaseAdapter, SendResult, RetryAfter, SendError, chunk_text, ChatSendQueue, send_chunks, RetryPolicy
    CAP_EDIT, CAP_THREADS, CAP_TYPING, CAP_WEBHOOK = "edit", "threads", "typing", "webhook"
    INGRESS_SHARED = "shared"

    class PlatformSettings(BaseModel):
        model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)
        enabled: bool = False
        adapter: str | None = None
        allowed_users: list[str] = Field(default_factory=list)
        allowed_chats: list[str] = Field(default_factory=list)
        allowed_roles: list[str] = Field(default_factory=list)
        allow_all: bool = False
        allow_bots: bool = False
        refusal_notice: str = "This assistant is private."
        admin_users: list[str] = Field(default_factory=list)
        home_channel: str | None = None
        home_channel_name: str | None = None
        edits_as_turns: bool = False

    class MalformedPayload(ValueError):
        def __init__(self, field: str, problem: str):
            self.field = field
            self.problem = problem
            super().__init__(f"malformed payload: {field} {problem}")
