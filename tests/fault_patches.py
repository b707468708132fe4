"""Installers that misbehave on purpose, for fault-injection tests."""


def raising_installer(record, owner, name, original):
    raise RuntimeError(f"boom while installing on {name}")
