"""The README documents what the code declares: the variables table and the quick-start commands."""

from autopatch import config, registry
from conftest import REPO

README = (REPO / "README.md").read_text()


def test_variables_table_is_the_generated_one():
    start = README.index("<!-- generated from autopatch/config.py")
    end = README.index("<!-- end of generated table -->")
    table = README[start:end].split("\n", 1)[1].strip()
    assert table == config.markdown_table()


def test_quick_start_commands_exist_and_ci_runs_the_test_one():
    assert "bash scripts/example.sh" in README and "bash scripts/test.sh" in README
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text()
    assert "EXPORT_PATCHES=1 .venv/bin/python examples/train_export.py" in (REPO / "scripts/example.sh").read_text()


def test_every_shipped_patch_is_documented():
    """Each id, or a glob that matches it, is in the first cell of a row of the shipped-patches table."""
    import fnmatch
    import re

    table = README[README.index("## Shipped patches"):]
    table = table[:table.index("\n\n", table.index("| id |"))]
    named = []
    for row in table.splitlines()[2:]:
        for name in re.findall(r"`([^`]+)`", row.split("|")[1]):
            # `.minimax` after `transformers.moe.mixtral`: the same prefix as the first id of the row
            named.append(named[-1].rpartition(".")[0] + name if name.startswith(".") else name)
    for spec in registry.PATCHES:
        assert any(fnmatch.fnmatchcase(spec.id, name) for name in named), spec.id
    assert all(any(fnmatch.fnmatchcase(s.id, name) for s in registry.PATCHES) for name in named), named
