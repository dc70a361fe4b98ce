"""The agent cache (seed §11; docs/behaviour.md §8): LRU order and size, session-id replacement, idle TTL
on a fake clock, the memory-pressure sweep against a cgroup tree written in tmp_path, and the
`memory_high_mb` setting."""

from __future__ import annotations

import platform

import pytest
from pipeline_helpers import SecondsClock, statm

from hermes_core.pipeline.agent_cache import AgentCache
from hermes_core.pipeline.memory_budget import LIMIT_TTL_S, MemoryProbe, malloc_trim, parse_memory_high_mb
from hermes_core.settings import GatewayConfig

MiB = 1024 * 1024


class Trim:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return True


def msgs(*texts):
    return [{"role": "user", "content": t, "timestamp": "2026-03-01T12:00:00+00:00"} for t in texts]


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def cgroup_v2(tmp_path, *, high="max", maximum="max", anon=None, rss_kib=None):
    """A process in cgroup v2 `/system.slice/hermes.service` with the given limits."""
    write(tmp_path / "proc/self/cgroup", "0::/system.slice/hermes.service\n")
    unit = tmp_path / "cg/system.slice/hermes.service"
    write(tmp_path / "cg/cgroup.controllers", "cpu memory pids\n")
    write(unit / "memory.high", high + "\n")
    write(unit / "memory.max", maximum + "\n")
    if anon is not None:
        write(unit / "memory.stat", f"anon {anon}\nfile 4096\nkernel 8192\n")
    if rss_kib is not None:
        write(tmp_path / "proc/self/statm", statm(rss_kib))
    write(tmp_path / "proc/meminfo", "MemTotal:       2048000 kB\nMemFree:  10 kB\n")
    return MemoryProbe(tmp_path / "cg", tmp_path / "proc/self", tmp_path / "proc/meminfo")


# ---- LRU -------------------------------------------------------------------------------------

def test_lru_order_hit_moves_to_end_and_max_size_evicts_least_recent():
    cache = AgentCache(max_size=3, clock=SecondsClock())
    for key in ("a", "b", "c"):
        cache.put(key, "sid-" + key, msgs(key))
    assert cache.get("a", "sid-a").messages == msgs("a")  # hit → most recent
    assert cache.keys() == ["b", "c", "a"]
    cache.put("d", "sid-d", msgs("d"))
    assert cache.keys() == ["c", "a", "d"]
    assert len(cache) == 3
    assert cache.stats.hits == 1 and cache.stats.misses == 4
    assert cache.stats.evictions == {"capacity": 1}


def test_capacity_eviction_passes_over_an_entry_mid_turn():
    cache = AgentCache(max_size=2, clock=SecondsClock())
    a = cache.put("a", "sid-a", msgs("a"))
    cache.put("b", "sid-b", msgs("b"))
    cache.begin_turn(a)
    cache.get("b", "sid-b")  # a is now the least recently used, but busy
    cache.put("c", "sid-c", msgs("c"))
    assert cache.keys() == ["a", "c"]
    cache.end_turn(a)
    assert not a.mid_turn


def test_capacity_eviction_takes_the_least_recently_used_idle_entries_in_lru_order():
    cache = AgentCache(max_size=3, clock=SecondsClock())
    a, b, c = (cache.put(k, "sid-" + k, msgs(k)) for k in "abc")
    cache.begin_turn(a)
    cache.begin_turn(b)
    cache.end_turn(b)  # b idle again, and now more recent than c
    cache.put("d", "sid-d", msgs("d"))
    assert cache.keys() == ["a", "b", "d"]  # c, the least recently used idle entry, went
    cache.put("e", "sid-e", msgs("e"))
    assert cache.keys() == ["a", "d", "e"]
    cache.append(cache.peek("d"), {"role": "user", "content": "not saved"}, persisted=False)
    cache.put("f", "sid-f", msgs("f"))
    assert cache.keys() == ["a", "d", "f"]  # d is not persisted: e went instead
    cache.end_turn(a)
    cache.put("g", "sid-g", msgs("g"))
    assert cache.keys() == ["d", "a", "g"]  # a's turn end was a use; d is still unsaved: f went
    assert cache.stats.evictions == {"capacity": 4}


