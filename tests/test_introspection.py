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
    # --all: every patch, also those of other versions; --wide: each header on one line.
    out = subprocess.run([sys.executable, "-m", "autopatch", "diff", "*", "--all", "--wide"], env=clean_env(),
                         cwd=REPO, capture_output=True, text=True)
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
    # The program computes the replacement (triple), eager code outside the export the original (double).
    assert torch.equal(program.module()(x), scope_target.triple(x) + 1)
    assert torch.equal(scope_target.UsesDouble()(x), scope_target.double(x) + 1)
    pairs = autopatch.compat.attribution.involved_in_graph(routed.records.values(), program.graph)
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


def test_generated_docs_pages_list_every_patch_with_its_diff():
    """docs/patches-transformers-<version>.rst (scripts/docs_patches.sh): a section per patch; on the page of the
    installed version, a diff for every patch that applies here."""
    import transformers

    from autopatch import versions

    pages = sorted((REPO / "docs").glob("patches-transformers-*.rst"))
    assert {p.name for p in pages} >= {"patches-transformers-5.23.0.rst", "patches-transformers-4.57.6.rst"}
    for page in pages:
        text = page.read_text()
        for spec in registry.EXPORT_ENTRY_POINTS + registry.PATCHES:
            assert f".. _l-patch-{spec.id.replace('.', '-')}:\n\n{spec.id}\n" in text, (page.name, spec.id)
    here = (REPO / "docs" / f"patches-transformers-{transformers.__version__}.rst").read_text()
    for spec in registry.PATCHES:
        section = here.split(f".. _l-patch-{spec.id.replace('.', '-')}:")[1].split(".. _l-patch-")[0]
        if spec.mode == "route" and not versions.unmet(spec.requires):
            assert ".. code-block:: diff" in section and "\n    +" in section, spec.id
        elif versions.unmet(spec.requires):
            assert "no diff here: needs " in section, spec.id


def test_yobx_broadcast_example_runs_with_only_the_import_changed(agent):
    """The seed's apply_patches_for_model walk-through (x + y with independent dims under backed_size_oblivious:
    export, list the patches, show their diffs, attribute graph nodes, make a report), with a module of ours in
    place of yobx's TinyBroadcastAddModel."""

    class TinyBroadcastAddModel(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    model = TinyBroadcastAddModel()
    inputs = {"x": torch.randn(2, 3), "y": torch.randn(2, 3)}
    dyn = torch.export.Dim.DYNAMIC
    dynamic_shapes = {"x": {0: dyn, 1: dyn}, "y": {0: dyn, 1: dyn}}
    with (
        torch.fx.experimental._config.patch(backed_size_oblivious=True),
        apply_patches_for_model(patch_torch=True) as details,
    ):
        ep = torch.export.export(model, (), kwargs=inputs, dynamic_shapes=dynamic_shapes)
    # As in the seed: the patches are removed on exit, what they were stays readable.
    listed = [(patch.family, patch.name) for patch in details]
    diffs = {patch.name: patch.format_diff(format="raw").splitlines() for patch in details}
    pairs = details.patches_involved_in_graph(ep.graph)
    report = details.make_report(pairs, format="raw")
    assert details.n_patches == len(listed) >= 2 and all(family == "torch" for family, _ in listed)
    assert ("torch", "torch.broadcast.infer_size") in listed
    assert diffs["torch.broadcast.infer_size"][1:3] == [
        "--- original torch._subclasses.fake_impls.infer_size", "+++ patched autopatch.areas.torch_shapes.fixes:infer_size"]
    # Four independent symbols: the program takes (1, 3) + (4, 3) and (4, 5) + (4, 1), as eager does.
    for x, y in (((1, 3), (4, 3)), ((4, 5), (4, 1))):
        a, b = torch.randn(x), torch.randn(y)
        torch.testing.assert_close(ep.module()(x=a, y=b), model(a, b))
    assert report.endswith("\n")
    assert not agent.active and torch._subclasses.fake_impls.infer_size.__name__ == "infer_size"


def test_patches_function_survives_the_patch_modules_being_imported():
    """autopatch.patches() shares its name with the subpackage of replacements; importing a patch module (here
    by the post-import hook of transformers.cache_utils) must not replace the function by the subpackage."""
    code = (
        "import autopatch\n"
        "autopatch.enable('all')\n"
        "import transformers.cache_utils, autopatch.areas.pytree.caches\n"
        "records = autopatch.patches()\n"
        "assert any(r.spec.id == 'pytree.dynamic_cache' and r.state.startswith('applied') for r in records)\n"
        "print('OK', len(records))\n"
    )
    result = run_py(code)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-2000:]
