"""The agent's lifecycle: which patches are selected, when each is installed, and how all are taken out.

    enable(selection) ─> every selected spec: version gate ─> SKIPPED
                                              └─> trigger imported?  yes: install now (APPLIED_LATE)
                                                                     no:  PENDING, hook on the trigger
    trigger imported ─> hook ─> install (APPLIED | DRIFTED | SKIPPED | FAILED)
    disable() ─> undo every installed patch, every other record back to DISABLED
"""

from __future__ import annotations

import logging
import sys
import threading

from . import config, hooks, install, registry, scope, selection, state, versions

log = logging.getLogger("autopatch")


class AgentError(RuntimeError):
    """Raised only under EXPORT_PATCHES_STRICT=1."""


class Agent:
    def __init__(self, entry_points=registry.EXPORT_ENTRY_POINTS, patches=registry.PATCHES):
        self._lock = threading.RLock()
        self.entry_points = tuple(entry_points)
        self.patches = list(patches)
        self.records = {spec.id: state.PatchRecord(spec) for spec in self.entry_points + tuple(self.patches)}
        if len(self.records) != len(self.entry_points) + len(self.patches):  # one record, one install per id
            ids = [spec.id for spec in self.entry_points + tuple(self.patches)]
            raise ValueError(f"patch ids must be unique; repeated: {sorted({i for i in ids if ids.count(i) > 1})}")
        self.selection = selection.parse("", self.patches)
        self.doors: list[str] = []

    @property
    def active(self) -> bool:
        return self.selection.active

    def add(self, spec) -> None:
        """Adds a spec to the table (custom patches); it is selected by the next enable()."""
        with self._lock:
            if spec.id in self.records:
                raise ValueError(f"a patch with id {spec.id!r} already exists")
            self.patches.append(spec)
            self.records[spec.id] = state.PatchRecord(spec)

    def remove(self, patch_id: str) -> None:
        """Takes a custom patch out of the table again (context managers that brought their own patches).
        Its record must not be installed: disable or re-enable without it first."""
        with self._lock:
            record = self.records.get(patch_id)
            if record is None:
                return
            if record.state in state.INSTALLED:
                raise RuntimeError(f"patch {patch_id!r} is installed; disable it before removing it")
            del self.records[patch_id]
            self.patches = [s for s in self.patches if s.id != patch_id]

    _plugins_loaded = False
    _plugin_problems: list = []

    def _load_plugins(self) -> list[str]:
        """Third-party patches: entry points in the group ``autopatch.patches`` naming a sequence of PatchSpec.
        Loading imports only the module the entry point names (keep it light: specs are strings). A broken
        plugin is one problem line, and the rest loads."""
        if self._plugins_loaded:
            return list(self._plugin_problems)
        self._plugins_loaded = True
        from importlib import metadata

        problems = []
        try:
            points = metadata.entry_points(group="autopatch.patches")
        except Exception as exc:  # a broken distribution's metadata must not stop the agent
            return [f"plugins: cannot list entry points: {type(exc).__name__}: {exc}"]
        for point in points:
            try:
                for spec in point.load():
                    self.add(spec)
            except Exception as exc:
                problems.append(f"plugin {point.name!r} ({point.value}) not loaded: {type(exc).__name__}: {exc}")
        self._plugin_problems = problems  # repeated by every later enable(), so status keeps showing them
        return problems

    def _load_user_rewrites(self) -> list[str]:
        """The rewrite patches EXPORT_PATCHES_REWRITE names, as read now (an earlier enable's that the variable
        no longer names leave the table)."""
        from .rewrite import auto, user_targets

        text = config.read("EXPORT_PATCHES_REWRITE")
        specs, problems = user_targets.specs_from(text)
        self.auto_rewrite = user_targets.auto_requested(text)
        wanted = {spec.id for spec in specs}
        for spec in list(self.patches):
            if spec.id.startswith(user_targets.PREFIX) and spec.id not in wanted:
                self.remove(spec.id)
            elif spec.id.startswith(auto.PREFIX) and not self.auto_rewrite:
                self.remove(spec.id)
        for spec in specs:
            if spec.id not in self.records:
                self.add(spec)
        return problems

    def enable(self, text: str = "all") -> selection.Selection:
        with self._lock:
            if self.active:
                self.disable()
            loading = self._load_plugins() + self._load_user_rewrites()
            sel = selection.parse(text, self.patches)
            # Problems loading patches (a broken plugin, a malformed EXPORT_PATCHES_REWRITE entry) show in status
            # next to the selection's own.
            sel.problems = tuple(loading) + sel.problems
            for problem in sel.problems:
                self._problem(problem)
            self.selection = sel
            if not sel.active:
                return sel
            chosen = [s for s in self.entry_points] + [s for s in self.patches if s.id in sel.ids]
            for spec in chosen:
                self._arm(self.records[spec.id])
            if self.auto_rewrite:
                scope.on_export_failure = self._rewrite_after_failure
            log.debug("autopatch: active with %d patches: %s", len(sel.ids), ", ".join(sel.ids))
            return sel

    def _arm(self, record) -> None:
        spec = record.spec
        why_not = versions.unmet(spec.requires)
        if why_not:
            record.set(state.SKIPPED, why_not)
            return
        record.set(state.PENDING)
        module = sys.modules.get(spec.trigger)
        if module is not None:
            self._install(record, module, late=True)
        else:
            hooks.on_import(spec.trigger, self._on_import)

    def _on_import(self, module) -> None:
        # Runs inside the user's import statement: nothing may escape but a strict-mode error.
        with self._lock:
            for record in list(self.records.values()):
                if record.spec.trigger == module.__name__ and record.state == state.PENDING:
                    self._install(record, module, late=False)

    def _install(self, record, module, late: bool) -> None:
        install.install(record, module, late=late)
        if record.state == state.FAILED:
            last = record.detail.strip().splitlines()[-1]
            self._problem(f"{record.spec.id} failed to install on {record.spec.target_name}: {last}", record.detail)

    def _problem(self, message: str, detail: str = "") -> None:
        """One log line, the program runs on; under EXPORT_PATCHES_STRICT=1 an exception instead."""
        if config.strict():
            raise AgentError(f"{message}\n{detail}" if detail else message)
        log.warning("autopatch: %s", message)

    auto_rewrite = False

    def _rewrite_after_failure(self, exc) -> bool:
        """EXPORT_PATCHES_REWRITE=auto: installs a rewrite of the function whose ``if`` stopped the export;
        True when there is a new one to try. Otherwise a note on the exception says why not."""
        from .rewrite import auto

        found = auto.failing_function(exc)
        if isinstance(found, str):
            return False  # not a data-dependent guard in reachable code: nothing for this mode to say
        module, qualname, line = found
        spec = auto.spec_for(module, qualname)
        with self._lock:
            if spec.id in self.records:
                _note(exc, f"autopatch (EXPORT_PATCHES_REWRITE=auto): {module}.{qualname} is rewritten already and "
                      f"still stops the export at line {line}: {self.records[spec.id].detail or 'see autopatch diff'}")
                return False
            self.add(spec)
            record = self.records[spec.id]
            self._arm(record)
        if record.state not in state.INSTALLED:
            _note(exc, f"autopatch (EXPORT_PATCHES_REWRITE=auto): {module}.{qualname} not rewritten: "
                  f"{record.state}: {record.detail.strip().splitlines()[-1] if record.detail.strip() else ''}")
            return False
        log.warning("autopatch: rewrote %s.%s (a data-dependent `if` at line %s stopped the export); exporting "
                    "again", module, qualname, line)
        return True

    def disable(self) -> None:
        with self._lock:
            if scope.on_export_failure == self._rewrite_after_failure:
                scope.on_export_failure = None
            for record in self.records.values():
                if record.state in state.INSTALLED:
                    install.uninstall(record)
                    if record.detail:
                        log.warning("autopatch: %s: %s", record.spec.id, record.detail)
                else:
                    record.set(state.DISABLED)
            self.selection = selection.parse("", self.patches)

    def hits(self) -> dict:
        return {r.spec.id: r.hits for r in self.records.values() if r.hits}


AGENT = Agent()


def _note(exc, text: str) -> None:
    if hasattr(exc, "add_note"):  # Python 3.11+
        exc.add_note(text)