def test_default_sizes_come_from_the_config():
    cache = AgentCache.from_config(GatewayConfig())
    assert (cache.max_size, cache.idle_ttl_secs, cache.memory_high_mb, cache.max_evictions_per_pass,
            cache.protect_recent) == (128, 3600.0, "auto", 16, 8)


async def test_acquire_loads_once_and_a_new_session_id_replaces_the_entry():
    loads = []

    async def load(session_id):
        loads.append(session_id)
        return msgs("from " + session_id)

    cache = AgentCache(clock=SecondsClock())
    first = await cache.acquire("k", "s1", load)
    again = await cache.acquire("k", "s1", load)
    assert first is again and loads == ["s1"]
    assert first.transcript_persistence_caught_up() and first.last_flushed_idx == 1
    # /new, /reset, a switch or recovery gave the key another session id.
    replaced = await cache.acquire("k", "s2", load)
    assert loads == ["s1", "s2"]
    assert replaced.session_id == "s2" and replaced.messages == msgs("from s2")
    assert cache.stats.evictions == {"replaced": 1}


def test_invalidate_and_invalidate_session():
    cache = AgentCache(clock=SecondsClock())
    cache.put("a", "s1", msgs("x"))
    cache.put("b", "s2", msgs("y"))
    assert cache.invalidate("a") is True
    assert cache.invalidate("a") is False
    assert cache.invalidate_session("s2") == 1
    assert len(cache) == 0
    assert cache.stats.evictions == {"invalidated": 2}


def test_one_session_id_has_one_live_copy():
    """Two keys switched onto one session: caching or writing through one drops the other."""
    cache = AgentCache(clock=SecondsClock())
    cache.put("k1", "shared", msgs("one"))
    k2 = cache.put("k2", "shared", msgs("one"))
    assert cache.keys() == ["k2"]
    cache.put("k1", "shared", msgs("one"))
    assert cache.keys() == ["k1"]
    cache.append(k2, msgs("two")[0], persisted=True)  # a detached entry wrote to the session
    assert cache.keys() == []
    assert cache.stats.evictions == {"superseded": 3}


def test_append_tracks_persistence():
    cache = AgentCache(clock=SecondsClock())
    entry = cache.put("k", "s", msgs("a"))
    cache.append(entry, msgs("b")[0], persisted=False)
    assert (entry.last_flushed_idx, len(entry.messages)) == (1, 2)
    assert not entry.transcript_persistence_caught_up()
    cache.mark_persisted(entry)
    assert entry.last_flushed_idx == 2 and entry.transcript_persistence_caught_up()


# ---- idle TTL --------------------------------------------------------------------------------

def test_idle_ttl_on_a_fake_clock_spares_mid_turn_and_unsaved_entries():
    clock = SecondsClock(0.0)
    cache = AgentCache(idle_ttl_secs=3600, clock=clock)
    cache.put("a", "sa", msgs("a"))
    clock.t = 100.0
    busy = cache.put("busy", "sb", msgs("b"))
    cache.begin_turn(busy)
    clock.t = 200.0
    unsaved = cache.put("unsaved", "su", msgs("u"))
    cache.append(unsaved, msgs("v")[0], persisted=False)
    clock.t = 1000.0
    cache.put("fresh", "sf", msgs("f"))
    clock.t = 3599.0
    assert cache.evict_idle() == []
    clock.t = 3600.0  # "a" has been idle exactly the TTL
    assert cache.evict_idle() == ["a"]
    clock.t = 4600.0  # everything is past the TTL now
    assert cache.evict_idle() == ["fresh"]
    assert cache.keys() == ["busy", "unsaved"]
    cache.end_turn(busy)  # the turn ends at 4600: idle from now
    cache.mark_persisted(unsaved)
    assert cache.evict_idle() == ["unsaved"]
    clock.t = 4600.0 + 3600
    assert cache.evict_idle() == ["busy"]
    assert cache.stats.evictions == {"idle": 4}


