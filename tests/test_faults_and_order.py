"""Fault injection and import/activation orders, each in a fresh interpreter with real torch/transformers."""

import json

import pytest

from conftest import REPO, run_py

# A child script: builds an agent over the real table plus the broken specs, enables it, imports, and prints
# {id: [state, last line of detail]} as JSON on its last line.
FAULTY_AGENT = """
import json, sys
from autopatch import registry
from autopatch.agent import Agent
from autopatch.spec import PatchSpec
broken = [
    PatchSpec("test.missing_target", "transformers", "transformers.cache_utils", "NoSuchCache.update", "route",
              "scope_target:triple"),
    PatchSpec("test.raises", "pytree", "transformers.cache_utils", "DynamicCache", "install",
              "fault_patches:raising_installer"),
    PatchSpec("test.too_new", "torch", "torch.export", "export", "route", "scope_target:triple",
              requires=(("torch", ">=99"),)),
    PatchSpec("test.drifted", "torch", "scope_target", "double", "route", "scope_target:triple",
              fingerprints=("000000000000",)),
    # An installer that checks the source itself (dynamic RoPE's) given another function: drifted too.
    PatchSpec("test.installer_drifted", "transformers", "scope_target", "double", "install",
              "autopatch.areas.rope.dynamic:install_dynamic_rope_update"),
]
agent = Agent(registry.EXPORT_ENTRY_POINTS, list(registry.PATCHES) + broken)
agent.enable("all")
import torch, transformers, scope_target
from transformers import cache_utils, DynamicCache
import torch.utils._pytree as pytree
print("imports ok, DynamicCache registered:", DynamicCache in pytree.SUPPORTED_NODES)
print(json.dumps({r.spec.id: [r.state, r.detail.strip().splitlines()[-1] if r.detail.strip() else ""]
                  for r in agent.records.values()}))
"""


