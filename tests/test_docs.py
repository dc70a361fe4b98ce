"""The project's docs stay true to the code.

* Every hookspec of `hermes_core/hookspecs.py` has its own section in docs/hooks.md, and that
  section's example is working code: it loads, follows the hook rules, and does what the page says
  (one behaviour test per example below, with the values the page promises).
* Every setting of `GatewayConfig` and of each in-repository plugin's settings model has a row in
  docs/configuration.md (a plugin's rows in its own `[platforms.<id>]` section).
* Every citation of a doc section in hermes_core/, plugins/, tests/ and the README (a doc file name
  followed by `§N`, `§N.M` or a trap id such as `TG-T6`) names an existing file and an existing
  numbered heading (or trap) in it.
"""

from __future__ import annotations

import inspect
import re
import sys
import types
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pydantic import BaseModel

import hermes_core.hookspecs as hookspecs
from hermes_core import AdapterSpec, RecoveryPlan, SessionEntry, SessionSource
from hermes_core.app import GatewayApp
from hermes_core.model import MessageEvent, SessionContext
from hermes_core.pipeline.context import build_session_context, build_session_context_prompt
from hermes_core.plugin_system.manager import create_plugin_manager, key_policy, session_key_for, session_shared_for
from hermes_core.plugin_system.policy import check_plugin_policies
from hermes_core.plugin_system.redaction import redact_text
from hermes_core.plugin_system.settings import PluginSettingsError, validate_plugin_settings
from hermes_core.scheduler import Watcher
from hermes_core.plugin_system.loader import PLUGINS_GROUP, list_entry_points
from hermes_core.sdk import PlatformSettings, RetryAfter, SettingsSpec
from hermes_core.settings import GatewayConfig
from hermes_core.testing import CapturingAdapter
from hermes_core.types import KeyPolicy, OutboundDelivery

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HOOKS_MD = DOCS / "hooks.md"


# ---- the hook reference --------------------------------------------------------------------

def hookspec_names() -> list[str]:
    """Names of the functions in hookspecs.py marked as hook specifications."""
    return sorted(name for name, obj in vars(hookspecs).items()
                  if inspect.isfunction(obj) and hasattr(obj, "hermes_core_spec"))