def test_idle_ttl_zero_disables_it():
    clock = SecondsClock(0.0)
    cache = AgentCache(idle_ttl_secs=0, clock=clock)
    cache.put("a", "sa", msgs("a"))
    clock.t = 10 ** 9
    assert cache.evict_idle() == []
    assert cache.keys() == ["a"]


# ---- memory budget ---------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    ("auto", "auto"), ("AUTO", "auto"), ("off", None), ("Off", None), (0, None), ("0", None),
    (512, 512), ("512", 512), (" 64 ", 64)])
def test_memory_high_mb_parsing(value, expected):
    assert parse_memory_high_mb(value) == expected


@pytest.mark.parametrize("value", [-1, "-5", "lots", "1.5", True, 2.5, None])
def test_memory_high_mb_rejects_bad_values_naming_the_key(value):
    with pytest.raises(ValueError, match="agent.agent_cache.memory_high_mb"):
        parse_memory_high_mb(value)


def test_cache_rejects_a_bad_budget_and_size():
    with pytest.raises(ValueError, match="memory_high_mb"):
        AgentCache(memory_high_mb="lots")
    with pytest.raises(ValueError, match="max_size"):
        AgentCache(max_size=0)


def test_auto_budget_is_cgroup_v2_memory_high_and_signal_is_its_anon(tmp_path):
    probe = cgroup_v2(tmp_path, high="104857600", maximum="209715200", anon=150 * MiB, rss_kib=4096)
    reading = probe.read("auto")
    assert reading.budget_bytes == 104857600
    assert reading.budget_source == "cgroup v2 memory.high"
    assert reading.used_bytes == 150 * MiB  # the unit's anon, not the process's 4 MiB
    assert reading.over_budget is True


def test_auto_budget_falls_back_to_memory_max_then_to_a_parent_cgroup(tmp_path):
    probe = cgroup_v2(tmp_path, high="max", maximum="209715200", anon=100 * MiB)
    probe.limit_ttl_s = 0  # the limit files change below: walk the hierarchy on every read
    reading = probe.read("auto")
    assert (reading.budget_bytes, reading.budget_source, reading.over_budget) == (
        209715200, "cgroup v2 memory.max", False)
    # No limit on the unit itself: the slice above it has one.
    write(tmp_path / "cg/system.slice/hermes.service/memory.max", "max\n")
    write(tmp_path / "cg/system.slice/memory.high", "314572800\n")
    write(tmp_path / "cg/system.slice/memory.stat", "anon 400000000\n")
    reading = probe.read("auto")
    assert (reading.budget_bytes, reading.used_bytes) == (314572800, 400000000)


def test_a_found_limit_is_reused_for_limit_ttl_s_while_the_signal_is_read_every_time(tmp_path):
    probe = cgroup_v2(tmp_path, high="104857600", anon=50 * MiB)
    now = [1000.0]
    probe._clock = lambda: now[0]
    assert probe.read("auto").budget_bytes == 104857600
    write(tmp_path / "cg/system.slice/hermes.service/memory.high", "209715200\n")
    write(tmp_path / "cg/system.slice/hermes.service/memory.stat", f"anon {200 * MiB}\n")
    now[0] += LIMIT_TTL_S - 1
    reading = probe.read("auto")
    assert (reading.budget_bytes, reading.used_bytes) == (104857600, 200 * MiB)  # old limit, new signal
    now[0] += 1
    assert probe.read("auto").budget_bytes == 209715200  # 30 s later the hierarchy is read again
    assert LIMIT_TTL_S == 30.0


def test_auto_budget_from_cgroup_v1(tmp_path):
    write(tmp_path / "proc/self/cgroup", "9:name=systemd:/\n4:memory:/docker/abc\n0::/\n")
    write(tmp_path / "cg/memory/docker/abc/memory.limit_in_bytes", "268435456\n")
    write(tmp_path / "cg/memory/docker/abc/memory.stat", "rss 1000\ntotal_rss 300000000\ncache 5\n")
    probe = MemoryProbe(tmp_path / "cg", tmp_path / "proc/self", tmp_path / "proc/meminfo")
    reading = probe.read("auto")
    assert (reading.budget_bytes, reading.used_bytes, reading.budget_source) == (
        268435456, 300000000, "cgroup v1 memory.limit_in_bytes")


