"""The plugin author SDK: the adapter base class and shared send-side helpers.

    BaseAdapter, SendResult, InboundHandler   the adapter contract (sdk/adapter.py)
    AdapterSpec                               what an adapter declares (types.py, re-exported)
    chunk_text, measure                       split a reply in the platform's unit (sdk/chunking.py)
    ChatSendQueue, send_chunks, deliver_plan  per-chat ordered sending (sdk/sending.py)
    send_with_retry, RetryPolicy              retry-after handling (sdk/sending.py)
    RetryAfter, RetryAfterExceeded, SendError errors adapters raise / callers see (sdk/errors.py)
"""

from ..types import AdapterSpec
from .adapter import BaseAdapter, InboundHandler, SendResult
from .chunking import chunk_text, measure
from .errors import RetryAfter, RetryAfterExceeded, SendError
from .sending import ChatSendQueue, RetryPolicy, deliver_plan, send_chunks, send_with_retry

__all__ = [
    "AdapterSpec", "BaseAdapter", "ChatSendQueue", "InboundHandler", "RetryAfter", "RetryAfterExceeded",
    "RetryPolicy", "SendError", "SendResult", "chunk_text", "deliver_plan", "measure",
    "send_chunks", "send_with_retry",
]
