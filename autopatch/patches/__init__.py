"""Replacements and installers referenced by ``autopatch.registry``. Each module is imported only when the
module it patches is imported.

Rule: a module here imports torch and its own helpers at load time, never a trigger module of another patch
(a transformers modeling module, say). It may be loaded from inside another module's post-import hook, and
importing a trigger there runs that trigger's hook while this module is still half initialised. Import such
modules inside functions, at call time.
"""
