"""Default `hermes_canonical_identity` (seed §4, docs/behaviour.md §4): stored identity aliases,
then the core's normalisation (WhatsApp ids).

Unlike the other builtins this is an object, one per plugin manager, because it reads the alias
map of the application's store: the app attaches `store.resolve_identity` once the store is open
(`plugin_system.manager.attach_identity_aliases`). Before that (or with no store at all) only the
normalisation applies.
"""

from __future__ import annotations

from typing import Callable

from ..keys import canonical_with_aliases
from ..markers import hookimpl

PLUGIN_NAME = "builtin:identity"


class IdentityAliases:
    """The builtin canonicaliser. `resolve` is `(platform, id) -> canonical id`, or None."""

    def __init__(self, resolve: Callable[[str, str], str] | None = None) -> None:
        self.resolve = resolve

    @hookimpl(trylast=True)
    def hermes_canonical_identity(self, platform: str, kind: str, value: str) -> str:
        """Core default: follow the stored aliases (chains included), then normalise."""
        return canonical_with_aliases(platform, kind, value, self.resolve)
