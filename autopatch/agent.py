"""The agent's lifecycle: which patches are selected, when each is installed, and how all are taken out.

    enable(selection) ─> every selected spec: trigger imported?  yes: version gate ─> SKIPPED, or install now
                                                                      (APPLIED_LATE)
                                                                 no:  PENDING, hook on the trigger
    trigger imported ─> hook ─> version gates ─> SKIPPED, or install (APPLIED | DRIFTED | SKIPPED | FAILED)
    disable() ─> undo every installed patch, every other record back to DISABLED

The version gates of pending patches (installed distributions' metadata, ``packaging``) are evaluated when the
first hook fires, or when anything reads ``records`` (status, ``autopatch.patches()``): never at interpreter
start-up, whose cost they would multiply, and a reader never sees a gated patch as pending.
"""

from __future__ import annotations

import sys
from _thread import RLock

from . import config, hooks, logs, registry, selection, state


class AgentError(RuntimeError):
    """Raised only under EXPORT_PATCHES_STRICT=1."""


class Agent:
    def __init__(self, entry_points=registry.EXPORT_ENTRY_POINTS, patches=registry.PATCHES):
        self._lock = RLock()  # threading.RLock, without importing threading
        self.entry_points = tuple(entry_points)
        self.patches = list(patches)
        self._records = {spec.id: state.PatchRecord(spec) for spec in self.entry_points + tuple(self.patches)}
        #: Ids of pending records whose version gate is not evaluated yet.
        self._ungated: set[str] = set()
        if len(self._records) != len(self.entry_points) + len(self.patches):  # one record, one install per id
            ids = [spec.id for spec in self.entry_points + tuple(self.patches)]
            raise ValueError(f"patch ids must be unique; repeated: {sorted({i for i in ids if ids.count(i) > 1})}")
        self.selection = selection.parse("", self.patches)
        self.doors: list[str] = []

    @property
    def active(self) -> bool:
        return self.selection.active

    @property
    def records(self) -> dict:
        """Patch id -> record, with every version gate evaluated (a reader never sees a gated patch pending)."""
        if self._ungated:
            with self._lock:
                self._gate_pending()
        return self._records

    def _gate_pending(self) -> None:
        """Evaluates the version gates left for later by ``_arm`` (caller holds the lock)."""
        while self._ungated:
            record = self._records.get(self._ungated.pop())
            if record is not None and record.state == state.PENDING:
                self._gate(record)

    def _gate(self, record) -> bool:
        """False (and the record SKIPPED, with the reason) when an installed version is not the one required."""
        from . import versions

        try:
            why_not = versions.unmet(record.spec.requires)
        except Exception as exc:  # unreadable metadata, an invalid version: the patch cannot be trusted here
            why_not = f"cannot check {record.spec.requirement_text}: {type(exc).__name__}: {exc}"
        if why_not:
            record.set(state.SKIPPED, why_not)
            return False
        return True

    def add(self, spec) -> None:
        """Adds a spec to the table (custom patches); it is selected by the next enable()."""
        with self._lock:
            if spec.id in self._records:
                raise ValueError(f"a patch with id {spec.id!r} already exists")
            self.patches.append(spec)
            self._records[spec.id] = state.PatchRecord(spec)

    def remove(self, patch_id: str) -> None:
        """Takes a custom patch out of the table again (context managers that brought their own patches).
        Its record must not be installed: disable or re-enable without it first."""
        with self._lock:
            record = self._records.get(patch_id)
            if record is None:
                return
            if record.state in state.INSTALLED:
                raise RuntimeError(f"patch {patch_id!r} is installed; disable it before removing it")
            del self._records[patch_id]
            self._ungated.discard(patch_id)
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
        try:
            if not _may_declare_entry_points(PLUGIN_GROUP):
                return []
            from importlib import metadata
        except Exception as exc:
            return [f"plugins: cannot list entry points: {type(exc).__name__}: {exc}"]
        problems = []
        try:
            points = metadata.entry_points(group=PLUGIN_GROUP)
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
        text = config.read("EXPORT_PATCHES_REWRITE")
        if not text and not any(spec.id.startswith(("rewrite.user.", "rewrite.auto.")) for spec in self.patches):
            self.auto_rewrite = False
            return []  # nothing to add or take out: the rewrite package (ast, inspect) is not imported
        from .rewrite import auto, user_targets

        specs, problems = user_targets.specs_from(text)
        self.auto_rewrite = user_targets.auto_requested(text)
        wanted = {spec.id for spec in specs}
        for spec in list(self.patches):
            if spec.id.startswith(user_targets.PREFIX) and spec.id not in wanted:
                self.remove(spec.id)
            elif spec.id.startswith(auto.PREFIX) and not self.auto_rewrite:
                self.remove(spec.id)
        for spec in specs:
            if spec.id not in self._records:
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
                self._arm(self._records[spec.id])
            logs.debug("autopatch: active with %d patches: %s", len(sel.ids), ", ".join(sel.ids))
            return sel

    def _arm(self, record) -> None:
        spec = record.spec
        module = sys.modules.get(spec.trigger)
        # The version gate reads metadata with importlib.metadata and packaging, whose imports cost more than the
        # interpreter's start-up: unless the trigger is imported already (or the debug log shows every state
        # change as it happens), it waits for the hook, or for a reader of ``records``.
        now = module is not None or logs.debug_enabled()
        if now and not self._gate(record):
            return
        record.set(state.PENDING)
        if module is not None:
            self._install(record, module, late=True)
            return
        if not now:
            self._ungated.add(spec.id)
        hooks.on_import(spec.trigger, self._on_import)

    def _on_import(self, module) -> None:
        # Runs inside the user's import statement: nothing may escape but a strict-mode error.
        with self._lock:
            self._gate_pending()
            for record in list(self._records.values()):
                if record.spec.trigger == module.__name__ and record.state == state.PENDING:
                    self._install(record, module, late=False)

    def _install(self, record, module, late: bool) -> None:
        from . import install

        install.install(record, module, late=late, retry=self._retry_policy())
        if record.state == state.FAILED:
            last = record.detail.strip().splitlines()[-1]
            self._problem(f"{record.spec.id} failed to install on {record.spec.target_name}: {last}", record.detail)

    def _problem(self, message: str, detail: str = "") -> None:
        """One log line, the program runs on; under EXPORT_PATCHES_STRICT=1 an exception instead."""
        if config.strict():
            raise AgentError(f"{message}\n{detail}" if detail else message)
        logs.warning("autopatch: %s", message)

    auto_rewrite = False

    def _retry_policy(self):
        """What this agent's export entry points do after each round: EXPORT_PATCHES_REWRITE=auto rewrites what
        stopped the export and tries again; otherwise one round (None)."""
        if not self.auto_rewrite:
            return None
        from .runs import RetryPolicy

        return RetryPolicy(self._rewrite_after_failure, self._rewrite_after_success)

    def _rewrite_after_failure(self, exc) -> bool:
        """EXPORT_PATCHES_REWRITE=auto: installs a rewrite of the function whose ``if`` stopped the export;
        True when there is a new one to try. Otherwise a note on the exception says why not. When this export
        installed rewrites already and now fails on something else, they are not kept: the first error comes
        back."""
        from . import scope
        from .rewrite import auto

        found = auto.failing_function(exc)
        run = scope.current_run()
        if isinstance(found, str) and run is not None and run.rewrites:
            # The rewritten export stopped on something else (torch.cond refusing a branch's side effect...).
            self._reject_auto_rewrites(run.rewrites, f"the export with it failed: {_summary(exc)}")
        if isinstance(found, str):
            return False  # not a data-dependent guard in reachable code: nothing for this mode to say
        return self._install_auto_rewrite(*found, "a data-dependent `if` at line {} stopped the export",
                                          lambda text: _note(exc, text), exc)

    def _rewrite_after_success(self, result, entry_args, entry_kwargs, may_retry: bool):
        """EXPORT_PATCHES_REWRITE=auto, after an export succeeded. When its program fixed which of two sizes is
        the smaller (builtin min/max, then a slice), installs a rewrite of that function: ``runs.RETRY``. Then,
        when this export installed rewrites, keeps them only if the program matches eager on the export's own
        inputs; otherwise they are taken out and the export's original error is raised (or its first program
        returned), with a note saying why."""
        from . import runs, scope
        from .rewrite import auto

        found = auto.size_relation_function(result) if may_retry else "no round left"
        if not isinstance(found, str) and self._install_auto_rewrite(
                *found, "a min/max of sizes at line {} made the program guard which size is the smaller",
                lambda text: logs.warning("%s", text), result):
            return runs.RETRY
        run = scope.current_run()
        if run is None or not run.rewrites:
            return result
        problem = self._mismatch_on_export_inputs(result, entry_args, entry_kwargs)
        if not problem:
            return result
        return self._reject_auto_rewrites(run.rewrites, f"its program does not match eager on the export's own "
                                          f"inputs ({problem})")

    def _mismatch_on_export_inputs(self, result, entry_args, entry_kwargs) -> str:
        """How the exported program differs from eager on the inputs it was exported with ('' if it does not).
        Each side runs on its own copy of the inputs (a model may update a cache in place), eager out of export
        scope, as the user's program runs it."""
        import copy

        import torch

        from . import scope
        from .rewrite import auto

        model = scope.exported_module(entry_args, entry_kwargs)
        try:
            args, kwargs = auto.entry_inputs(entry_args, entry_kwargs)
            program = auto.program_of(result).module()
            with torch.no_grad():
                with scope.outside_export():
                    expected = model(*copy.deepcopy(args), **copy.deepcopy(kwargs))
                got = program(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        except Exception as exc:
            return f"the exported program could not be compared with eager: {type(exc).__name__}: {exc}"
        return auto.differences(got, expected)

    def _reject_auto_rewrites(self, rewrites: list, problem: str):
        """Takes this export's auto rewrites out again, and raises the error that asked for the first (or returns
        the program it replaced), with a note saying why (``problem``)."""
        from . import install

        names = ", ".join(patch_id for patch_id, _ in rewrites)
        note = f"autopatch (EXPORT_PATCHES_REWRITE=auto): {names} not kept: {problem}; the export's own outcome stands"
        with self._lock:
            for patch_id, _ in rewrites:
                record = self.records[patch_id]
                if record.state in state.INSTALLED:
                    install.uninstall(record)
                record.set(state.SKIPPED, note)
        first = rewrites[0][1]
        if isinstance(first, BaseException):
            _note(first, note)
            raise first
        logs.warning("%s", note)
        return first

    def _install_auto_rewrite(self, module: str, qualname: str, line, why: str, say, cause) -> bool:
        """Installs ``rewrite.auto.<module>.<qualname>``, ``why`` naming the line as ``{}``, for ``cause`` (the
        error or program that asked for it); True when it is new and installed, else ``say`` gets the reason."""
        from . import scope
        from .rewrite import auto

        spec = auto.spec_for(module, qualname)
        with self._lock:
            if spec.id in self.records:
                say(f"autopatch (EXPORT_PATCHES_REWRITE=auto): {module}.{qualname} is rewritten already and "
                    f"still stops the export at line {line}: {self.records[spec.id].detail or 'see autopatch diff'}")
                return False
            self.add(spec)
            record = self.records[spec.id]
            self._arm(record)
        if record.state not in state.INSTALLED:
            say(f"autopatch (EXPORT_PATCHES_REWRITE=auto): {module}.{qualname} not rewritten: "
                f"{record.state}: {record.detail.strip().splitlines()[-1] if record.detail.strip() else ''}")
            return False
        logs.warning("autopatch: rewrote %s.%s (%s); exporting again", module, qualname, why.format(line))
        scope.current_run().rewrites.append((spec.id, cause))
        return True

    def disable(self) -> None:
        with self._lock:
            self._ungated.clear()  # every pending record becomes DISABLED
            for record in self._records.values():
                if record.state in state.INSTALLED:
                    from . import install

                    install.uninstall(record)
                    if record.detail:
                        logs.warning("autopatch: %s: %s", record.spec.id, record.detail)
                else:
                    record.set(state.DISABLED)
            self.selection = selection.parse("", self.patches)

    def hits(self) -> dict:
        return {r.spec.id: r.hits for r in self.records.values() if r.hits}


#: The entry-point group of third-party patches.
PLUGIN_GROUP = "autopatch.patches"


def _may_declare_entry_points(group: str) -> bool:
    """False only when no distribution on sys.path declares entry points in ``group``: reads the entry_points.txt
    files importlib.metadata would read, without importing it (that import alone costs more than starting the
    interpreter, and almost every process has no plugin). Where it cannot tell as importlib.metadata would (a
    zip on sys.path, another finder that lists distributions), True: importlib.metadata then answers."""
    import os

    standard = getattr(sys.modules.get("_frozen_importlib_external"), "PathFinder", None)
    if any(finder is not standard and getattr(finder, "find_distributions", None) is not None
           for finder in sys.meta_path):
        return True
    needle = group.encode()
    for entry in sys.path:
        root = os.fspath(entry) or "."
        try:
            children = os.listdir(root)
        except NotADirectoryError:
            return True  # a zip archive, perhaps with distributions inside
        except OSError:
            continue
        egg = os.path.basename(root).lower().endswith(".egg")
        for child in children:
            low = child.lower()
            if low.endswith((".dist-info", ".egg-info")) or (egg and low == "egg-info"):
                try:
                    with open(os.path.join(root, child, "entry_points.txt"), "rb") as file:
                        if needle in file.read():
                            return True
                except OSError:
                    continue
    return False


AGENT = Agent()


def _note(exc, text: str) -> None:
    if hasattr(exc, "add_note"):  # Python 3.11+
        exc.add_note(text)


def _summary(exc) -> str:
    """One line for an exception: its type and the line that explains it (dynamo's own "Explanation:" when it
    gives one, the first line of the message otherwise)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    explained = next((line for line in lines if line.startswith("Explanation:")), lines[0] if lines else "")
    return f"{type(exc).__name__}: {explained}"
