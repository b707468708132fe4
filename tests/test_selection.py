"""The EXPORT_PATCHES grammar, on a table that mixes families, defaults and opt-in patches."""

import pytest

from autopatch.selection import parse
from autopatch.spec import PatchSpec

TABLE = [
    PatchSpec("torch.broadcast", "torch", "m", "f", "route", "x:y"),
    PatchSpec("torch.stop_if_static", "torch", "m", "g", "route", "x:y", default=False),
    PatchSpec("transformers.rope.dynamic", "transformers", "m", "h", "route", "x:y"),
    PatchSpec("transformers.moe.mixtral", "transformers", "m", "i", "route", "x:y"),
    PatchSpec("pytree.dynamic_cache", "pytree", "m", "C", "install", "x:y"),
]
DEFAULTS = ("torch.broadcast", "transformers.rope.dynamic", "transformers.moe.mixtral", "pytree.dynamic_cache")


@pytest.mark.parametrize("text", ["1", "all", "ALL", " on ", "true"])
def test_all_selects_defaults(text):
    sel = parse(text, TABLE)
    assert sel.ids == DEFAULTS and sel.problems == () and sel.active


@pytest.mark.parametrize("text", ["", "0", "none", "off", "  "])
def test_off(text):
    sel = parse(text, TABLE)
    assert sel.ids == () and not sel.active and sel.problems == ()


def test_family_id_glob_and_exclusion():
    assert parse("pytree", TABLE).ids == ("pytree.dynamic_cache",)
    assert parse("transformers.rope.dynamic", TABLE).ids == ("transformers.rope.dynamic",)
    assert parse("transformers.*", TABLE).ids == ("transformers.rope.dynamic", "transformers.moe.mixtral")
    assert parse("all,-transformers.moe.*", TABLE).ids == (
        "torch.broadcast",
        "transformers.rope.dynamic",
        "pytree.dynamic_cache",
    )
    assert parse("torch,pytree,-torch.broadcast", TABLE).ids == ("pytree.dynamic_cache",)


def test_only_exclusions_start_from_defaults():
    assert parse("-pytree", TABLE).ids == DEFAULTS[:-1]


def test_opt_in_patches_need_naming():
    assert "torch.stop_if_static" not in parse("all", TABLE).ids
    assert "torch.stop_if_static" not in parse("torch", TABLE).ids
    assert parse("all,torch.stop_if_static", TABLE).ids == ("torch.broadcast", "torch.stop_if_static") + DEFAULTS[1:]
    assert parse("torch.stop_*", TABLE).ids == ("torch.stop_if_static",)


def test_unknown_name_is_reported_and_the_rest_applies():
    sel = parse("pytree,bogus", TABLE)
    assert sel.ids == ("pytree.dynamic_cache",)
    (problem,) = sel.problems
    assert "'bogus'" in problem and "valid:" in problem and "pytree, rewrite, torch, transformers" in problem
    assert parse("rewrite", TABLE).ids == () and parse("rewrite", TABLE).problems == ()


@pytest.mark.parametrize("text", ["pytree,,torch", "py tree", "--pytree", "all,0", "pytree;torch"])
def test_malformed_values_name_the_bad_item(text):
    sel = parse(text, TABLE)
    assert len(sel.problems) == 1
    assert "valid:" in sel.problems[0]


def test_a_patch_selected_without_its_companion_is_reported_with_both_names():
    from autopatch import registry

    sel = parse("all,-torch.broadcast.infer_size", registry.PATCHES)
    assert "torch.broadcast.fast_binary" in sel.ids and "torch.broadcast.infer_size" not in sel.ids
    assert sel.problems == ("EXPORT_PATCHES: selected torch.broadcast.fast_binary without its companion "
                            "torch.broadcast.infer_size; select them together, or none of them",)
    # A glob companion: the refs rows go together, and with torch.backed_size_oblivious.
    (problem,) = parse("torch.broadcast_refs.*", registry.PATCHES).problems
    assert "and 3 more without their companion torch.backed_size_oblivious;" in problem
    # Selecting both, or every default, reports nothing.
    assert parse("all", registry.PATCHES).problems == ()
    assert parse("torch.broadcast_refs.*,torch.backed_size_oblivious", registry.PATCHES).problems == ()


def test_every_declared_companion_names_a_shipped_patch():
    import fnmatch

    from autopatch import registry

    ids = [spec.id for spec in registry.PATCHES]
    for spec in registry.PATCHES:
        for need in spec.needs:
            assert any(fnmatch.fnmatchcase(i, need) for i in ids if i != spec.id), (spec.id, need)