def hook_sections() -> dict[str, str]:
    """`{hook name: its section text}` from the "### `hermes_…`" headings of hooks.md."""
    parts = re.split(r"^### `(hermes_\w+)`[ \t]*$", HOOKS_MD.read_text(encoding="utf-8"), flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def example_source(name: str) -> str:
    match = re.search(r"^```python\n(.*?)^```", hook_sections()[name], flags=re.M | re.S)
    assert match, f"the section of {name} in hooks.md has no ```python example"
    return match.group(1)


def load_example(name: str) -> types.ModuleType:
    """The example of hook `name`, executed as a module of its own."""
    module = types.ModuleType(f"hooks_md_{name}")
    sys.modules[module.__name__] = module  # pydantic resolves a model's annotations through it
    exec(compile(example_source(name), f"hooks.md example of {name}", "exec"), module.__dict__)
    return module


def pm_with(*names: str):
    """A builtins-only plugin manager with the examples of `names` registered (as the loader
    would: an example using `@override` registers as a deployment override)."""
    pm, _report = create_plugin_manager(None)
    modules = []
    for name in names:
        module = load_example(name)
        pm.register(module, name=module.__name__)
        modules.append(module)
    return pm, (modules[0] if len(modules) == 1 else modules)


def test_hookspecs_are_found():
    # The list the tests below iterate over is the real one (a change in pluggy's marker
    # attribute would otherwise make every documentation check pass vacuously).
    assert len(hookspec_names()) >= 18
    assert "hermes_session_key" in hookspec_names()


def test_every_hookspec_has_a_section_in_hooks_md():
    assert sorted(set(hookspec_names()) - set(hook_sections())) == []


def test_hooks_md_documents_no_hook_that_does_not_exist():
    assert sorted(set(hook_sections()) - set(hookspec_names())) == []


@pytest.mark.parametrize("name", hookspec_names())
def test_hook_example_loads_and_follows_the_hook_rules(name):
    source = example_source(name)
    pm, module = pm_with(name)
    deployment = "@override" in source
    assert name in {caller.name for caller in pm.get_hookcallers(module)}
    assert check_plugin_policies(pm, module.__name__, deployment=deployment) == ([], [])


# ---- each example does what the page says ------------------------------------------------

def test_configure_example_remembers_the_home(hermes_config):
    pm, module = pm_with("hermes_configure")
    pm.hook.hermes_configure.call_historic(kwargs={"config": hermes_config})
    assert module.STATE == {"home": hermes_config.home, "per_user_groups": True}


def test_settings_schema_example_validates_the_acme_table(tmp_path):
    pm, module = pm_with("hermes_settings_schema")
    config = GatewayConfig(home=tmp_path, platforms={"acme": {"enabled": True, "base_url": "http://127.0.0.1:9"}})
    models = validate_plugin_settings(pm, config, installed_adapters=[])
    assert models["acme"] == module.AcmeSettings(enabled=True, base_url="http://127.0.0.1:9", poll_interval_s=2.0)
    # The common platform keys come with PlatformSettings; TOML integers are ids all the same.
    shared = GatewayConfig(home=tmp_path, platforms={"acme": {"allowed_users": [12345]}})
    assert validate_plugin_settings(pm, shared, installed_adapters=[])["acme"].allowed_users == ["12345"]
    bad = GatewayConfig(home=tmp_path, platforms={"acme": {"enabled": True, "colour": "red"}})
    with pytest.raises(PluginSettingsError) as err:
        validate_plugin_settings(pm, bad, installed_adapters=[])
    assert str(err.value) == "invalid settings in [platforms.acme]: colour: unknown key"


def test_canonical_identity_example_keeps_the_original_chat_key(hermes_config):
    pm, _ = pm_with("hermes_canonical_identity")
    assert pm.hook.hermes_canonical_identity(platform="acme", kind="chat", value="-1009876543210") == "-4012345678"
    assert pm.hook.hermes_canonical_identity(platform="telegram", kind="chat",
                                             value="-1009876543210") == "-1009876543210"
    source = SessionSource("acme", "-1009876543210", chat_type="group", user_id="7")
    assert session_key_for(pm, key_policy(pm, hermes_config), source) == "agent:main:acme:group:-4012345678:7"


def test_session_key_example_keys_threads_without_the_room(hermes_config):
    pm, _ = pm_with("hermes_session_key")
    in_thread = SessionSource("acme", "R1", chat_type="group", user_id="u1", thread_id="T9")
    assert session_key_for(pm, key_policy(pm, hermes_config), in_thread) == "agent:main:acme:group:T9"
    assert session_key_for(pm, KeyPolicy(thread_sessions_per_user=True), in_thread) == "agent:main:acme:group:T9:u1"
    in_room = replace(in_thread, thread_id=None)
    assert session_key_for(pm, key_policy(pm, hermes_config), in_room) == "agent:main:acme:group:R1:u1"
    # Sharing is unchanged, so the builtin predicate still agrees with the key.
    assert session_shared_for(pm, key_policy(pm, hermes_config), in_thread) is True


def test_session_shared_example_shares_announcement_channels(hermes_config):
    pm, _ = pm_with("hermes_session_shared")
    policy = key_policy(pm, hermes_config)
    channel = SessionSource("acme", "C1", chat_type="channel", user_id="u1")
    group = SessionSource("acme", "G1", chat_type="group", user_id="u1")
    assert (session_key_for(pm, policy, channel), session_shared_for(pm, policy, channel)) == (
        "agent:main:acme:channel:C1", True)
    assert (session_key_for(pm, policy, group), session_shared_for(pm, policy, group)) == (
        "agent:main:acme:group:G1:u1", False)


def test_platform_notes_example_comes_before_the_connected_platforms(hermes_config):
    pm, _ = pm_with("hermes_platform_notes")
    lines = ["Platform: Acme. Messages are limited to 2000 characters; long replies are split.",
             "The agent cannot read earlier messages of the room; ask the user to quote them."]
    assert pm.hook.hermes_platform_notes(context=SessionContext(source=SessionSource("acme", "c1"))) == [lines]
    assert pm.hook.hermes_platform_notes(context=SessionContext(source=SessionSource("telegram", "c1"))) == []
    source = SessionSource("acme", "c1", user_id="u1")
    prompt = build_session_context_prompt(build_session_context(source, hermes_config, pm=pm), pm=pm)
    assert prompt.splitlines()[4:10] == ['**Source:** Acme ("DM with u1")', '**User ID:** "u1"', ""] + lines + [
        "**Connected Platforms:** local (files on this machine)"]


def test_failure_notice_example_words_acme_failures(hermes_config):
    from hermes_core.pipeline.notices import failure_notice

    pm, _ = pm_with("hermes_failure_notice")
    acme, other = SessionSource("acme", "c1", user_id="u1"), SessionSource("telegram", "1", user_id="1")
    error = RuntimeError("chat-completions request to http://10.0.0.1:8000/v1 failed")
    assert failure_notice(pm, hermes_config, "agent_failed", acme, error) == \
        "Acme assistant is unavailable right now. Your message was kept; try again soon."
    assert failure_notice(pm, hermes_config, "agent_failed", other, error) == \
        "Sorry, I could not answer this message. Please try again later."
    assert failure_notice(pm, hermes_config, "internal_error", acme, error) == \
        "Sorry, this message could not be processed. Please try again later."


def test_chat_instructions_example_answers_for_its_topic_only():
    pm, _ = pm_with("hermes_chat_instructions")
    topic = SessionSource("telegram", "-100123", chat_type="group", thread_id="7")
    assert pm.hook.hermes_chat_instructions(source=topic) == "In this topic, answer in French and keep it short."
    assert pm.hook.hermes_chat_instructions(source=SessionSource("telegram", "-100123", chat_type="group")) is None


def test_redaction_rules_example_tags_tickets_in_its_scopes():
    pm, _ = pm_with("hermes_redaction_rules")
    assert redact_text(pm, "acme", "see ACME-123456 now", "log") == "see [ticket] now"
    assert redact_text(pm, "acme", "see ACME-123456 now", "llm_context") == "see [ticket] now"
    assert redact_text(pm, "acme", "see ACME-123456 now", "index") == "see ACME-123456 now"


def test_pseudonymize_example_uses_a_keyed_hash(monkeypatch, hermes_pm):
    monkeypatch.delenv("ACME_PSEUDONYM_KEY", raising=False)
    pm, _ = pm_with("hermes_pseudonymize")
    assert pm.hook.hermes_pseudonymize(platform="telegram", kind="user", value="111222333") == "user_12a9fea3246c"
    assert pm.hook.hermes_pseudonymize(platform="telegram", kind="chat", value="-1001234567890") == "8fee80efd657"
    # The builtin it out-ranks: a plain sha256 prefix.
    assert hermes_pm.hook.hermes_pseudonymize(platform="telegram", kind="user",
                                              value="111222333") == "user_da5511d2baa8"


def test_plan_delivery_example_drops_bold_markers_for_acme_only():
    pm, _ = pm_with("hermes_plan_delivery")

    def plan_for(platform: str):
        spec = AdapterSpec(name=platform, label=platform.title(), max_message_length=2000)
        delivery = OutboundDelivery(session_key=f"agent:main:{platform}:dm:c1", session_id=None,
                                    target=SessionSource(platform, "c1"), text="**Done** in 3 steps",
                                    spec=spec, reply_to_message_id="m1")
        return pm.hook.hermes_plan_delivery(delivery=delivery)

    acme = plan_for("acme")
    assert (acme.chunks, acme.reply_to_message_id, acme.veto) == (["Done in 3 steps"], "m1", False)
    assert plan_for("other").chunks == ["**Done** in 3 steps"]


def test_recovery_plan_example_gives_up_on_acme_shutdowns():
    pm, _ = pm_with("hermes_recovery_plan")
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def entry(platform: str) -> SessionEntry:
        return SessionEntry(session_key=f"agent:main:{platform}:dm:c1", session_id="20260101_000000_0123abcd",
                            created_at=now, updated_at=now, platform=platform)

    assert pm.hook.hermes_recovery_plan(session=entry("acme"), failure="shutdown_timeout") == RecoveryPlan(
        action="give_up", reason="acme: no auto-continue after a shutdown")
    assert pm.hook.hermes_recovery_plan(session=entry("telegram"), failure="shutdown_timeout") == RecoveryPlan(
        action="resume", reason="shutdown_timeout")


async def test_housekeeping_example_counts_sessions_once_a_day(hermes_config, temp_store, fake_clock,
                                                               plugin_registration, hermes_pm):
    module = load_example("hermes_housekeeping")
    name = plugin_registration(module, name="acme-housekeeping")
    for chat in ("c1", "c2"):
        await temp_store.get_or_create_session(SessionSource("acme", chat))
    watcher = Watcher(hermes_pm, hermes_config, temp_store, clock=fake_clock)
    assert dict(await watcher.tick())[name] == 2
    fake_clock.advance(3600)
    assert dict(await watcher.tick())[name] is None  # not due again yet
    fake_clock.advance(23 * 3600)
    assert dict(await watcher.tick())[name] == 2


async def test_lifecycle_and_delivery_examples_in_a_running_gateway(make_app):
    names = ("hermes_startup", "hermes_after_deliver", "hermes_session_finalized", "hermes_session_reset",
             "hermes_shutdown")
    modules = {name: load_example(name) for name in names}
    app = make_app(plugins=list(modules.values()))
    await app.start()
    assert modules["hermes_startup"].STARTED == [["fake"]]
    adapter = app.adapters["fake"]
    source = SessionSource("fake", "c1", user_id="u1")
    await adapter.emit(MessageEvent(source=source, text="hello", message_id="m1"))
    await app.runner.join()
    assert adapter.texts() == ["echo: hello"]
    assert modules["hermes_after_deliver"].SENT == {"messages": 1}
    old = await app.store.get_entry("agent:main:fake:dm:c1")
    await adapter.emit(MessageEvent(source=source, text="/new", message_id="m2"))
    await app.runner.join()
    new = await app.store.get_entry("agent:main:fake:dm:c1")
    assert modules["hermes_session_finalized"].FINALIZED == [(old.session_id, 3)]  # echo: 1 in + 2 out
    assert modules["hermes_session_reset"].RESETS == [("agent:main:fake:dm:c1", "new")]
    assert adapter.texts()[-1] == f"Started a new session. Session id: {new.session_id}"
    assert modules["hermes_after_deliver"].SENT == {"messages": 2}
    await app.stop()
    assert modules["hermes_shutdown"].STOPPED == [1]


async def test_delivery_error_example_hears_a_failed_send(make_app):
    module = load_example("hermes_on_delivery_error")
    app = make_app(plugins=[module])
    await app.start()
    adapter = app.adapters["fake"]
    adapter.fail_with = [RetryAfter(120)]  # above the 60 s cap: the send gives up at once
    await adapter.emit(MessageEvent(source=SessionSource("fake", "c1", user_id="u1"), text="hello",
                                    message_id="m1"))
    await app.runner.join()
    assert module.FAILURES[0] == ("fake", "SendError")


async def test_recovery_examples_at_the_next_start(make_app, fake_clock):
    acme = CapturingAdapter.with_spec(name="acme", label="Acme")
    first = make_app(adapters=[acme()])
    await first.start()
    source = SessionSource("acme", "c1", user_id="u1")
    await first.adapters["acme"].emit(MessageEvent(source=source, text="hello", message_id="m1"))
    await first.runner.join()
    assert await first.store.mark_resume_pending("agent:main:acme:dm:c1", "shutdown_timeout") is True
    await first.stop()

    pm, (plan_module, observer) = pm_with("hermes_recovery_plan", "hermes_on_session_recovered")
    second = GatewayApp(first.config, pm=pm, adapters=[acme()], watcher=False, clock=fake_clock)
    await second.start()
    try:
        await second.runner.join()
        assert observer.RECOVERED == [("agent:main:acme:dm:c1", "give_up")]
        assert second.adapters["acme"].texts() == []  # given up: no auto-continue turn
        entry = await second.store.get_entry("agent:main:acme:dm:c1")
        assert entry.resume_pending is False
    finally:
        await second.stop()


# ---- every setting is documented -----------------------------------------------------------

CONFIGURATION_MD = DOCS / "configuration.md"
ROW_KEY = re.compile(r"^\| `([a-z_]+)` \|", re.M)


def setting_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Dotted keys of every leaf setting of `model` (nested models are tables, not settings)."""
    keys = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += setting_keys(annotation, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def documented_rows(text: str) -> set[str]:
    return set(ROW_KEY.findall(text))


def test_every_core_setting_has_a_row_in_configuration_md():
    rows = documented_rows(CONFIGURATION_MD.read_text(encoding="utf-8"))
    keys = [key for key in setting_keys(GatewayConfig) if key != "platforms"]  # its own section
    assert "agent.agent_cache.max_size" in keys
    assert sorted(key for key in keys if key.rsplit(".", 1)[-1] not in rows) == []
    assert sorted(set(PlatformSettings.model_fields) - rows) == []


def repository_plugin_settings() -> list[tuple[str, type[BaseModel]]]:
    """`(section, model)` of every settings model the in-repository plugins declare."""
    in_repo = {path.name for path in (ROOT / "plugins").iterdir() if (path / "pyproject.toml").is_file()}
    found = []
    for entry_point in list_entry_points(PLUGINS_GROUP):
        if entry_point.name not in in_repo:
            continue
        specs = entry_point.load().hermes_settings_schema() or ()
        specs = [specs] if isinstance(specs, SettingsSpec) else specs
        found += [(spec.section, spec.model) for spec in specs]
    return sorted(found, key=lambda item: item[0])


def test_every_plugin_setting_has_a_row_in_its_configuration_md_section():
    text = CONFIGURATION_MD.read_text(encoding="utf-8")
    sections = {match.group(1): body for match, body in
                zip(re.finditer(r"^## .*`\[platforms\.(\w+)\]`.*$", text, re.M),
                    re.split(r"^## .*`\[platforms\.\w+\]`.*$", text, flags=re.M)[1:])}
    plugins = repository_plugin_settings()
    assert "telegram" in [section for section, _model in plugins]
    missing = []
    for section, model in plugins:
        rows = documented_rows(sections.get(section, "").split("\n## ", 1)[0])
        missing += [f"[platforms.{section}] {name}" for name in model.model_fields
                    if name not in PlatformSettings.model_fields and name not in rows]
    assert missing == []


# ---- section citations ---------------------------------------------------------------------

CITATION = re.compile(r"docs/(\w+)\.md((?:(?:\s*,\s*|\s+)(?:§\d+(?:\.\d+)*|[A-Z]+-T\d+)\b)*)")
SECTION_REF = re.compile(r"§(\d+(?:\.\d+)*)")
TRAP_REF = re.compile(r"\b([A-Z]+-T\d+)\b")
HEADING = re.compile(r"^#{2,4} (\d+(?:\.\d+)*)\.?\s", re.M)
TRAP = re.compile(r"^- \*\*([A-Z]+-T\d+)\b", re.M)
SCANNED = ("hermes_core", "plugins", "tests")
SUFFIXES = (".py", ".md", ".toml", ".tmpl", ".sql", ".sh")
SKIPPED_PARTS = {".venv", "__pycache__", "build", "dist"}


def scanned_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if (path.is_file() and path.name.endswith(SUFFIXES) and not SKIPPED_PARTS & set(path.parts)
                    and not any(part.endswith(".egg-info") for part in path.parts)):
                files.append(path)
    return files


def citations() -> list[tuple[str, str, str]]:
    """`(where, doc file name, section number or trap id)` for every citation found."""
    found = []
    for path in scanned_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in CITATION.finditer(text):
            where = f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
            refs = SECTION_REF.findall(match.group(2)) + TRAP_REF.findall(match.group(2))
            found.append((where, match.group(1), ""))
            found.extend((where, match.group(1), ref) for ref in refs)
    return found


def anchors(doc: Path) -> set[str]:
    text = doc.read_text(encoding="utf-8")
    return set(HEADING.findall(text)) | set(TRAP.findall(text))


def test_citations_are_found():
    # The scan sees the code's real citations (a broken pattern would pass every check below).
    refs = {(doc, ref) for _where, doc, ref in citations()}
    assert {("behaviour", "6"), ("architecture", "3"), ("adapters", "0.4"), ("adapters", "TG-T6")} <= refs


def test_every_cited_doc_exists():
    missing = sorted({f"{where}: docs/{doc}.md" for where, doc, _ref in citations()
                      if not (DOCS / f"{doc}.md").is_file()})
    assert missing == []


def test_every_cited_section_exists():
    known = {doc.stem: anchors(doc) for doc in DOCS.glob("*.md")}
    dangling = sorted(f"{where}: docs/{doc}.md {'§' + ref if ref[0].isdigit() else ref}"
                      for where, doc, ref in citations() if ref and ref not in known.get(doc, set()))
    assert dangling == []


def test_numbered_docs_keep_their_numbering():
    """behaviour.md follows the decision record's §0–§13 and architecture.md the conventions'
    §1–§10, in order (code cites those numbers)."""
    def top_level(doc: str) -> list[str]:
        return re.findall(r"^## (\d+)\.? ", (DOCS / doc).read_text(encoding="utf-8"), flags=re.M)

    assert top_level("behaviour.md") == [str(n) for n in range(0, 14)]
    assert top_level("architecture.md") == [str(n) for n in range(1, 11)]
    assert top_level("adapters.md") == [str(n) for n in range(0, 7)]
