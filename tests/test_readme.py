"""The README documents what the code declares: the variables and shipped-patches tables, the quick-start commands."""

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


def test_shipped_patches_table_is_the_generated_one():
    start = README.index("<!-- generated from autopatch/areas/*/rows.py")
    end = README.index("<!-- end of generated patches table -->")
    assert README[start:end].split("\n", 1)[1].strip() == registry.markdown_table()


def test_every_row_is_named_by_exactly_one_line_of_its_area():
    """Each row, by its id or a glob, in one README line of its own area; each name there names a row."""
    import fnmatch

    for area in registry.AREAS:
        names = [name for names, _ in area.SUMMARIES for name in names]
        for row in area.ROWS:
            lines = [names for names, _ in area.SUMMARIES if any(fnmatch.fnmatchcase(row.id, n) for n in names)]
            assert len(lines) == 1, (row.id, lines)
        for name in names:
            assert any(fnmatch.fnmatchcase(row.id, name) for row in area.ROWS), (area.__name__, name)
