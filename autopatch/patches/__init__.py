"""Replacements and installers referenced by ``autopatch.registry``. Each module is imported only when the
module it patches is imported."""