def test_without_a_limit_auto_is_total_ram_and_the_signal_is_the_process_rss_anon(tmp_path):
    write(tmp_path / "proc/self/cgroup", "4:memory:/\n0::/\n")
    write(tmp_path / "cg/memory/memory.limit_in_bytes", "9223372036854771712\n")  # v1 "unlimited"
    write(tmp_path / "proc/self/statm", statm(4096))
    write(tmp_path / "proc/meminfo", "MemTotal:       2048 kB\n")
    probe = MemoryProbe(tmp_path / "cg", tmp_path / "proc/self", tmp_path / "proc/meminfo")
    reading = probe.read("auto")
    assert (reading.budget_bytes, reading.used_bytes, reading.budget_source, reading.signal_source) == (
        2097152, 4194304, "total RAM", "RssAnon")
    assert reading.over_budget is True
    # A fixed number overrides the budget; the signal stays the process's own.
    fixed = probe.read(512)
    assert (fixed.budget_bytes, fixed.used_bytes, fixed.over_budget) == (536870912, 4194304, False)
    assert probe.read("off") is None and probe.read(0) is None



@pytest.mark.skipif(platform.system() != "Linux", reason="reads the real /proc")
def test_the_process_signal_is_the_kernels_rss_anon():
    # statm resident − shared pages is what /proc/self/status reports as RssAnon (module docstring)
    import re

    probe = MemoryProbe()
    pairs = []
    for _ in range(3):  # the two files are read one after the other: retry if memory moved between
        status = (probe.proc_self / "status").read_text()
        pairs.append((probe.process_anon(), int(re.search(r"^RssAnon:\s+(\d+) kB$", status, re.M).group(1)) * 1024))
        if pairs[-1][0] == pairs[-1][1]:
            break
    assert pairs[-1][0] == pairs[-1][1], pairs


@pytest.mark.parametrize("content", ["", "12 x 3\n", "7\n"])
def test_an_unreadable_statm_gives_no_process_signal(tmp_path, content):
    write(tmp_path / "proc/self/statm", content)
    assert MemoryProbe(tmp_path / "cg", tmp_path / "proc/self", tmp_path / "proc/meminfo").process_anon() is None

# ---- pressure sweep --------------------------------------------------------------------------

def _six_entries(cache):
    """k0 … k5, least recently used first: k0 has a turn running since before the others were
    used, k1's last message is not persisted yet. Filled with the budget off (inserts check the
    budget too), then the cache's setting is restored."""
    setting, cache.memory_high_mb = cache.memory_high_mb, None
    k0 = cache.put("k0", "s0", msgs("m0"))
    cache.begin_turn(k0)  # mid-turn: never released
    k1 = cache.put("k1", "s1", msgs("m1"))
    cache.append(k1, msgs("unsaved")[0], persisted=False)  # not persisted: never released
    for i in range(2, 6):
        cache.put(f"k{i}", f"s{i}", msgs(f"m{i}"))
    assert cache.keys() == ["k0", "k1", "k2", "k3", "k4", "k5"]
    cache.memory_high_mb = setting


def test_pressure_sweep_respects_protect_recent_max_evictions_mid_turn_and_unsaved(tmp_path):
    trim = Trim()
    probe = cgroup_v2(tmp_path, high=str(100 * MiB), anon=150 * MiB)
    cache = AgentCache(protect_recent=2, max_evictions_per_pass=2, clock=SecondsClock(), probe=probe, trim=trim)
    _six_entries(cache)
    report = cache.sweep_under_pressure()
    assert report.evicted == ("k2", "k3")
    assert report.skipped == ("k0", "k1")
    assert report.trimmed is True and trim.calls == 1
    assert cache.keys() == ["k0", "k1", "k4", "k5"]
    # Still over budget: k4 and k5 are the 2 most recent, k0/k1 busy or unsaved → nothing goes.
    report = cache.sweep_under_pressure()
    assert report.evicted == () and report.skipped == ("k0", "k1")
    assert trim.calls == 1  # no eviction, no trim
    assert cache.stats.evictions == {"pressure": 2}


