"""The plugin author SDK: the adapter base class and shared send-side helpers."""

from .adapter import BaseAdapter, InboundHandler, SendResult

__all__ = ["BaseAdapter", "InboundHandler", "SendResult"]