def test_broken_patches_are_reported_and_the_rest_applies():
    out = run_py(FAULTY_AGENT, PYTHONPATH=str(REPO / "tests"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "imports ok, DynamicCache registered: True"
    states = json.loads(lines[-1])
    assert states["pytree.dynamic_cache"][0] == "applied"
    assert states["agent.scope.export"] == ["pending", ""]  # torch.export._trace is imported by the first export
    assert states["agent.scope.public_export"][0] == "applied"
    assert states["test.missing_target"] == [
        "skipped", "transformers.cache_utils.NoSuchCache.update does not exist in this version"]
    assert states["test.raises"] == ["failed", "RuntimeError: boom while installing on DynamicCache"]
    assert states["test.too_new"][0] == "skipped" and states["test.too_new"][1].startswith("needs torch>=99, found 2.")
    state, detail = states["test.drifted"]
    assert state == "drifted" and "source of scope_target.double changed" in detail and "not applied" in detail
    state, detail = states["test.installer_drifted"]
    assert state == "drifted" and "source of scope_target.double changed" in detail and "not applied" in detail
    # One log line for the failure, nothing else.
    assert out.stderr == (
        "autopatch: test.raises failed to install on transformers.cache_utils.DynamicCache: "
        "RuntimeError: boom while installing on DynamicCache\n"
    )


def test_strict_mode_turns_a_failure_into_an_error_at_import():
    out = run_py(FAULTY_AGENT, PYTHONPATH=str(REPO / "tests"), EXPORT_PATCHES_STRICT="1")
    assert out.returncode == 1
    assert "autopatch.agent.AgentError: test.raises failed to install" in out.stderr


def test_unknown_selection_warns_once_and_the_program_runs_on():
    out = run_py("import autopatch; print('ran', autopatch.status()['header']['selected'])",
                 EXPORT_PATCHES="pytree.dynamic_cache,nope")
    assert out.stdout == "ran ['pytree.dynamic_cache']\n"
    assert out.stderr == (
        "autopatch: EXPORT_PATCHES: unknown patch or family 'nope'; valid: 1/all, 0/none, a family (custom, pytree, "
        "rewrite, torch, transformers), "
        "a patch id or a glob such as 'transformers.*', each optionally prefixed by '-' to exclude; see "
        "'autopatch status' for the ids\n"
    )
    out = run_py("import autopatch", EXPORT_PATCHES="pytree.dynamic_cache,nope", EXPORT_PATCHES_STRICT="1")
    assert out.returncode == 1 and "AgentError: EXPORT_PATCHES: unknown patch or family 'nope'" in out.stderr


# Import/activation orders. Each child prints the states of the real table and what a DynamicCache flattens to.
REPORT = """
import json, torch.utils._pytree as pytree
from transformers import DynamicCache
from autopatch.agent import AGENT
cache = DynamicCache()
cache.update(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4), 0)
registered = DynamicCache in pytree.SUPPORTED_NODES
leaves = len(pytree.tree_flatten(cache)[0]) if registered else 0
print(json.dumps({"states": {r.spec.id: r.state for r in AGENT.records.values()}, "leaves": leaves,
                  "export_is_wrapped": hasattr(torch.export.export, "__autopatch_id__")}))
"""

ORDERS = {
    "activate-then-import": ("1", "import torch\n", "applied", 2, True),
    "import-then-activate": ("", "import torch, transformers.cache_utils, autopatch\nautopatch.enable('1')\n",
                             "applied-late", 2, True),
    "activate-disable-import": ("1", "import autopatch\nautopatch.disable()\nimport torch\n", "disabled", 0, False),
    "double-activate": ("1", "import autopatch\nautopatch._bootstrap.activate('sitecustomize')\nautopatch.enable('1')\n"
                        "import torch\n", "applied", 2, True),
    "enable-disable-cycles": ("", "import torch, autopatch\nfor _ in range(3):\n    autopatch.enable('1')\n"
                              "    autopatch.disable()\n", "disabled", 0, False),
}


@pytest.mark.parametrize("order", list(ORDERS))
def test_activation_orders(order):
    env_value, prelude, cache_state, leaves, wrapped = ORDERS[order]
    out = run_py(prelude + REPORT, EXPORT_PATCHES=env_value)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["states"]["pytree.dynamic_cache"] == cache_state
    assert result["leaves"] == leaves
    assert result["export_is_wrapped"] is wrapped
    if wrapped:
        late = order == "import-then-activate"
        assert result["states"]["agent.scope.public_export"] == ("applied-late" if late else "applied")


def test_every_agent_armed_before_an_import_is_called_by_its_hook():
    # wrapt keeps one hook per module for the process; it must reach every agent waiting on that module.
    code = """
from autopatch import registry
from autopatch.agent import Agent
def only(patch_id):
    return Agent(registry.EXPORT_ENTRY_POINTS, [s for s in registry.PATCHES if s.id == patch_id])
first, second = only("pytree.dynamic_cache"), only("pytree.static_cache")
first.enable("all"); second.enable("all")
print(first.records["pytree.dynamic_cache"].state, second.records["pytree.static_cache"].state)
import transformers.cache_utils
print(first.records["pytree.dynamic_cache"].state, second.records["pytree.static_cache"].state)
"""
    out = run_py(code)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout == "pending pending\napplied applied\n"


def test_every_patch_for_another_version_is_skipped_and_names_the_version():
    """The version gate of every shipped patch, read from metadata before any import: on this interpreter's
    versions each default patch is either armed (pending) or skipped with 'needs <requirement>, found <version>'."""
    code = """
import json
from autopatch import registry, versions
from autopatch.agent import Agent
agent = Agent(registry.EXPORT_ENTRY_POINTS, registry.PATCHES)
agent.enable(",".join(s.id for s in registry.PATCHES))
print(json.dumps({s.id: [agent.records[s.id].state, agent.records[s.id].detail, versions.unmet(s.requires)]
                  for s in registry.PATCHES}))
"""
    out = run_py(code)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    states = json.loads(out.stdout)
    skipped = {i for i, (state, _, why) in states.items() if why}
    assert skipped, "every CI version has patches for the other one"
    for patch_id, (state, detail, why) in states.items():
        if why:
            assert state == "skipped" and detail == why and ", found " in why, (patch_id, state, detail)
        else:
            assert state == "pending", (patch_id, state, detail)
