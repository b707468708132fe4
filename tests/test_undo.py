"""disable(): identical originals back, pytree registrations restored, foreign wrappers respected."""

import torch

import autopatch
import torch.utils._pytree as pytree
from transformers import cache_utils

import scope_target
from autopatch import registry, state
from autopatch.agent import Agent
from autopatch.spec import PatchSpec

ROUTE = PatchSpec("test.double", "torch", "scope_target", "double", "route", "scope_target:triple")


def _snapshot():
    import torch.export._trace as trace

    return (
        torch.export.export,
        torch.export.draft_export,
        trace._export,
        torch.onnx.export,
        scope_target.double,
        pytree.SUPPORTED_NODES.get(cache_utils.DynamicCache),
        dict(pytree.SUPPORTED_NODES),
    )


def test_disable_restores_the_identical_objects_after_cycles(agent):
    before = _snapshot()
    own = Agent(registry.EXPORT_ENTRY_POINTS, list(registry.PATCHES) + [ROUTE])
    for _ in range(3):
        own.enable("all")
        assert torch.export.export is not before[0] and cache_utils.DynamicCache in pytree.SUPPORTED_NODES
        assert scope_target.double is not before[4]
        own.disable()
        after = _snapshot()
        assert all(a is b for a, b in zip(after[:5], before[:5]))
        assert after[5] is before[5] and after[6] == before[6]
    assert all(r.state == state.DISABLED and r.undo is None for r in own.records.values())


def test_a_wrapper_set_on_top_is_left_in_place_and_named(agent):
    own = Agent(registry.EXPORT_ENTRY_POINTS, [ROUTE])
    own.enable("all")
    ours = scope_target.double

    def someone_elses(x):
        return ours(x)

    scope_target.double = someone_elses
    try:
        own.disable()
        record = own.records["test.double"]
        assert scope_target.double is someone_elses
        assert record.state == state.DISABLED
        assert record.detail == (
            "could not restore scope_target.double: test_undo.test_a_wrapper_set_on_top_is_left_in_place_and_named"
            ".<locals>.someone_elses was set on top of autopatch's wrapper; the wrapper stays but is inert"
        )
        # Inert: even inside an export the stuck router now calls the original.
        x = torch.arange(3.0)
        program = torch.export.export(scope_target.UsesDouble(), (x,))
        assert torch.equal(program.module()(x), x * 2 + 1)
    finally:
        scope_target.double = ours.__autopatch_original__


def test_transformers_own_registration_is_replaced_and_restored(agent):
    """transformers' register_dynamic_cache_export_support rebuilds sliding layers as full ones: we replace
    it while active and put it back on disable."""
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    assert cache_utils.DynamicCache not in pytree.SUPPORTED_NODES
    register_dynamic_cache_export_support()
    theirs = pytree.SUPPORTED_NODES[cache_utils.DynamicCache]
    try:
        own = Agent(registry.EXPORT_ENTRY_POINTS, registry.PATCHES)
        own.enable("pytree.dynamic_cache")
        record = own.records["pytree.dynamic_cache"]
        assert record.state == state.APPLIED_LATE
        assert record.detail.endswith(
            "replaced the registration by transformers.integrations.executorch (restored on disable)")
        assert pytree.SUPPORTED_NODES[cache_utils.DynamicCache].flatten_fn is not theirs.flatten_fn
        own.disable()
        restored = pytree.SUPPORTED_NODES[cache_utils.DynamicCache]
        assert (restored.flatten_fn, restored.unflatten_fn) == (theirs.flatten_fn, theirs.unflatten_fn)
    finally:
        pytree._deregister_pytree_node(cache_utils.DynamicCache)


def test_a_users_registration_is_kept(agent):
    def flatten(cache):
        return [], None

    pytree.register_pytree_node(cache_utils.DynamicCache, flatten, lambda children, ctx: cache_utils.DynamicCache())
    try:
        own = Agent(registry.EXPORT_ENTRY_POINTS, registry.PATCHES)
        own.enable("pytree.dynamic_cache")
        record = own.records["pytree.dynamic_cache"]
        assert record.state == state.SKIPPED
        assert record.detail == "DynamicCache is already a pytree node registered by test_undo; kept that registration"
        assert pytree.SUPPORTED_NODES[cache_utils.DynamicCache].flatten_fn is flatten
        own.disable()
        assert pytree.SUPPORTED_NODES[cache_utils.DynamicCache].flatten_fn is flatten
    finally:
        pytree._deregister_pytree_node(cache_utils.DynamicCache)


def test_patched_context_manager_restores_the_previous_selection(agent):
    assert not agent.active
    with autopatch.patched("pytree.dynamic_cache") as live:
        assert live is agent and agent.selection.ids == ("pytree.dynamic_cache",)
        assert hasattr(torch.export.export, "__autopatch_id__")
    assert not agent.active and not hasattr(torch.export.export, "__autopatch_id__")
    autopatch.enable("pytree.dynamic_cache")
    with autopatch.patched("all"):
        pass
    assert agent.selection.text == "pytree.dynamic_cache"
    autopatch.disable()
