"""Installers that misbehave on purpose, for fault-injection tests."""


def raising_installer(owner, name, original):
    raise RuntimeError(f"boom while installing on {name}")
