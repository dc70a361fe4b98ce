"""Hook markers and the plugin API version (docs/architecture.md §1).

`hookimpl` is for plugins; `override` is the deployment layer's marker (a `tryfirst` hookimpl):
deployment overrides are registered last and consulted first, so they win over plugins, which
win over the builtins (whose defaults are `trylast`).
"""

from __future__ import annotations

from typing import Any, Callable

from pluggy import HookimplMarker

from .hookspecs import PROJECT_NAME

# Major version of the plugin API. A plugin module declares `HERMES_API = 1`; a different major
# is refused at load (Prefect's version fence, without a runtime `packaging` dependency).
HERMES_PLUGIN_API = 1

hookimpl = HookimplMarker(PROJECT_NAME)


def override(function: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """Mark a deployment override: a hookimpl with `tryfirst=True`.

    Usable bare (`@override`) or with pluggy options (`@override(wrapper=True)`). Reserved for
    modules listed in `[plugins] overrides`; entry-point plugins using tryfirst are warned about.
    """
    kwargs.setdefault("tryfirst", True)
    marker = hookimpl(**kwargs)
    return marker(function) if function is not None else marker
