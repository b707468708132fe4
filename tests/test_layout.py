"""The house rules of the package (issue 20), read from the source: an area's code imports the agent only through
``autopatch.kit``; an area's rows import only the spec, the shared bounds and other areas' rows (so the index
costs no torch at start-up); every row's replacement lives in its own area."""

import ast
import subprocess
import sys

from autopatch import registry
from conftest import REPO

AREAS = REPO / "autopatch" / "areas"


def _autopatch_imports(path):
    """(line, module) of every import of an ``autopatch`` module in the file, relative ones resolved."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "autopatch"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "autopatch":
                continue
            # `from ... import kit` names a module of the package: judge the module it names.
            names = [f"{module}.{alias.name}" for alias in node.names] if module == "autopatch" else [module]
            found += [(node.lineno, name) for name in names]
    return found


def test_area_code_reaches_the_agent_only_through_the_kit():
    offences = [
        f"{path.relative_to(REPO)}:{line} imports {module}"
        for path in sorted(AREAS.rglob("*.py")) if path.name != "rows.py"
        for line, module in _autopatch_imports(path)
        if module != "autopatch.kit" and not module.startswith("autopatch.areas.")
    ]
    assert not offences, "\n".join(offences)


def test_rows_import_only_the_spec_bounds_and_rows():
    allowed = {"autopatch.spec", "autopatch.areas.bounds"}
    offences = [
        f"{path.relative_to(REPO)}:{line} imports {module}"
        for path in sorted(AREAS.glob("*/rows.py"))
        for line, module in _autopatch_imports(path)
        if module not in allowed and not (module.startswith("autopatch.areas.") and module.endswith(".rows"))
    ]
    assert not offences, "\n".join(offences)


def test_every_row_replaces_with_code_of_its_own_area():
    """A row's replacement is in its area's folder (the fp16 clamp rows use the rewriter, the agent's own)."""
    for area in registry.AREAS:
        folder = area.__name__.rpartition(".")[0]
        for row in area.ROWS:
            module = row.replacement.partition(":")[0]
            assert module.startswith(folder + ".") or module == "autopatch.rewrite", (row.id, module)


def test_the_index_imports_no_torch_and_no_area_code():
    code = ("import sys, autopatch.registry as r; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'wrapt')), "
            "sorted(m for m in sys.modules if m.startswith('autopatch.areas.') and not m.endswith(('.rows', '.bounds'))"
            " and m.count('.') > 2), len(r.PATCHES) > 100)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.split() == ["[]", "[]", "True"], out.stdout + out.stderr


def test_every_id_area_code_counts_hits_for_is_a_shipped_row():
    """Hits counted under a wrong id go nowhere, silently: each ``count_hit`` / ``use_patch`` names its row by a
    module constant or a literal that must be a shipped id (installers use ``record.spec.id`` instead)."""
    ids = {spec.id for spec in registry.PATCHES}
    checked = 0
    for path in sorted(AREAS.rglob("*.py")):
        tree = ast.parse(path.read_text())
        constants = {node.targets[0].id: node.value.value for node in tree.body
                     if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                     and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("count_hit", "use_patch"):
                (arg,) = node.args
                if isinstance(arg, ast.Constant):
                    named = arg.value
                elif isinstance(arg, ast.Name) and arg.id in constants:
                    named = constants[arg.id]
                else:
                    continue  # a parameter or record.spec.id: given by the row itself
                checked += 1
                assert named in ids, f"{path.relative_to(REPO)}:{node.lineno} counts hits for {named!r}"
    assert checked >= 5
