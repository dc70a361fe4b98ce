"""GatewayApp: start-up and shutdown of one gateway (seed §7; docs/architecture.md §6).

Start: HERMES_HOME created and checked writable → plugins loaded → store opened (key function =
the `hermes_session_key` hook) → unclean-shutdown check (`.clean_shutdown` consumed once; without
it, marked turns are promoted by `store.recover_interrupted_turns`: no saved reply →
`resume_pending`, saved reply → delivery ledger; with it, leftover turn markers are discarded)
→ agent → enabled adapters resolved (entry points), each given its data directory
`HERMES_HOME/<platform>/` (0700), and a warning for each network platform that allows nobody
(docs/behaviour.md §9) → access gate and runner created paused, with the sessions' background
work (`app.background`, a `sdk.SessionWork`; the store's `has_active_processes_fn`) → start-up
recovery queued on the runner (`recovery.restore_at_startup`: stuck loops, ledger sweep,
auto-continue, intake replay) → adapters started → runner released → watcher started →
`hermes_startup` broadcast.
Stop: adapters stopped (no new input) → runner drained (`[scheduler] drain_timeout_s`; turns still
running are marked `resume_pending`, reason `shutdown_timeout`, and counted in
`restart_counts.json`; queued messages stay in the durable intake) → `.clean_shutdown` written
right after the drain (docs/behaviour.md §6) → watcher stopped → `hermes_shutdown` broadcast →
background work stopped → agent closed → store closed.

On a store shared by several replicas (`store.leased`, docs/architecture.md §7) the unclean-shutdown
promotion and the start-up recovery are skipped: `pipeline.replicas.ReplicaCoordinator` recovers
each session when this replica takes it over, and admits messages only for sessions it holds.

Every start-up failure raises `StartupError` whose text is one line naming what is wrong
(config file — through `load_gateway_config` —, HERMES_HOME, state.db, home lock, plugin, adapter).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from .agents import create_agent
from .model.timeutil import Clock, utc_now
from .ops.gc_tuning import restore_gc, tune_gc
from .ops.metrics import NULL_METRICS, create_metrics
from .ops.status import StatusPublisher
from .pipeline.access import AccessGate, refusing_platforms
from .pipeline.deps import PipelineDeps
from .pipeline.notices import INTERNAL_ERROR, failure_notice
from .recovery import RecoveryReport, load_restart_counts, restore_at_startup, save_restart_counts
from .pipeline.replicas import ReplicaCoordinator
from .pipeline.runner import GatewayRunner
from .plugin_system.dispatch import call_broadcast
from .plugin_system.manager import (attach_identity_aliases, create_plugin_manager, key_policy, session_key_for,
                                    session_shared_for)
from .plugin_system.redaction import install_log_redaction
from .scheduler import Watcher
from .sdk.background import SessionWork
from .sdk.errors import describe_failure
from .dirs import ensure_private_dir, not_a_file, why_home_unusable
from .settings import ConfigError, load_config
from .store.files import CLEAN_SHUTDOWN, says_clean, write_atomic
from .store.home_lock import HomeLockedError, home_is_locked
from .types import INGRESS_SINGLE_RECEIVER

log = logging.getLogger(__name__)


class StartupError(Exception):
    """The gateway cannot start; `str(err)` is one line saying what is wrong and where."""


def one_line(exc: BaseException) -> str:
    """`exc`'s message on one line (the CLI prints exactly this); in words when it has none."""
    text = " ".join(str(exc).split())
    return text or describe_failure(exc)


def load_gateway_config(**overrides: Any) -> Any:
    """Load the GatewayConfig for a start-up (defaults < TOML file < env < `overrides`).

    Raises:
        StartupError: the config file is not a regular file, cannot be read, is not valid
            (UTF-8) TOML, or holds a bad value; the line names the file and the key.
    """
    try:
        return load_config(**overrides)  # checks the file itself (missing, not a file, bad TOML)
    except ConfigError as exc:
        raise StartupError(one_line(exc)) from None
    except Exception as exc:  # any other loader failure is still one line, blaming no file
        raise StartupError(f"the config cannot be loaded: {describe_failure(exc)}") from None


