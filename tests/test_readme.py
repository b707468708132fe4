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
    for spec in registry.PATCHES:
        assert f"| `{spec.id}` |" in README, spec.id
