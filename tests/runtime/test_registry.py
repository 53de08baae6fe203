"""dbo.registry: per-thread lookup, no stale adoption on ident reuse, scopes that always clean up."""

from __future__ import annotations

import sys
import threading

import pytest

import dbo
from dbo import registry
from dbo.registry import current_ubatch_id, register, registered_ubatch_id, unregister, use_ubatch
from tests.support.timing import slack

JOIN_S = slack(5.0)


def run_thread(fn, name: str) -> threading.Thread:
    t = threading.Thread(target=fn, name=name, daemon=True)
    t.start()
    t.join(JOIN_S)
    assert not t.is_alive(), f"{name} did not finish"
    return t


def test_no_step_means_ubatch_zero() -> None:
    assert registry.snapshot() == []
    assert current_ubatch_id() == 0
    assert registered_ubatch_id() is None
    assert not registry.dbo_enabled() and not registry.step_active()


def test_stale_entry_is_never_adopted_by_a_later_thread() -> None:
    """Threads run one after another so CPython reuses their idents; a dead thread's id never leaks."""
    seen: list[dict] = []
    dead_idents: set[int] = set()
    try:
        for round_ in range(20):
            ubatch = 1 + round_ % 3

            def leaver() -> None:
                register(ubatch)  # exits without unregistering: its entry goes stale

            dead = run_thread(leaver, f"leaver-{round_}")
            dead_idents.add(dead.ident)
            observed: dict = {}

            def newcomer() -> None:
                observed["ident"] = threading.get_ident()
                observed["registered"] = registered_ubatch_id()
                observed["enabled"] = registry.dbo_enabled()
                try:
                    observed["id"] = current_ubatch_id()
                except dbo.UnregisteredThreadError as exc:
                    observed["id"] = exc

            run_thread(newcomer, f"newcomer-{round_}")
            observed["stale_id"] = ubatch
            seen.append(observed)
    finally:
        stale = registry.prune_dead()
    assert len(stale) == 20, "every leaver must have left exactly one stale entry"
    for obs in seen:
        assert obs["registered"] is None and obs["enabled"] is False
        assert obs["id"] == 0, f"a new thread adopted or tripped over a stale entry: {obs}"
    reused = sum(obs["ident"] in dead_idents for obs in seen)
    if sys.platform.startswith("linux"):  # glibc reuses thread idents: make sure reuse was really covered
        assert reused > 0, "no ident was reused, so this run did not exercise ident reuse"


def test_stale_entries_do_not_make_a_step_active() -> None:
    run_thread(lambda: register(4), "leaver")
    try:
        assert not registry.step_active()
        assert current_ubatch_id() == 0
        snap = registry.snapshot()
        assert len(snap) == 1 and not snap[0].alive and "stale" in snap[0].describe()
    finally:
        assert len(registry.prune_dead()) == 1
    assert registry.snapshot() == []


def test_unregistered_thread_during_active_step_raises() -> None:
    inside, release = threading.Event(), threading.Event()

    def ubatch1() -> None:
        with use_ubatch(1):
            inside.set()
            release.wait(JOIN_S)

    t = threading.Thread(target=ubatch1, name="ubatch-1", daemon=True)
    t.start()
    try:
        assert inside.wait(JOIN_S)
        assert registry.step_active()
        with pytest.raises(dbo.UnregisteredThreadError, match="not a ubatch thread") as info:
            current_ubatch_id()
        assert isinstance(info.value, LookupError) and isinstance(info.value, dbo.errors.RegistryError)
        with use_ubatch(0):
            assert current_ubatch_id() == 0
    finally:
        release.set()
        t.join(JOIN_S)
    assert not t.is_alive()


def test_use_ubatch_cleans_up_on_error() -> None:
    with pytest.raises(ZeroDivisionError):
        with use_ubatch(3):
            assert current_ubatch_id() == 3 and registry.dbo_enabled()
            1 / 0
    assert registered_ubatch_id() is None
    assert registry.snapshot() == []

    errors: list[BaseException] = []

    def failing() -> None:
        try:
            with use_ubatch(1):
                raise KeyError("boom")
        except KeyError as exc:
            errors.append(exc)
        errors.append(registered_ubatch_id())  # type: ignore[arg-type]

    run_thread(failing, "failing-ubatch")
    assert isinstance(errors[0], KeyError) and errors[1] is None
    assert registry.snapshot() == []


def test_use_ubatch_tolerates_body_unregistering() -> None:
    with use_ubatch(2):
        assert unregister() == 2
    assert registry.snapshot() == []


def test_register_twice_raises() -> None:
    register(0)
    try:
        with pytest.raises(dbo.errors.RegistryError, match="already registered"):
            register(1)
        with pytest.raises(dbo.errors.RegistryError):
            with use_ubatch(1):
                pass
        assert registered_ubatch_id() == 0, "a refused registration must not change the existing one"
    finally:
        unregister()
    with pytest.raises(dbo.errors.RegistryError, match="not registered"):
        unregister()
    assert registry.snapshot() == []


@pytest.mark.parametrize("bad, exc", [(True, TypeError), ("1", TypeError), (1.0, TypeError), (-1, ValueError)])
def test_bad_ubatch_ids(bad, exc) -> None:
    with pytest.raises(exc):
        register(bad)
    assert registry.snapshot() == []