def check_home(home: Path) -> None:
    """Create `home` if needed and prove it is writable by creating and removing a file.

    Raises:
        StartupError: it cannot be created, is not a directory, or is not writable.
    """
    problem = why_home_unusable(home)
    if problem is not None:
        raise StartupError(problem)


class GatewayApp:
    """One gateway: plugin manager, store, agent, adapters, runner and watcher.

    Args:
        config: a GatewayConfig (use `settings.load_config` to get one-line config errors).
        pm: a plugin manager to use instead of building one from `config`.
        adapters: adapter instances to run instead of the enabled platforms' entry points
            (`{name: adapter}` or an iterable of adapters; `chat` passes the local adapter).
        agent: the Agent to use instead of `agents.create_agent(config)`.
        watcher: start the housekeeping watcher (default True).
        clock: aware-UTC clock for the store, the watcher and message timestamps.
        on_restart: called when an admin sends `/restart` (`hermes-gateway run` passes what
            SIGUSR1 does: a planned restart, docs/behaviour.md §6); None: `/restart` is refused.
    """

    def __init__(self, config: Any, *, pm: Any = None, adapters: Any = None, agent: Any = None,
                 watcher: bool = True, clock: Clock = utc_now, on_restart: Callable[[], None] | None = None) -> None:
        self.config = config
        self.on_restart = on_restart
        self.pm = pm
        self.report = None
        self.agent = agent
        self.clock = clock
        self.store: Any = None
        self.runner: GatewayRunner | None = None
        self.background: SessionWork | None = None
        self.watcher: Watcher | None = None
        self.platform_settings: dict[str, Any] = {}
        # `{platform: PlatformSettings}`: the common keys of every `[platforms.<id>]` table.
        self.common_platform_settings: dict[str, Any] = {}
        self._given_adapters = adapters
        self._use_watcher = watcher
        self.adapters: dict[str, Any] = {}
        self.started = False
        self.unclean_start = False
        self.recovered_keys: list[str] = []
        self.recovery: RecoveryReport | None = None
        self.restart_counts: dict[str, int] = {}
        self._crash_interrupted: dict[str, float] = {}
        # This start consumed the marker of a clean stop and no job has run since (`_abort`).
        self._clean_marker_owed = False
        # What is in `.clean_shutdown`'s place (a directory), said once at the start; None: a file or nothing.
        self._clean_marker_blocked: str | None = None
        self._undo_log_redaction = None
        self._gc_before: tuple[int, int, int] | None = None
        self._stopped = False
        # Operators' view (docs/operations.md §2, §3): metrics, readiness, the status file.
        self.metrics = NULL_METRICS
        self.ready = False
        self.started_at = None
        self.started_monotonic = time.monotonic()
        self._status: StatusPublisher | None = None
        self._health = None
        self.coordinator: ReplicaCoordinator | None = None

    @property
    def home(self) -> Path:
        return Path(self.config.home)

    def _failure_notice(self, source: Any, error: BaseException) -> str:
        """The notice an adapter sends when the gateway failed on a message no one redelivers
        (`BaseAdapter.failure_notice`): the hook's or the configured `[core] error_notice`."""
        return failure_notice(self.pm, self.config, INTERNAL_ERROR, source, error)

    async def _edit_queued(self, source: Any, message_id: str, text: str | None) -> bool:
        """An adapter's report of an edit (`text`) or a deletion (None) of a message
        (`BaseAdapter.edit_queued`, docs/behaviour.md §5): applied to the message while it is
        still queued; False when it is not."""
        if text is None:
            return await self.runner.withdraw_queued(source, message_id)
        return await self.runner.edit_queued(source, message_id, text)

    # ---- start ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start everything (module docstring). On failure, whatever was started is stopped again.

        Raises:
            StartupError: one line naming the problem.
        """
        try:
            await self._start()
        except StartupError:
            await self._abort()
            raise
        except Exception as exc:
            await self._abort()
            raise StartupError(self._describe_failure(exc)) from exc
        self.started = True

    def _describe_failure(self, exc: Exception) -> str:
        from .plugin_system.adapters import AdapterLoadError
        from .plugin_system.loader import PluginLoadError
        from .store import HomeLockedError, StoreError

        # These already carry a one-line message naming the file, key, plugin or home.
        if isinstance(exc, (StoreError, HomeLockedError, ConfigError, PluginLoadError, AdapterLoadError)):
            return one_line(exc)
        if isinstance(exc, OSError):
            where = f"{exc.filename}: " if exc.filename else ""
            return f"cannot start: {where}{exc.strerror or exc}"
        return f"cannot start: {describe_failure(exc)}"

    async def _start(self) -> None:
        from .store import SessionStore  # the store layer, imported where it is used

        check_home(self.home)
        self.started_at, self.started_monotonic = self.clock(), time.monotonic()
        self._start_health_server()
        # Process-wide, undone at stop (docs/behaviour.md §12 "Garbage collection").
        self._gc_before = tune_gc(self.config.core.gc_young_threshold)
        if self.pm is None:
            self.pm, self.report = create_plugin_manager(self.config)
        if self.config.redaction.enabled:
            # Opt-in like the LLM-context pseudonyms (docs/behaviour.md §7): log lines pass the `log` rules.
            self._undo_log_redaction = install_log_redaction(
                self.pm, logging.getLogger(), platforms=self.config.enabled_platforms())
        policy = key_policy(self.pm, self.config)
        # Every "which session / whose session" question goes through the hooks (docs/behaviour.md §0).
        self.store = SessionStore(self.config.sessions_dir, self.config,
                                  key_fn=lambda source: session_key_for(self.pm, policy, source),
                                  shared_fn=lambda source: session_shared_for(self.pm, policy, source),
                                  canonical_fn=policy.canonicalize,
                                  clock=self.clock)
        await self.store.open()  # announces degraded mode itself when state.db cannot be opened
        # Keys, pseudonyms and owner scoping fold ids by the stored aliases (docs/behaviour.md §4).
        attach_identity_aliases(self.pm, self.store.resolve_identity)
        await self._check_clean_shutdown()
        if self.agent is None:
            self.agent = create_agent(self.config)
        self._build_adapters()
        for name in refusing_platforms(self.adapters, self.common_platform_settings):
            log.warning("%s: no allowed_users/allow_all configured: every message will be refused", name)
        access = AccessGate(self.pm, self.common_platform_settings, self.store.canonical_id)
        deps = PipelineDeps(config=self.config, store=self.store, pm=self.pm, agent=self.agent,
                            adapters=self.adapters, clock=self.clock, on_turn_completed=self._turn_completed,
                            access=access, request_restart=self.on_restart, metrics=self.metrics)
        # Paused: recovered work is queued before new input can arrive, and nothing is sent
        # before the adapters have started (seed §7 "queue inbound messages while restoring").
        self.runner = GatewayRunner(deps, paused=True)
        # Background work and wake-ups bound to a session (docs/behaviour.md §10): stopped by
        # /stop, /new, /reset; a key with running work is never pruned.
        self.background = SessionWork(self.store, self.runner.post_internal)
        deps.background = self.background
        self.store.has_active_processes_fn = self.background.active
        if self.store.leased:
            # This home's previous gateway, provably dead, leaves no lease to wait out.
            await self.store.take_back_own_leases()
            # A shared store: sessions are recovered by whichever replica takes them over
            # (their holder's lease ran out), never all at once by a starting replica; a
            # single-receiver platform receives only on the replica holding its ingress lease.
            receivers = {name: a for name, a in self.adapters.items() if a.spec.ingress == INGRESS_SINGLE_RECEIVER}
            self.coordinator = ReplicaCoordinator(self.store, self.runner, self.config.store.poll_interval_s,
                                                  receivers)
        else:
            self.restart_counts = load_restart_counts(self.home)
            self.recovery = await restore_at_startup(
                store=self.store, runner=self.runner, pm=self.pm, config=self.config, home=self.home,
                now_ts=self.clock().timestamp(), counts=self.restart_counts,
                crash_interrupted=self._crash_interrupted)
            self.metrics.recoveries(self.recovery.counts())
        for name, adapter in self.adapters.items():
            adapter.bind(self.runner.handle, record_aliases=self.store.record_aliases,
                         report_delivery=self.runner.settle_sent_message, failure_notice=self._failure_notice,
                         edit_queued=self._edit_queued)
            if self.coordinator is not None and name in self.coordinator.receivers:
                continue  # started by the coordinator while this replica holds its ingress lease
            await adapter.start()
            log.info("platform %s started", name)
        self._clean_marker_owed = False  # jobs may run from here on
        self.runner.release()
        if self.coordinator is not None:
            self.coordinator.start()
        if self._use_watcher:
            self.watcher = Watcher(self.pm, self.config, self.store, clock=self.clock, app=self)
            self.watcher.start()
        await call_broadcast(self.pm, "hermes_startup", timeout=self.config.plugins.setup_timeout_s, app=self)
        self.ready = True
        self._status = StatusPublisher(self, self.config.status.interval_s)
        self._status.start()

    def _start_health_server(self) -> None:
        """`[metrics] enabled`: the metrics registry and the `/metrics`, `/healthz`, `/readyz`
        endpoints, up before anything else starts so `/readyz` answers 503 while starting.

        Raises:
            StartupError: prometheus-client is missing, or the address cannot be bound.
        """
        try:
            self.metrics = create_metrics(self.config)
        except RuntimeError as exc:
            raise StartupError(str(exc)) from None
        if not self.metrics.enabled:
            return
        from .ops.http import HealthServer

        settings = self.config.metrics
        server = HealthServer(self.metrics.registry, lambda: self.ready, settings.listen, settings.port)
        try:
            server.start()
        except OSError as exc:
            # The endpoints come up before the store takes the home lock: a second gateway on
            # this home finds its own port taken. Name the gateway holding the home, not the port.
            try:
                holder = home_is_locked(self.home)
            except OSError:
                holder = None
            if holder is not None:
                raise StartupError(str(HomeLockedError(self.home, holder))) from None
            raise StartupError(f"[metrics] endpoints cannot listen on {settings.listen}:{settings.port}: "
                               f"{exc.strerror or exc}") from None
        self._health = server

    async def _check_clean_shutdown(self) -> None:
        clean = self._consume_clean_marker()
        self._clean_marker_owed = clean
        if self.store.leased:
            return  # each session's takeover runs its own crash recovery (docs/architecture.md §7)
        if clean:
            # Seed §7: after a clean exit the drain already handled every running turn (resumed
            # ones are flagged); markers left over are orphans and are discarded.
            for marker in await self.store.turn_markers():
                await self.store.end_turn(marker["session_key"])
            return
        has_any = getattr(self.store, "has_any_sessions", None)
        if has_any is not None and not await has_any():
            return  # first start of this home: nothing can have been interrupted
        if getattr(self.store, "adopted_sessions_json", False):
            # state.db held no session until this start took an older gateway's sessions.json
            # (docs/behaviour.md §3): no run of this gateway wrote it, none was interrupted.
            return
        self.unclean_start = True
        max_age = max(3600, 2 * self.config.agent.gateway_timeout)
        started = {m["session_key"]: float(m["started_ts"]) for m in await self.store.turn_markers()}
        self.recovered_keys = list(await self.store.recover_interrupted_turns(max_age) or [])
        self._crash_interrupted = {key: started.get(key, self.clock().timestamp()) for key in self.recovered_keys}
        # With the marker blocked the start cannot tell how the last run ended: its one line
        # (`_consume_clean_marker`) said so, and this one goes to the log only.
        log.log(logging.INFO if self._clean_marker_blocked else logging.WARNING,
                "the previous run did not shut down cleanly; %d interrupted turn(s) marked for "
                "resumption", len(self.recovered_keys))

    def _consume_clean_marker(self) -> bool:
        """True when the last run shut down cleanly (docs/behaviour.md §6): `.clean_shutdown`
        exists and is empty, as `stop()` and upstream write it (a timestamp, as older builds
        wrote, counts too). The marker is consumed once. One that cannot be removed makes this
        start unclean (fail closed: crash recovery runs) and is overwritten with `invalid`, which
        every later start also reads as unclean. A directory (anything but a file) in its place
        can be neither read, removed nor written: said once, in one line naming it and the fix,
        and the start is unclean."""
        marker = self.home / CLEAN_SHUTDOWN
        self._clean_marker_blocked = not_a_file(marker)
        if self._clean_marker_blocked is not None:
            log.error("%s; until then no clean stop can be recorded and every start runs crash recovery",
                      self._clean_marker_blocked)
            return False
        try:
            valid = says_clean(marker.read_text())
        except FileNotFoundError:
            return False
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("%s cannot be read (%s); treating the last shutdown as unclean", marker, exc)
            valid = False
        try:
            marker.unlink()
        except OSError as exc:
            log.warning("%s cannot be removed (%s); treating the last shutdown as unclean", marker, exc)
            valid = False
            try:
                marker.write_text("invalid\n")
            except OSError:
                log.error("%s can be neither removed nor rewritten; a later crash may look clean", marker)
        return valid

    def _build_adapters(self) -> None:
        from .plugin_system.settings import common_platform_settings, warn_unprovided_platforms

        given = self._given_adapters
        if given is not None:
            items = given.items() if isinstance(given, Mapping) else ((a.spec.name, a) for a in given)
            self.adapters.update(items)
            # The other platforms do not run here (`chat`), but a misspelt table is still named.
            warn_unprovided_platforms(self.pm, self.config, running=self.adapters, report=self.report)
        else:
            from .plugin_system.adapters import resolve_adapter_classes
            from .plugin_system.settings import validate_plugin_settings

            classes = resolve_adapter_classes(self.config.enabled_platforms(), self.report, config=self.config)
            self.platform_settings = validate_plugin_settings(self.pm, self.config, adapter_classes=classes,
                                                              report=self.report)
            for name, cls in classes.items():
                self.adapters[name] = cls(self.platform_settings.get(name))
        self.common_platform_settings = common_platform_settings(self.config, self.platform_settings)
        for name, adapter in self.adapters.items():
            if getattr(adapter, "data_dir", None) is None:
                adapter.data_dir = self._adapter_dir(name)

    def _adapter_dir(self, platform: str) -> Path:
        """`HERMES_HOME/<platform>/`, created 0700: the adapter's own place for files.

        Raises:
            StartupError: the platform name is not a plain directory name, or the directory
                cannot be created.
        """
        if platform in ("", ".", "..", "sessions") or "/" in platform or "\\" in platform or "\0" in platform:
            raise StartupError(f"platform name {platform!r} cannot be used as a directory under HERMES_HOME")
        path = self.home / platform
        try:
            return ensure_private_dir(path)
        except FileExistsError:
            raise StartupError(f"{path} exists and is not a directory (platform {platform} keeps its files there)") from None
        except OSError as exc:
            raise StartupError(f"{path} cannot be created for platform {platform}: {exc.strerror or exc}") from None

    # ---- stop ----------------------------------------------------------------------------------

    async def stop(self, *, restart: bool = False) -> None:
        """Stop everything in order (module docstring). Idempotent; never raises.

        Args:
            restart: a planned restart (SIGUSR1, `hermes-gateway restart`): turns the drain cuts
                off are marked `restart_timeout` instead of `shutdown_timeout` (docs/behaviour.md §6).
        """
        if self._stopped:
            return
        self._stopped = True
        self.ready = False  # /readyz says so while draining, and so does status.json:
        if self._status is not None:
            self._status.stopping()
        unmarked = False
        reason = "restart_timeout" if restart else "shutdown_timeout"
        for name, adapter in list(self.adapters.items()):
            try:
                await adapter.stop()
            except Exception:
                log.exception("platform %s failed to stop", name)
        if self.coordinator is not None:
            await self.coordinator.stop()
        if self.runner is not None:
            timeout = self.config.scheduler.drain_timeout_s
            log.info("stopping: %d turn(s) running, the drain waits up to %g s for them",
                     len(self.runner.busy_sessions()), timeout)
            interrupted = await self.runner.drain(timeout)
            if interrupted:
                # A warning: those users' replies come only after the next start.
                log.warning("stop: the drain timed out after %g s; turn(s) cut off and marked for resumption "
                            "(%s): %s", timeout, reason, ", ".join(interrupted))
            else:
                log.info("stop: drained cleanly, no turn cut off")
            for key in interrupted:
                try:
                    await self.store.mark_resume_pending(key, reason)
                except Exception as exc:
                    # Then the shutdown must not look clean: the next start promotes the turn
                    # markers instead of discarding them, so the turn is still resumed once.
                    unmarked = True
                    log.error("could not mark %s for resumption (%s); the next start recovers it as "
                              "after a crash", key, " ".join(str(exc).split()))
            self.runner.deps.agent_cache.log_pending_pressure()
            if self.started:
                # docs/behaviour.md §6: {key: old + 1} for the sessions the drain interrupted, others dropped.
                save_restart_counts(self.home, {k: self.restart_counts.get(k, 0) + 1 for k in interrupted})
        if self.started and not unmarked:
            self._write_clean_shutdown()
        await self._teardown()

    def _turn_completed(self, session_key: str) -> None:
        """A completed turn ends its session's stuck-loop count (docs/behaviour.md §6)."""
        if self.restart_counts.pop(session_key, None) is not None:
            save_restart_counts(self.home, self.restart_counts)

    def _write_clean_shutdown(self) -> None:
        if self._clean_marker_blocked is not None:
            return  # nothing can be written over it: said at the start
        try:
            write_atomic(self.home / CLEAN_SHUTDOWN, "")  # empty, as upstream writes it
        except OSError as exc:
            log.error("could not write %s: %s", CLEAN_SHUTDOWN, exc)

    async def _teardown(self) -> None:
        self.ready = False
        if self._gc_before is not None:  # first: a later step that raises must not leave it tuned
            restore_gc(self._gc_before)
            self._gc_before = None
        if self._status is not None:
            await self._status.stop()  # the last snapshot, while the store is still open
            self._status = None
        if self._health is not None:
            await asyncio.to_thread(self._health.stop)
            self._health = None
        if self.watcher is not None:
            await self.watcher.stop()
        if self.pm is not None and self.started:
            await call_broadcast(self.pm, "hermes_shutdown", timeout=self.config.plugins.hook_timeout_s, app=self)
        if self.background is not None:
            await self.background.aclose()
        if self.agent is not None:
            try:
                await self.agent.aclose()
            except Exception:
                log.exception("agent failed to close")
        if self.store is not None:
            if self.pm is not None:
                attach_identity_aliases(self.pm, None)
            try:
                await self.store.close()
            except Exception:
                log.exception("store failed to close")
        if self._undo_log_redaction is not None:
            self._undo_log_redaction()
            self._undo_log_redaction = None

    async def _abort(self) -> None:
        self._stopped = True
        if self.coordinator is not None:
            await self.coordinator.stop()
        for adapter in self.adapters.values():
            try:
                await adapter.stop()
            except Exception:
                log.exception("platform failed to stop")
        if self._clean_marker_owed:
            # The last run stopped cleanly and this start ran nothing before it failed (a bad
            # platform table, an unreachable platform): put the marker back, or the next start
            # and `status` would report a crash that never happened (docs/behaviour.md §6).
            self._write_clean_shutdown()
        await self._teardown()

    async def __aenter__(self) -> "GatewayApp":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()
