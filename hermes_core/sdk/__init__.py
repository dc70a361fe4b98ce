"""The plugin author SDK: the one import surface of a platform plugin (docs/plugins.md).

A platform plugin imports from here only (and from `hermes_core.testing` in its tests):

    BaseAdapter, SendResult, InboundHandler    the adapter contract (sdk/adapter.py)
    AliasRecorder, DeliveryReporter            what the gateway binds for `record_alias` / `report_delivery`
    QueuedEditor                               what the gateway binds for `edit_queued` (docs/behaviour.md §5)
    AdapterSpec, SettingsSpec                  what an adapter / plugin declares (types.py)
    CAP_EDIT … CAP_WEBHOOK, CAPABILITIES       capability names for `AdapterSpec.capabilities`
    INGRESS_SINGLE_RECEIVER, INGRESS_SHARED    values of `AdapterSpec.ingress`
    PlatformSettings                           keys every `[platforms.<id>]` table accepts (sdk/settings.py)
    IdRule                                     how a platform reads its access lists' entries (sdk/idlists.py)
    SessionSource, MessageEvent, Platform      the data model (model/)
    IdentityAlias, AliasError                  one person or chat under several ids (model/identity.py)
    hookimpl, HERMES_PLUGIN_API                hook marker and plugin API version (markers.py)
    chunk_text, measure                        split a reply in the platform's unit (sdk/chunking.py)
    ChatSendQueue, send_chunks, deliver_plan   per-chat ordered sending (sdk/sending.py)
    send_with_retry, RetryPolicy               retry-after handling (sdk/sending.py)
    RetryAfter, RetryAfterExceeded, SendError  errors adapters raise / callers see (sdk/errors.py)
    MalformedPayload                           a payload a mapping function cannot read (sdk/errors.py)
    describe_failure                           a caught exception in words for an operator's line (sdk/errors.py)
    field_object, field_list, field_text,      typed payload fields naming the bad one (sdk/payload.py)
    field_id, field_int, field_bool, type_name
    DeliveryPlan, OutboundDelivery, RedactionRule, SessionContext   records some hooks take or return
    neutralize_untrusted                       make user-chosen text (names, topics) safe for a prompt
    normalize_whatsapp_id, canonical_whatsapp_identifier   the key builder's WhatsApp id rule (keys.py)
    QueuedChange, offer_change                 an edit or deletion of an earlier message, offered to the
                                               gateway's queue before `edits_as_turns` (sdk/changes.py,
                                               docs/behaviour.md §5)
    SessionWork, WorkHandle                    background work and wake-ups bound to a session
                                               (`app.background`; sdk/background.py, docs/behaviour.md §10)
    COMMAND_MENU                               the commands a platform's command menu advertises (sdk/commands.py)
    TESTING_PACKAGE                            where the test kit lives: `hermes_core.testing`
"""

from ..keys import canonical_whatsapp_identifier, normalize_whatsapp_id
from ..markers import HERMES_PLUGIN_API, hookimpl
from ..model.context import SessionContext, neutralize_untrusted
from ..model.events import MessageEvent
from ..model.identity import AliasError, IdentityAlias
from ..model.source import Platform, SessionSource, SourceError
from ..types import (CAP_EDIT, CAP_MEDIA, CAP_REACTIONS, CAP_THREADS, CAP_TYPING, CAP_WEBHOOK, CAPABILITIES,
                     INGRESS_SHARED, INGRESS_SINGLE_RECEIVER, AdapterSpec, DeliveryPlan, OutboundDelivery,
                     RedactionRule, SettingsSpec)
from .adapter import AliasRecorder, BaseAdapter, DeliveryReporter, InboundHandler, QueuedEditor, SendResult
from .background import SessionWork, WorkHandle
from .changes import QueuedChange, offer_change
from .chunking import chunk_text, measure
from .commands import COMMAND_MENU
from .errors import MalformedPayload, RetryAfter, RetryAfterExceeded, SendError, describe_failure
from .idlists import IdRule
from .payload import field_bool, field_id, field_int, field_list, field_object, field_text, type_name
from .sending import ChatSendQueue, RetryPolicy, deliver_plan, send_chunks, send_with_retry
from .settings import PlatformSettings

# The test kit (contract suites, fakes, fixtures) is a separate package so that importing the
# SDK never imports pytest: `from hermes_core.testing import AdapterContract`.
TESTING_PACKAGE = "hermes_core.testing"

__all__ = [
    "AdapterSpec", "AliasError", "AliasRecorder", "BaseAdapter", "CAPABILITIES", "CAP_EDIT", "CAP_MEDIA",
    "CAP_REACTIONS", "CAP_THREADS", "CAP_TYPING", "CAP_WEBHOOK", "COMMAND_MENU", "ChatSendQueue", "DeliveryPlan",
    "DeliveryReporter",
    "HERMES_PLUGIN_API", "IdRule", "INGRESS_SHARED", "INGRESS_SINGLE_RECEIVER", "IdentityAlias", "InboundHandler",
    "MalformedPayload", "MessageEvent", "field_bool", "field_id", "field_int", "field_list", "field_object", "field_text", "type_name", "OutboundDelivery", "Platform", "PlatformSettings", "QueuedChange", "QueuedEditor", "RedactionRule",
    "RetryAfter", "RetryAfterExceeded", "RetryPolicy", "SendError", "SendResult", "SessionContext",
    "SessionSource", "SessionWork", "SettingsSpec", "SourceError", "TESTING_PACKAGE", "WorkHandle",
    "canonical_whatsapp_identifier", "chunk_text", "deliver_plan", "describe_failure", "hookimpl", "measure", "neutralize_untrusted",
    "normalize_whatsapp_id", "offer_change", "send_chunks", "send_with_retry",
]
