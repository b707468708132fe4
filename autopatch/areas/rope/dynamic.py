"""Dynamic RoPE (``rope_type="dynamic"``, and on transformers 4.x ``"longrope"``) under torch.export, for every
model that uses transformers' ``modeling_rope_utils.dynamic_rope_update`` decorator (no model class is named).

The decorator's ``dynamic_frequency_update`` tests ``seq_len = max(position_ids) + 1``, a tensor, in Python
``if`` statements (grow past the cached length, reset below the original length) and re-registers
``inv_freq``: export stops with "Could not guard on data-dependent expression".

The installer:
  * replaces ``transformers.modeling_rope_utils.dynamic_rope_update`` with a decorator whose wrappers decide
    at call time: inside an export (``autopatch.kit.use_patch``) and with a dynamic rope type, they compute
        inv_freq = where(seq_len > original_max_seq_len, rope_init_fn(config, seq_len=<tensor>), original_inv_freq)
    put it in the module's ``inv_freq`` buffer slot for the duration of the call only (no state is written,
    nothing is registered) and call the undecorated forward; everywhere else they call the original decorated
    forward, so eager results and eager state changes are exactly the original ones;
  * for modeling modules imported before the install (their classes were decorated with the original, which
    ``from ..modeling_rope_utils import dynamic_rope_update`` bound by name), finds the original wrappers by
    their code object in the classes of loaded ``transformers*`` modules, directly in the class or in the
    closure of an outer decorator such as ``torch.no_grad()``, and replaces them the same way.
Undo puts the original decorator back and every wrapper (those replaced and those made while installed) back
to the original decorated function.

Semantics: eager dynamic RoPE is stateful (after a long call, a shorter one above the original length keeps
the longer frequencies); the exported program uses the frequencies of the current length. Both agree on a
fresh module and on calls of non-decreasing length (a generate loop).
"""

from __future__ import annotations

import functools
import sys

import torch

from ... import kit

#: Of the sources of dynamic_rope_update the row was written against (its fingerprints: the traceable path
#: re-implements that version's frequency updates, so another source is not trusted), those whose longrope
#: branches in Python: 5.3.0 to 5.12.1, and 4.57.6. 5.23 selects its frequencies with torch.where itself.
PYTHON_LONGROPE = frozenset({"9f96bf12a97e", "54741fa0ea32"})


def _dynamic_inv_freq(self, x, position_ids, layer_type, rope_type, init_fn):
    """The dynamic-NTK frequencies of this call, without a Python branch on data."""
    prefix = "" if layer_type is None else f"{layer_type}_"
    original = getattr(self, f"{prefix}original_inv_freq").to(x.device)
    seq_len = torch.max(position_ids) + 1  # a 0-dim tensor: the dynamic init function takes it (torch.maximum)
    kwargs = {} if layer_type is None else {"layer_type": layer_type}
    scaled, _ = init_fn(self.config, x.device, seq_len=seq_len, **kwargs)
    inv_freq = torch.where(seq_len > self.original_max_seq_len, scaled.to(original.dtype), original)
    return f"{prefix}inv_freq", inv_freq


def _longrope_inv_freq(self, x, position_ids, layer_type, init_fn, per_type):
    """longrope where the version branches in Python (4.x, 5.3-5.12): short-factor frequencies up to the original
    length, long-factor past it, chosen with torch.where (what 5.23 does itself) instead of an if that re-registers
    inv_freq."""
    prefix = "" if layer_type is None else f"{layer_type}_"
    config = self.config
    if per_type:  # 5.3-5.12: the parameters live in config.rope_parameters, per layer type when there are several
        params = config.rope_parameters if layer_type is None else config.rope_parameters[layer_type]
        original_max = params["original_max_position_embeddings"]
        kwargs = {} if layer_type is None else {"layer_type": layer_type}
        long_inv_freq, _ = init_fn(config, x.device, seq_len=original_max + 1, **kwargs)
    else:  # 4.x
        original_max = getattr(config, "original_max_position_embeddings", None) or config.max_position_embeddings
        long_inv_freq, _ = self.rope_init_fn(config, x.device, seq_len=original_max + 1)
    original = getattr(self, f"{prefix}original_inv_freq").to(x.device)
    seq_len = torch.max(position_ids) + 1
    return f"{prefix}inv_freq", torch.where(seq_len > original_max, long_inv_freq.to(original.dtype), original)