def test_pressure_sweep_does_nothing_under_budget_or_when_disabled(tmp_path):
    trim = Trim()
    probe = cgroup_v2(tmp_path, high=str(100 * MiB), anon=99 * MiB)
    under = AgentCache(protect_recent=0, clock=SecondsClock(), probe=probe, trim=trim)
    _six_entries(under)
    report = under.sweep_under_pressure()
    assert report.reading.used_bytes == 99 * MiB and report.evicted == ()
    write(tmp_path / "cg/system.slice/hermes.service/memory.stat", f"anon {200 * MiB}\n")
    for setting in ("off", 0):
        disabled = AgentCache(memory_high_mb=setting, protect_recent=0, clock=SecondsClock(), probe=probe, trim=trim)
        _six_entries(disabled)
        assert disabled.sweep_under_pressure().reading is None
        assert len(disabled) == 6
    assert trim.calls == 0
    # The same cache with pressure on: the 4 idle, saved entries go (16 per pass allowed).
    on = AgentCache(protect_recent=0, clock=SecondsClock(), probe=probe, trim=trim)
    _six_entries(on)
    assert on.sweep_under_pressure().evicted == ("k2", "k3", "k4", "k5")


def test_malloc_trim_runs_on_glibc_and_is_skipped_elsewhere():
    assert malloc_trim() is (platform.libc_ver()[0] == "glibc")


class EntriesProbe:
    """Anonymous memory = 10 MiB per cached entry, against a fixed budget (a cache whose every
    entry holds a large tool output)."""

    def __init__(self, budget_mib):
        self.budget_mib = budget_mib
        self.cache = None
        self.reads = 0

    def read(self, setting):
        from hermes_core.pipeline.memory_budget import MemoryReading

        self.reads += 1
        return MemoryReading(self.budget_mib * MiB, len(self.cache) * 10 * MiB, "test budget", "test signal")


def test_relieve_pressure_repeats_capped_passes_until_under_budget():
    probe = EntriesProbe(budget_mib=100)  # room for 10 entries
    cache = AgentCache(max_size=1000, protect_recent=2, max_evictions_per_pass=16, clock=SecondsClock(),
                       probe=probe, trim=Trim(), memory_high_mb=100)
    probe.cache = cache
    cache.memory_high_mb = None  # fill without the insert check
    for i in range(40):
        cache.put(f"k{i}", f"s{i}", msgs(f"m{i}"))
    cache.memory_high_mb = 100
    report = cache.relieve_pressure()
    # 40 → 24 → 8 entries: two passes of 16 (the per-pass cap), then under budget.
    assert len(report.evicted) == 32 and report.evicted[:2] == ("k0", "k1")
    assert cache.keys() == [f"k{i}" for i in range(32, 40)]
    assert cache.stats.evictions == {"pressure": 32}


def test_relief_keeps_memory_2_percent_under_the_budget():
    """docs/behaviour.md §8: the repeated passes (ticks, inserts) start 2 % under the budget, so
    what is allocated between two readings does not cross it; the seed's single pass
    (`sweep_under_pressure`) acts only over the budget."""
    from hermes_core.pipeline.agent_cache import RELIEF_HEADROOM

    assert RELIEF_HEADROOM == 0.02
    probe = EntriesProbe(budget_mib=100)
    cache = AgentCache(max_size=1000, protect_recent=0, max_evictions_per_pass=1, clock=SecondsClock(),
                       probe=probe, trim=Trim(), memory_high_mb="off")
    probe.cache = cache
    for i in range(9):
        cache.put(f"k{i}", f"s{i}", msgs(f"m{i}"))
    cache.memory_high_mb = 100
    assert cache.relieve_pressure().evicted == ()  # 90 MiB: a tenth free
    cache.memory_high_mb = None
    cache.put("k9", "s9", msgs("m9"))
    cache.memory_high_mb = 100
    assert cache.sweep_under_pressure().evicted == ()  # 100 MiB: at the budget, not over it
    assert cache.relieve_pressure().evicted == ("k0",)  # but within 2 % of it
    assert len(cache) == 9


