"""The patches autopatch ships, one folder per area: ``rows.py`` declares the area's rows (``PatchSpec``) and its
README lines (``SUMMARIES``); the modules beside it hold the replacements and installers those rows name.

Rules (tests/test_layout.py checks the first two):
  * ``rows.py`` imports only ``autopatch.spec``, ``areas.bounds`` and other areas' rows: torch-free, so that the
    index (``autopatch.registry``) costs nothing at start-up;
  * the other modules reach the agent only through ``autopatch.kit``; they are imported only when a module they
    patch is imported;
  * such a module imports torch and its own helpers at load time, never a trigger module of another patch (a
    transformers modeling module, say). It may be loaded from inside another module's post-import hook, and
    importing a trigger there runs that trigger's hook while this module is still half initialised. Import such
    modules inside functions, at call time.
"""