def _make_wrapper(patch_id, rope_forward, original_wrapper, init_functions, per_type: bool, longrope: bool):
    """``per_type``: transformers 5 (``layer_type`` argument, ``ROPE_INIT_FUNCTIONS``); 4.x uses
    ``self.rope_init_fn`` like its own update does. ``longrope``: the version's longrope branches in Python."""

    @functools.wraps(rope_forward)
    def wrapper(self, x, position_ids, *args, **kwargs):
        layer_type = kwargs.get("layer_type", args[0] if args else None)
        rope_type = self.rope_type if layer_type is None else self.rope_type[layer_type]
        rewritten = "dynamic" in rope_type or (rope_type == "longrope" and longrope)
        if not rewritten or not kit.use_patch(patch_id):
            return original_wrapper(self, x, position_ids, *args, **kwargs)
        init_fn = init_functions[rope_type] if per_type else self.rope_init_fn
        if rope_type == "longrope":
            name, inv_freq = _longrope_inv_freq(self, x, position_ids, layer_type, init_fn, per_type)
        else:
            name, inv_freq = _dynamic_inv_freq(self, x, position_ids, layer_type, rope_type, init_fn)
        saved = self._buffers[name]
        self._buffers[name] = inv_freq
        try:
            return rope_forward(self, x, position_ids, *args, **kwargs)
        finally:
            self._buffers[name] = saved

    # Not __autopatch_id__: an outer functools.wraps (torch.no_grad) copies this dict onto the class's function,
    # which must not then look routed to the rest of autopatch.
    wrapper._autopatch_rope_original = original_wrapper
    return wrapper


#: The code object every wrapper made by _make_wrapper shares.
_WRAPPER_CODE = _make_wrapper("", lambda self, x, position_ids: None, None, {}, True, False).__code__


def _places(code):
    """Every place in a loaded ``transformers*`` module that holds a function whose code is ``code``:
    ``(get, set)`` pairs. Only classes defined in the module itself are visited (a class imported elsewhere is
    the same object), and only their own attributes, followed through outer decorators' ``__wrapped__``."""
    found = []
    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.startswith("transformers"):
            continue
        try:
            members = list(vars(module).values())
        except TypeError:
            continue
        for cls in members:
            if not isinstance(cls, type) or getattr(cls, "__module__", None) != module_name:
                continue
            for attr, value in list(vars(cls).items()):
                if getattr(value, "__code__", None) is code:
                    found.append((value, _class_setter(cls, attr)))
                    continue
                outer, seen = value, 0
                while hasattr(outer, "__wrapped__") and seen < 16:  # torch.no_grad()'s decorate_context, ...
                    seen += 1
                    if getattr(outer, "__code__", None) is code or getattr(outer, "__code__", None) is _WRAPPER_CODE:
                        break  # a rope wrapper (ours holds the original in its closure): not one to look into
                    inner = getattr(outer, "__wrapped__", None)
                    for cell in getattr(outer, "__closure__", None) or ():
                        try:
                            held = cell.cell_contents
                        except ValueError:  # empty cell
                            continue
                        if getattr(held, "__code__", None) is code:
                            found.append((held, _cell_setter(cell, outer)))
                    if inner is None or inner is outer:
                        break
                    outer = inner
    return found


def _class_setter(cls, attr):
    def put(old, new):
        if vars(cls).get(attr) is not old:
            return f"{cls.__module__}.{cls.__qualname__}.{attr} was changed by someone else; left as is"
        setattr(cls, attr, new)
        return ""

    return put


def _cell_setter(cell, outer):
    def put(old, new):
        if cell.cell_contents is not old:
            return f"a decorator closure of {getattr(outer, '__qualname__', outer)} was changed; left as is"
        cell.cell_contents = new
        if getattr(outer, "__wrapped__", None) is old:
            outer.__wrapped__ = new
        return ""

    return put


def install_dynamic_rope_update(record, module, name, original):
    """Installer for ``transformers.modeling_rope_utils.dynamic_rope_update`` (see the module docstring)."""
    if getattr(original, "__autopatch_id__", None) is not None:
        raise RuntimeError(f"{module.__name__}.{name} is already patched by autopatch")
    patch_id = record.spec.id
    longrope = kit.check_fingerprint(record, original, f"{module.__name__}.{name}") in PYTHON_LONGROPE
    init_functions = module.ROPE_INIT_FUNCTIONS
    probe = original(lambda self, x, position_ids: None)
    original_code = probe.__code__
    per_type = "layer_type" in probe.__code__.co_varnames[: probe.__code__.co_argcount]

    def patched_dynamic_rope_update(rope_forward):
        return _make_wrapper(patch_id, rope_forward, original(rope_forward), init_functions, per_type, longrope)

    functools.update_wrapper(patched_dynamic_rope_update, original)
    patched_dynamic_rope_update.__autopatch_original__ = original
    patched_dynamic_rope_update.__autopatch_id__ = patch_id

    # Classes decorated before the install.
    replaced = 0
    for old, put in _places(original_code):
        if not put(old, _make_wrapper(patch_id, old.__wrapped__, old, init_functions, per_type, longrope)):
            replaced += 1
    setattr(module, name, patched_dynamic_rope_update)

    def undo() -> str:
        problems = []
        if getattr(module, name, None) is patched_dynamic_rope_update:
            setattr(module, name, original)
        else:
            problems.append(f"{module.__name__}.{name} was replaced on top of autopatch's decorator; left as is")
        # Every wrapper of ours, whether it replaced an original or was made while installed.
        for ours, put in _places(_WRAPPER_CODE):
            problem = put(ours, ours._autopatch_rope_original)
            if problem:
                problems.append(problem)
        return "; ".join(problems)

    return undo, f"{replaced} already-decorated rotary embedding(s) rewrapped"