def _over_budget(entries, caplog, *, protect_recent=0):
    """A cache of `entries` entries of 10 MiB each (`EntriesProbe`) against a 100 MiB budget, one
    eviction per pass, filled with the budget off; its log read from INFO up. Returns it and its
    clock."""
    clock = SecondsClock()
    probe = EntriesProbe(budget_mib=100)
    cache = AgentCache(max_size=1000, protect_recent=protect_recent, max_evictions_per_pass=1, clock=clock,
                       probe=probe, trim=Trim(), memory_high_mb="off")
    probe.cache = cache
    for i in range(entries):
        cache.put(f"k{i}", f"s{i}", msgs(f"m{i}"))
    cache.memory_high_mb = 100
    caplog.set_level("INFO", logger="hermes_core.pipeline.agent_cache")
    return cache, clock


def _pressure_lines(caplog):
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.getMessage().startswith("memory pressure")]


def test_pressure_passes_are_told_once_then_summed_into_one_line_a_minute(caplog):
    """docs/behaviour.md §8: near the budget every insert may run a pass; the first eviction is
    told at once, the next ones are summed into one line once 60 s have passed since the last
    line (at a pass, or at a check that finds memory back under the line); the counter has every
    eviction."""
    from hermes_core.pipeline.agent_cache import PRESSURE_LOG_INTERVAL_S

    assert PRESSURE_LOG_INTERVAL_S == 60.0
    cache, clock = _over_budget(14, caplog)
    for t in (0, 30, 59):  # 140, 130, 120 MiB: one entry per pass
        clock.t = t
        assert len(cache.sweep_under_pressure().evicted) == 1
    assert _pressure_lines(caplog) == [
        ("WARNING", "memory pressure: 140 MiB anonymous (test signal) over the 100 MiB budget (test budget); "
                    "released 1 cached transcript(s), skipped 0 busy or unsaved")]
    clock.t = 60  # 110 MiB: the passes at 30, 59 and 60 s in one line
    assert cache.sweep_under_pressure().evicted == ("k3",)
    assert _pressure_lines(caplog)[1:] == [
        ("WARNING", "memory pressure: 110 MiB anonymous (test signal) over the 100 MiB budget (test budget); "
                    "released 3 cached transcript(s) since the last such line 60 s ago, skipped 0 busy or unsaved")]
    clock.t = 70  # 100 MiB: relief releases k4 (within 2 %), then 90 MiB ends it; nothing told yet
    assert cache.relieve_pressure().evicted == ("k4",)
    assert len(_pressure_lines(caplog)) == 2
    clock.t = 125  # a check under the line, 65 s after the last line: the pass at 70 s is told
    assert cache.sweep_under_pressure().evicted == ()
    assert _pressure_lines(caplog)[2:] == [
        ("WARNING", "memory pressure: 100 MiB anonymous (test signal) still within 2% of the 100 MiB budget "
                    "(test budget); released 1 cached transcript(s) since the last such line 65 s ago, "
                    "skipped 0 busy or unsaved")]
    clock.t = 500
    cache.sweep_under_pressure()
    cache.log_pending_pressure()
    assert len(_pressure_lines(caplog)) == 3  # nothing pending, nothing told
    assert cache.stats.evictions == {"pressure": 5}


