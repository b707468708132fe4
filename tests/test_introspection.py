"""Introspection (issue 7): diffs, per-export records, graph attribution, custom patches, compat APIs."""

import json
import subprocess
import sys

import pytest
import torch

import autopatch
import scope_target
from autopatch import registry
from autopatch.compat import PatchInfo, apply_patches_for_model, torch_export_patches
from conftest import REPO, clean_env, run_py
from test_scope import ROUTE

GOLDEN_DIFF = """\
torch: scope_target.double -> scope_target:triple
--- original scope_target.double
+++ patched scope_target:triple
@@ -1,2 +1,4 @@
-def double(x):
-    return x * 2
+def triple(x):
+    \"\"\"Replacement for ``double``: remembers which thread called it.\"\"\"
+    _note_thread()
+    return x * 3
"""


@pytest.fixture
def routed(make_agent):
    return make_agent([ROUTE])


def test_diff_of_a_route_patch_is_golden(routed):
    record = routed.records["test.double"]
    assert record.format_diff() == GOLDEN_DIFF
    rst = record.format_diff(format="rst")
    assert rst.startswith(".. _l-patch-test-double:\n\ntest.double\n===========\n")
    assert "    -def double(x):" in rst and ".. code-block:: diff" in rst
    with pytest.raises(ValueError, match="unknown format 'html'; valid: raw, rst"):
        record.format_diff(format="html")


def test_diff_cli_covers_every_shipped_patch():
    out = subprocess.run([sys.executable, "-m", "autopatch", "diff", "*"], env=clean_env(), cwd=REPO,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    from autopatch import versions

    for spec in registry.EXPORT_ENTRY_POINTS + registry.PATCHES:
        assert f"{spec.family}: {spec.target_name} -> " in out.stdout
    # Only patches for another version have no diff here, and they say why.
    assert out.stdout.count("no diff here: needs ") == out.stdout.count("no diff here:") == sum(
        1 for spec in registry.PATCHES if versions.unmet(spec.requires))


def test_patches_involved_in_graph_and_report(routed):
    x = torch.arange(4.0)
    program = torch.export.export(scope_target.UsesDouble(), (x,))
    pairs = autopatch.compat.diffs.involved_in_graph(routed.records.values(), program.graph)
    assert [(record.spec.id, [n.target for n in nodes]) for record, nodes in pairs] == [
        ("test.double", [torch.ops.aten.mul.Tensor])]
    text = autopatch.make_report(pairs)
    assert text.startswith("== test.double: 1 node(s): mul\n") and GOLDEN_DIFF in text
    assert autopatch.make_report(pairs, format="md").startswith("### `test.double`\n\nnodes: mul\n")
    assert autopatch.make_report([]) == "no patch produced nodes in this graph\n"


def test_report_file_for_zero_code_users(tmp_path):
    report = tmp_path / "exports.json"
    out = subprocess.run([sys.executable, str(REPO / "examples" / "train_export.py")],
                         env=clean_env(EXPORT_PATCHES="1", EXPORT_PATCHES_REPORT=str(report)), capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    (export,) = json.loads(report.read_text())["exports"]
    assert export["entry"] == "torch.export.export" and export["thread"] == "MainThread" and export["error"] is None
    assert export["patches"]["pytree.dynamic_cache"] > 0


def test_custom_patch_is_lazy_and_scoped():
    code = """
import sys, torch, autopatch
autopatch.register(id="custom.triple", family="torch", trigger="scope_target", target="double", mode="route",
                   replacement="scope_target:triple", reason="test")
autopatch.enable("custom.triple")
print("imported before use:", "scope_target" in sys.modules)
import scope_target
record = [p for p in autopatch.patches() if p.id == "custom.triple"][0]
x = torch.arange(3.0)
program = torch.export.export(scope_target.UsesDouble(), (x,))
print(record.state, program.module()(x).tolist(), scope_target.UsesDouble()(x).tolist())
"""
    out = run_py(code, PYTHONPATH=str(REPO / "tests"))
    assert out.stdout == "imported before use: False\napplied [1.0, 4.0, 7.0] [1.0, 3.0, 5.0]\n", out.stderr


def test_yobx_style_custom_patch_runs_with_only_the_import_changed(agent):
    import torch._refs

    original = torch._refs._broadcast_shapes

    def my_broadcast_shapes(*_shapes):
        for s in _shapes:
            if s:
                return list(s)
        return []

    my_patch = PatchInfo.make(my_broadcast_shapes, torch._refs, "_broadcast_shapes", family="custom")
    with apply_patches_for_model(extra_patches=[my_patch]) as details:
        assert details.n_patches == 1
        assert [(p.family, p.name) for p in details] == [("custom", my_patch.name)]
        assert torch._refs._broadcast_shapes is not original
        assert "+def my_broadcast_shapes(*_shapes):" in list(details)[0].format_diff(format="raw")
    assert torch._refs._broadcast_shapes is original
    # The block's patch lived only as long as the block: a later selection of any family does not pick it up.
    assert my_patch.name not in agent.records
    assert my_patch.name not in agent.enable("all,torch,custom").ids
    assert torch._refs._broadcast_shapes is original


def test_onnx_diagnostic_style_context_exports_the_example(agent):
    import train_export

    model, config = train_export.tiny_llama()
    inputs = train_export.decode_inputs(config, 2, 3, 5)
    dyn = torch.export.Dim.DYNAMIC
    cache = [{0: dyn, 2: dyn}] * config.num_hidden_layers
    shapes = {"input_ids": {0: dyn, 1: dyn}, "attention_mask": {0: dyn, 1: dyn}, "past_key_values": [cache, cache]}
    with torch_export_patches(patch_transformers=True) as f, torch.no_grad():
        ep = torch.export.export(model, (), kwargs=inputs, dynamic_shapes=shapes)
        assert f.n_patches >= 1 and "pytree.dynamic_cache" in [p.name for p in f]
        assert f.make_report(f.patches_involved_in_graph(ep.graph)).endswith("\n")
    assert not agent.active
    with torch_export_patches(patch=False) as f:
        assert f.n_patches == 0