def test_a_first_eviction_is_told_at_once_after_a_pass_that_released_nothing_and_a_stop_tells_the_rest(caplog):
    """docs/behaviour.md §8: a pass that could release nothing (every entry protected) is told at
    info level; an eviction after it is told at once, not a minute later; what is summed when the
    gateway stops is told then (`log_pending_pressure`, called by `GatewayApp.stop`)."""
    cache, clock = _over_budget(12, caplog, protect_recent=12)
    assert cache.sweep_under_pressure().evicted == ()  # 120 MiB, all 12 protected
    clock.t = 5
    cache.protect_recent = 10
    assert cache.sweep_under_pressure().evicted == ("k0",)  # 5 s later, told at once
    clock.t = 6
    assert cache.sweep_under_pressure().evicted == ("k1",)  # summed
    cache.log_pending_pressure()  # the stop
    assert _pressure_lines(caplog) == [
        ("INFO", "memory pressure: 120 MiB anonymous (test signal) over the 100 MiB budget (test budget); "
                 "released 0 cached transcript(s), skipped 0 busy or unsaved"),
        ("WARNING", "memory pressure: 120 MiB anonymous (test signal) over the 100 MiB budget (test budget); "
                    "released 1 cached transcript(s) since the last such line 5 s ago, skipped 0 busy or unsaved"),
        ("WARNING", "memory pressure: 110 MiB anonymous (test signal) over the 100 MiB budget (test budget); "
                    "released 1 cached transcript(s) since the last such line 1 s ago, skipped 0 busy or unsaved")]


def test_an_insert_over_budget_releases_others_but_never_the_new_entry():
    clock = SecondsClock()
    probe = EntriesProbe(budget_mib=35)  # room for 3 entries (30 MiB, more than 2 % under)
    cache = AgentCache(max_size=1000, protect_recent=0, max_evictions_per_pass=1, clock=clock, probe=probe,
                       trim=Trim(), memory_high_mb=35)
    probe.cache = cache
    for i in range(3):
        cache.put(f"k{i}", f"s{i}", msgs(f"m{i}"))
        clock.t += 1
    assert cache.keys() == ["k0", "k1", "k2"]
    cache.put("k3", "s3", msgs("m3"))  # 40 MiB: over → one pass of one: the LRU entry, never k3
    assert cache.keys() == ["k1", "k2", "k3"]
    cache.put("k4", "s4", msgs("m4"))  # every insert checks
    assert cache.keys() == ["k2", "k3", "k4"]


def test_inserts_far_under_budget_read_memory_at_most_once_per_10_ms_and_near_it_every_time():
    """docs/behaviour.md §8: a check that found a tenth of the budget or more free spares the
    inserts of the next 10 ms their reading; nearer the budget, or after a check that released
    entries, the next insert checks again."""
    from hermes_core.pipeline.agent_cache import INSERT_PROBE_HEADROOM, INSERT_PROBE_INTERVAL_S

    assert (INSERT_PROBE_INTERVAL_S, INSERT_PROBE_HEADROOM) == (0.01, 0.1)
    clock = SecondsClock()
    probe = EntriesProbe(budget_mib=42)  # room for 4 entries; 37.8 MiB and less is a tenth free
    cache = AgentCache(max_size=1000, protect_recent=0, max_evictions_per_pass=1, clock=clock, probe=probe,
                       trim=Trim(), memory_high_mb=42)
    probe.cache = cache
    cache.put("k0", "s0", msgs("m0"))  # 10 MiB
    cache.put("k1", "s1", msgs("m1"))  # the same instant: no reading
    assert probe.reads == 1
    clock.t += 0.004
    cache.put("k2", "s2", msgs("m2"))
    assert probe.reads == 1
    clock.t += 0.007  # past 10 ms after the reading
    cache.put("k3", "s3", msgs("m3"))  # 40 MiB: near the budget, nothing released
    assert probe.reads == 2 and cache.keys() == ["k0", "k1", "k2", "k3"]
    cache.put("k4", "s4", msgs("m4"))  # the same instant, but near the budget: it checks
    assert probe.reads > 2 and cache.keys() == ["k1", "k2", "k3", "k4"]
    reads = probe.reads
    cache.put("k5", "s5", msgs("m5"))  # the last check released an entry: it checks
    assert probe.reads > reads and cache.keys() == ["k2", "k3", "k4", "k5"]
