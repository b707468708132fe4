"""Rewrites ``if`` statements with tensor conditions into ``torch.cond``, from the function's source.

Which ``if`` statements: those whose test calls or compares something (``x.any()``, ``t.sum() > 0``...). A test
made only of names, attributes, ``is``/``in`` checks, ``isinstance``/``hasattr``/``len``... is a Python value
in practice and is left alone. Two shapes of candidate are rewritten:

- An ``if`` whose branches assign local variables (no return, break, continue, raise, yield, del, global,
  nonlocal, attribute or item assignment, nested function or class), every variable it hands on existing
  before it or assigned by both branches: one torch.cond whose branches return those variables.
- An ``if`` at the function's own level that returns (``if c: return a`` then the rest of the body; ``elif``
  chains; ``else``): one torch.cond over the two ways the function can end, each path a function of its own
  (the body, or the ``else`` followed by the rest), which must end in ``return`` and hold no yield, del,
  global, nonlocal, attribute or item assignment or nested definition. An ``elif`` becomes a torch.cond
  inside the else path. An ``if`` that returns from inside a loop, ``with`` or ``try`` stays as written.

Anything else stays as written, with the line and the reason recorded.

What the rewritten ``if`` does: the test is evaluated once (``and``/``or``/``not`` through helpers that keep
Python's behaviour for Python values and combine tensors with logical ops). A tensor being traced goes to
``torch.cond``; anything else (a bool, a SymBool, a real tensor) runs the original branches (or, for an ``if``
that returns, the path functions, which hold the original statements). So the rewrite changes nothing where the
condition is not a traced tensor.

torch.cond refuses branches whose results alias their inputs or that change their inputs in place. A result
that may be a view (a name, an index or slice, ``.view``...) is wrapped in ``runtime.fresh``, a copy under
tracing only (the cost shows in ``autopatch diff``); ``h += 1`` on a tensor the function alone holds becomes
``h = h + 1`` in the traced branch; on anything else (a parameter) the ``if`` stays as written.

Sizes through builtins (``_rewrite_sizes``): ``min``/``max`` of sizes, ``math.ceil(a / b)``, and slices they
bound go through runtime helpers that keep them symbolic under tracing and are the builtins otherwise.

The branches run as closures, so they read the function's other variables freely. A branch must be free of
Python side effects (``torch.cond`` traces both): the statement rules above exclude the common ones, and
EXPORT_PATCHES_REWRITE=auto keeps a rewrite only when its program matches eager on the export's inputs.

``substitute_expressions`` is the targeted variant the transformers rows use: named expressions or statements of
one function replaced by traceable equivalents (a runtime assertion for what the code already implies, a shape
for a value known to equal it), leaving the rest of the source as it is. Both compile the copy from its source
and keep the original's closure, defaults and decorator wrappers.
"""

from __future__ import annotations

import ast
import copy
import inspect
import linecache
import textwrap
import types

PREFIX = "__autopatch_"
RUNTIME = PREFIX + "rt"

#: Calls whose result is a Python value, not a tensor: a test made of these is not rewritten.
STATIC_CALLS = frozenset({"isinstance", "hasattr", "callable", "len", "getattr", "is_torchdynamo_compiling",
                          "is_tracing", "is_compiling", "dim", "size", "numel", "type"})

#: Statements a torch.cond branch cannot hold (control leaving the branch, or effects beyond its variables).
FORBIDDEN = (ast.Return, ast.Break, ast.Continue, ast.Raise, ast.Yield, ast.YieldFrom, ast.Await, ast.Delete,
             ast.Global, ast.Nonlocal, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)

#: Nodes that open their own scope: names stored inside them are not the function's variables.
SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.FunctionDef,
          ast.AsyncFunctionDef, ast.ClassDef)


class NotRewritable(Exception):
    """The function has no ``if`` this rewriter can turn into torch.cond; the message says why for each."""


def rewrite_tensor_conditions(function):
    """A copy of ``function`` whose tensor-condition ``if`` statements use torch.cond.

    The copy shares the original's globals, closure cells, defaults and metadata. Its generated source is
    ``__autopatch_source__`` (also in linecache, so tracebacks and torch's stack traces show it) and the
    lines of the rewritten ``if`` statements in the original file are ``__autopatch_rewritten__``.
    Raises NotRewritable when nothing can be rewritten.
    """
    definition, filename = _parse(function)
    sizes = _rewrite_sizes(definition)  # before the ifs: their branches are copied
    rewriter = _Rewriter(definition, filename)
    definition.body = rewriter.block(definition.body, _parameters(definition))
    if not rewriter.rewritten and not sizes:
        why = "; ".join(rewriter.left) or "no if statement with a call or comparison in its test"
        raise NotRewritable(f"nothing to rewrite in {_name(function)}: {why}")
    return _compile(function, definition, rewriter.rewritten + sizes)


def substitute_expressions(function, substitutions: dict):
    """A copy of ``function`` where every occurrence of each expression or statement (source text, compared after
    parsing, so layout does not matter) is its replacement, which may call the runtime helpers as
    ``__autopatch_rt``. For expressions whose value the surrounding code already implies (``runtime.assume``,
    ``runtime.known_as``) or that have an equivalent export can trace. Every one of them must occur."""
    definition, _ = _parse(function)
    wanted = {ast.dump(_parse_piece(e)): (e, r) for e, r in substitutions.items()}
    found: dict = {}

    class Substitute(ast.NodeTransformer):
        def generic_visit(self, node):
            key = ast.dump(node) if isinstance(node, (ast.expr, ast.stmt)) else None
            if key in wanted:
                expression, replacement = wanted[key]
                found.setdefault(expression, []).append(node.lineno)
                if isinstance(node, ast.stmt):
                    return ast.parse(textwrap.dedent(replacement)).body
                return ast.parse(replacement, mode="eval").body
            return super().generic_visit(node)

    Substitute().visit(definition)
    missing = [e for e in substitutions if e not in found]
    if missing:
        raise NotRewritable(f"nothing to rewrite in {_name(function)}: `{missing[0]}` does not occur")
    return _compile(function, ast.fix_missing_locations(definition), [n for lines in found.values() for n in lines])


#: Builtins over sizes and the runtime helper that keeps them symbolic under tracing.
SIZE_BUILTINS = {"min": "sym_min", "max": "sym_max"}
#: Method names that change a tensor in place end with ``_``; these do not.
NOT_IN_PLACE = frozenset({"requires_grad_"})


def _rewrite_sizes(definition) -> list[int]:
    """Sizes through builtins, in place: ``min(a, b)``/``max(a, b)`` become ``runtime.sym_min``/``sym_max``,
    ``math.ceil(a / b)`` becomes ``runtime.ceil_div``, and a slice bounded by such a minimum or maximum
    (``x[:, :n]`` after ``n = min(...)``) becomes ``runtime.take``, which copies the slice under tracing instead
    of viewing it. Only where the function changes no tensor in place (a copy would not see the change). Each
    helper is the builtin for Python values. Returns the lines changed."""
    local = _names([definition], ast.Store)
    lines: list[int] = []
    bounded = {target.id for node in _walk_scope(definition)
               if isinstance(node, ast.Assign) and _size_expression(node.value)
               for target in node.targets if isinstance(target, ast.Name)}
    # A copy would not see a later in-place change of the tensor it was sliced from (nor make one visible there).
    copies_are_safe = not _changes_in_place(definition) and "slice" not in local

    class Sizes(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            func = node.func
            if isinstance(func, ast.Name) and func.id in SIZE_BUILTINS and func.id not in local and _size_call(node):
                lines.append(node.lineno)
                return _runtime_call(SIZE_BUILTINS[func.id], node.args)
            if _is_ceil_of_division(node):
                lines.append(node.lineno)
                return _runtime_call("ceil_div", [func, node.args[0].left, node.args[0].right])
            return node

        def visit_Subscript(self, node):
            self.generic_visit(node)
            if not (copies_are_safe and isinstance(node.ctx, ast.Load) and _bounded_by(node.slice, bounded)):
                return node
            lines.append(node.lineno)
            return _runtime_call("take", [node.value, _index_value(node.slice)])

    sizes = Sizes()
    definition.body = [sizes.visit(statement) for statement in definition.body]
    ast.fix_missing_locations(definition)
    return sorted(set(lines))


def _size_call(node) -> bool:
    """``min(a, b, ...)`` or ``max(...)`` of two or more plain arguments (``min(list)`` or ``key=`` is not over
    sizes), or its runtime replacement."""
    if not isinstance(node, ast.Call) or node.keywords or len(node.args) < 2:
        return False
    if any(isinstance(arg, ast.Starred) for arg in node.args):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id in SIZE_BUILTINS) or (
        isinstance(func, ast.Attribute) and func.attr in SIZE_BUILTINS.values())


def _is_ceil_of_division(node) -> bool:
    """``math.ceil(a / b)``."""
    func = node.func
    return (isinstance(func, ast.Attribute) and func.attr == "ceil" and isinstance(func.value, ast.Name)
            and func.value.id == "math" and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.BinOp) and isinstance(node.args[0].op, ast.Div))


def _size_expression(node) -> bool:
    """A size computed through a builtin: ``min``/``max`` of sizes or ``math.ceil`` of a division."""
    return isinstance(node, ast.Call) and (_size_call(node) or _is_ceil_of_division(node))


def _changes_in_place(definition) -> bool:
    for node in _walk_scope(definition):
        if isinstance(node, ast.AugAssign) or (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr.endswith("_") and not attr.startswith("_") and attr not in NOT_IN_PLACE:
                return True
    return False


def _bounded_by(index, names: set[str]) -> bool:
    """The index holds a slice with a bound computed by a builtin (directly, or through one of ``names``)."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    for part in parts:
        if not isinstance(part, ast.Slice):
            continue
        for bound in (part.lower, part.upper):
            if bound is not None and any(_size_expression(n) or (isinstance(n, ast.Name) and n.id in names)
                                         for n in ast.walk(bound)):
                return True
    return False


def _index_value(index):
    """The index of a subscript as a value: ``a:b`` becomes ``slice(a, b, None)``."""
    def value(part):
        if not isinstance(part, ast.Slice):
            return part
        return ast.Call(func=ast.Name("slice", ast.Load()), keywords=[],
                        args=[bound if bound is not None else ast.Constant(None)
                              for bound in (part.lower, part.upper, part.step)])

    if isinstance(index, ast.Tuple):
        return ast.Tuple(elts=[value(part) for part in index.elts], ctx=ast.Load())
    return value(index)


def _runtime_call(helper: str, args):
    return ast.Call(func=ast.Attribute(ast.Name(RUNTIME, ast.Load()), helper, ast.Load()), args=list(args),
                    keywords=[])


def _parse_piece(text: str):
    """One expression, or else one statement (an ``if`` with its body...)."""
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return ast.parse(textwrap.dedent(text)).body[0]


def normalized_source(function) -> str:
    """The original as the rewriters see it (parsed and printed back: comments and layout gone, decorators and
    default values blanked), so a diff against a rewritten copy shows only what the rewrite changed."""
    return ast.unparse(_parse(function)[0]) + "\n"


def _parse(function):
    """The function's definition (decorators, annotations, defaults stripped: see below) with the line numbers
    of its file, and that file's name."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
        first_line = inspect.getsourcelines(function)[1]
    except (OSError, TypeError) as exc:
        raise NotRewritable(f"no source for {_name(function)}: {exc}") from None
    tree = ast.parse(source)
    definition = tree.body[0]
    if not isinstance(definition, ast.FunctionDef):
        raise NotRewritable(f"{_name(function)} is not a plain function")
    ast.increment_lineno(tree, first_line - 1)  # lines of the original file, in messages and `where`
    _strip_evaluated_parts(definition)
    return definition, inspect.getsourcefile(function) or "?"


def _name(function) -> str:
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', function)}"


def _strip_evaluated_parts(definition) -> None:
    """Decorators, annotations and default values are evaluated when a ``def`` runs, in the scope that defined
    it (a class body, for methods): the copy takes the original's evaluated values instead, and the original's
    wrapper layers (``_rewrap``); decorators are not run again (some read the defining file, as transformers'
    ``auto_docstring`` does)."""
    definition.decorator_list = []
    definition.returns = None
    arguments = definition.args
    for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg):
        if arg is not None:
            arg.annotation = None
    arguments.defaults = [ast.Constant(None) for _ in arguments.defaults]
    arguments.kw_defaults = [None if d is None else ast.Constant(None) for d in arguments.kw_defaults]


def _parameters(definition) -> set[str]:
    arguments = definition.args
    names = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
    names.update(a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None)
    return names


def _walk_scope(node):
    """ast.walk that does not enter nested scopes (comprehensions, lambdas, inner functions)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(child for child in ast.iter_child_nodes(current) if not isinstance(child, SCOPES))


def _names(nodes, context) -> set[str]:
    return {n.id for node in nodes for n in _walk_scope(node) if isinstance(n, ast.Name) and isinstance(n.ctx, context)}


def _reads(nodes) -> set[str]:
    """Variables these statements read: loaded, or updated (``h += 1`` reads h)."""
    updated = {n.target.id for node in nodes for n in _walk_scope(node)
               if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
    return _names(nodes, ast.Load) | updated


def _may_be_tensor(test) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if called not in STATIC_CALLS:
                return True
        if isinstance(node, ast.Compare) and any(
            not isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops
        ):
            return True
    return False


#: What a path that ends the function (``if c: return a`` and the code after it) cannot hold: it runs as a function
#: of its own, so returns (and raises or loops that break) stay inside it, but not generators, scope statements,
#: nested definitions (their names would change scope) or deletions.
FORBIDDEN_IN_A_PATH = tuple(kind for kind in FORBIDDEN if kind not in (ast.Return, ast.Break, ast.Continue,
                                                                       ast.Raise, ast.Lambda))


def _obstacle(statements, forbidden=FORBIDDEN) -> str:
    """Why these branch statements cannot run inside torch.cond, or ''."""
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, forbidden):
                return f"a branch holds `{type(node).__name__.lower()}`"
            if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
                return "a branch assigns an attribute or item (a side effect torch.cond would run twice)"
            if isinstance(node, ast.Name) and node.id == "super":
                return "a branch calls super()"
            if isinstance(node, ast.Attribute) and node.attr.startswith("__") and not node.attr.endswith("__"):
                return "a branch uses a name-mangled attribute"
    return ""


#: Tensor methods whose result may share memory with the tensor (torch.cond refuses an output aliasing an input).
VIEW_METHODS = frozenset({"view", "view_as", "reshape", "reshape_as", "transpose", "permute", "t", "expand",
                          "expand_as", "narrow", "squeeze", "unsqueeze", "flatten", "unflatten", "contiguous",
                          "detach", "to", "type", "type_as", "float", "half", "double", "int", "long", "bool",
                          "select", "movedim", "swapaxes", "swapdims", "as_strided", "unfold", "diagonal",
                          "real", "imag", "requires_grad_"})


def _may_alias(value) -> bool:
    """A result that may be a variable's tensor itself, or a view of it: a name, an attribute, an index or slice,
    a view method (``.view``, ``.transpose``...), or a choice between such."""
    if isinstance(value, (ast.Name, ast.Attribute, ast.Subscript, ast.Starred)):
        return True
    if isinstance(value, ast.IfExp):
        return _may_alias(value.body) or _may_alias(value.orelse)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        return value.func.attr in VIEW_METHODS
    return False


def _fresh(value):
    """``value`` wrapped in ``runtime.fresh`` (a copy under tracing) where it may alias; a tuple or list element
    by element."""
    if isinstance(value, (ast.Tuple, ast.List)):
        return type(value)(elts=[_fresh(element) for element in value.elts], ctx=ast.Load())
    if value is None or not _may_alias(value):
        return value
    return _runtime_call("fresh", [value])


def _assigned_views(statements) -> set[str]:
    """Variables these statements assign a value that may alias another variable (``x = x[:, 1:]``)."""
    return {target.id for statement in statements for node in _walk_scope(statement) if isinstance(node, ast.Assign)
            and _may_alias(node.value) for target in node.targets if isinstance(target, ast.Name)}


def _fresh_returns(statements) -> list:
    """The statements with every ``return`` of their function returning ``_fresh`` values."""
    for statement in statements:
        for node in _walk_scope(statement):
            if isinstance(node, ast.Return):
                node.value = _fresh(node.value)
    return statements


#: Methods through which a tensor held by a name would be kept by a container (so the name is not its only holder).
KEEPING_METHODS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "put"})


def _owned_names(definition) -> set[str]:
    """Variables that alone hold the tensor they hold: not parameters, only ever assigned a new value (not a
    name, attribute, index or view, see ``_may_alias``), and never handed to another name, a container or an
    attribute. Changing such a tensor in place (``h += 1``) equals rebinding the name (``h = h + 1``): no one
    else can see the difference."""
    fresh: dict[str, bool] = {}
    for node in _walk_scope(definition):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    fresh[target.id] = fresh.get(target.id, True) and not _may_alias(node.value)
    return {name for name, only_fresh in fresh.items() if only_fresh} - _escaping(definition) - _parameters(definition)


def _escaping(definition) -> set[str]:
    """Variables whose tensor another holder may keep: assigned to another name, an attribute or an item,
    put in a container (a literal or ``.append(...)``...), bound by ``for``/``with``/``:=``, or yielded."""
    names: set[str] = set()
    for node in _walk_scope(definition):
        if isinstance(node, ast.Assign) and (_may_alias(node.value)
                                             or not all(isinstance(t, ast.Name) for t in node.targets)):
            names |= _names([node.value], ast.Load)
        elif isinstance(node, (ast.For, ast.With, ast.NamedExpr, ast.AnnAssign)):
            names |= _names([node], ast.Store)
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Yield)):
            names |= {n.id for n in ast.iter_child_nodes(node) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Dict):
            names |= {n.id for n in node.values if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in KEEPING_METHODS:
            names |= _names(node.args + [k.value for k in node.keywords], ast.Load)
    return names  # a return hands on the value only: no one else holds it while the function runs


def _in_place_on_others(statements, owned: set[str]) -> str:
    """Why these statements change in place a tensor the function may share (``x += 1`` on a parameter), or ''."""
    for statement in statements:
        for node in _walk_scope(statement):
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id not in owned:
                return (f"a branch changes `{node.target.id}` in place (`{node.target.id} "
                        f"{_OPERATORS.get(type(node.op), '?')}= ...`), a tensor the function may share with its caller "
                        "or another variable; torch.cond refuses a branch that changes its inputs")
    return ""


_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
              ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<",
              ast.RShift: ">>"}


class _OutOfPlace(ast.NodeTransformer):
    """``h += v`` as ``h = h + v``: for names the function alone holds, the same value without changing the tensor
    in place, which torch.cond refuses for its inputs. The cost: a new tensor instead of reusing ``h``'s memory."""

    def visit_AugAssign(self, node):
        if not isinstance(node.target, ast.Name):
            return node
        value = ast.BinOp(left=ast.Name(node.target.id, ast.Load()), op=node.op, right=node.value)
        return ast.copy_location(ast.Assign(targets=[node.target], value=value), node)

    def visit_FunctionDef(self, node):  # a nested scope's names are its own
        return node


def _out_of_place(statements) -> list:
    transformer = _OutOfPlace()
    return [transformer.visit(statement) for statement in statements]


def _leaves(statements) -> bool:
    """Every path through ``statements`` ends in ``return`` or ``raise`` (none falls through to what follows)."""
    if not statements:
        return False
    last = statements[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    return isinstance(last, ast.If) and _leaves(last.body) and _leaves(last.orelse)


def _returns(node) -> bool:
    """``node`` holds a ``return`` of its own function (not of a nested one)."""
    return any(isinstance(n, ast.Return) for n in _walk_scope(node))


#: What surrounds a block, for the note on an ``if`` that returns there ("" is the function's own body).
LOOPS_AND_BLOCKS = {ast.For: "a for loop", ast.AsyncFor: "a for loop", ast.While: "a while loop",
                    ast.With: "a with block", ast.AsyncWith: "a with block", ast.Try: "a try block"}


class _Rewriter:
    def __init__(self, definition, filename: str):
        self.definition = definition
        self.filename = filename
        self.rewritten: list[int] = []  # original line of each rewritten if
        self.left: list[str] = []  # why each candidate if stayed as written
        self.owned = _owned_names(definition)  # names whose in-place updates can become rebinding

    def block(self, statements, defined: set[str], inside: str = "") -> list:
        """The statements with their candidate ifs rewritten; ``defined``: variables bound before them;
        ``inside``: the loop or block around them ("" at the function's own level, where an ``if`` that returns
        can take the rest of the function as its other path)."""
        defined = set(defined)
        out = []
        for index, statement in enumerate(statements):
            if not inside and isinstance(statement, ast.If) and _may_be_tensor(statement.test) and _returns(statement):
                generated = self.returning_if(statement, statements[index + 1:], defined)
                if generated is not None:
                    return out + generated
            out.extend(self.statement(statement, defined, inside))
            defined |= _names([statement], ast.Store)
        return out

    def statement(self, node, defined: set[str], inside: str = "") -> list:
        if isinstance(node, ast.If):
            return self.if_statement(node, defined, inside)
        inside = LOOPS_AND_BLOCKS.get(type(node), inside)
        if isinstance(node, (ast.For, ast.AsyncFor)):
            inner = defined | _names([node.target], ast.Store)
            return [self._copy(node, body=self.block(node.body, inner, inside),
                               orelse=self.block(node.orelse, defined, inside))]
        if isinstance(node, ast.While):
            return [self._copy(node, body=self.block(node.body, defined, inside),
                               orelse=self.block(node.orelse, defined, inside))]
        if isinstance(node, (ast.With, ast.AsyncWith)):
            inner = defined | _names([item.optional_vars for item in node.items if item.optional_vars], ast.Store)
            return [self._copy(node, body=self.block(node.body, inner, inside))]
        if isinstance(node, ast.Try):
            return [self._copy(node, body=self.block(node.body, defined, inside),
                               orelse=self.block(node.orelse, defined, inside),
                               finalbody=self.block(node.finalbody, defined, inside),
                               handlers=[self._copy(h, body=self.block(h.body, defined, inside))
                                         for h in node.handlers])]
        return [node]

    @staticmethod
    def _copy(node, **fields):
        new = copy.copy(node)
        for key, value in fields.items():
            setattr(new, key, value)
        return new

    def if_statement(self, node, defined: set[str], inside: str = "") -> list:
        body, orelse = self.block(node.body, defined, inside), self.block(node.orelse, defined, inside)
        if not _may_be_tensor(node.test):
            return [self._copy(node, body=body, orelse=orelse)]
        where = f"{self.filename}:{node.lineno}"
        problem = _obstacle(node.body + node.orelse) or _in_place_on_others(node.body + node.orelse, self.owned)
        if inside and _returns(node):
            problem = f"it returns from inside {inside} (only an `if` at the function's own level can take the rest " \
                      "of the function as its other path)"
        assigned_then, assigned_else = _names(node.body, ast.Store), _names(node.orelse, ast.Store)
        assigned = assigned_then | assigned_else
        # Handed on: assigned here and read anywhere outside this if (later, or by the next loop iteration).
        outputs = sorted(assigned & self._reads_outside(node))
        unbound = [n for n in outputs if n not in defined and not (n in assigned_then and n in assigned_else)]
        if not problem and not outputs:
            problem = "its branches assign nothing read after it"
        if not problem and unbound:
            problem = f"{', '.join(unbound)} would be unbound after it on one branch"
        if problem:
            if inside or not _returns(node):  # else returning_if has said why already
                self.left.append(f"line {node.lineno}: {problem}")
            return [self._copy(node, body=body, orelse=orelse)]
        # The branches take, as arguments, what they assign and may read first (a closure cannot be assigned).
        reads = _reads(node.body + node.orelse)
        carried = sorted(n for n in assigned & defined if n in reads or not (n in assigned_then and n in assigned_else))
        self.rewritten.append(node.lineno)
        return self._generate(node, body, orelse, carried, outputs, where)

    def returning_if(self, node, rest, defined: set[str]):
        """``if c: ... return a`` (with its ``elif``/``else``) and ``rest``, the statements after it, as one
        ``torch.cond`` over the two ways the function can end: the ``if``'s body (followed by ``rest`` unless it
        always returns) and its ``else`` (followed by ``rest`` likewise). Each path becomes a function of its own,
        so a ``return`` anywhere in it is the path's value. None, with the reason noted, when a path can end
        without a value or holds what torch.cond cannot trace."""
        then_path = node.body if _leaves(node.body) else node.body + rest
        else_path = node.orelse if _leaves(node.orelse) else node.orelse + rest
        problem = _obstacle(then_path + else_path, FORBIDDEN_IN_A_PATH) or _in_place_on_others(
            then_path + else_path, self.owned)
        if not problem and not (_leaves(then_path) and _leaves(else_path)):
            problem = "a path reaches the end of the function without `return` (torch.cond needs a tensor from each)"
        if not problem and any(isinstance(path[-1], ast.Raise) for path in (node.body, node.orelse) if path):
            problem = "a branch raises (torch.cond traces both branches, so the raise would stop the export)"
        if problem:
            self.left.append(f"line {node.lineno}: {problem}")
            return None
        self.rewritten.append(node.lineno)
        index = len(self.rewritten)  # before the paths', whose own ifs are numbered after this one
        # The paths take, as arguments, the variables bound before the if that they assign and read (a closure
        # variable cannot be assigned); they read everything else through their closure.
        paths = then_path + else_path
        carried = sorted(_names(paths, ast.Store) & defined & _reads(paths))
        inner = defined | set(carried)
        return self._generate_returning(node, index, self.block(then_path, inner), self.block(else_path, inner),
                                        carried)

    def _generate_returning(self, node, index, then_path, else_path, carried) -> list:
        then_name, else_name, test_name = (f"{PREFIX}{kind}_{index}" for kind in ("then", "else", "test"))
        arguments = ", ".join(carried)
        where = f"{self.filename}:{node.lineno}"
        template = ast.parse(
            f"def {then_name}({arguments}):\n    pass\n"
            f"def {else_name}({arguments}):\n    pass\n"
            f"{test_name} = None\n"
            f"if {RUNTIME}.is_traced_tensor({test_name}):\n"
            f"    return {RUNTIME}.cond_return({test_name}, {then_name}, {else_name}, "
            f"({''.join(n + ', ' for n in carried)}), {where!r})\n"
            # Not traced (a bool, a SymBool, a real tensor): the path the original would take, as it was.
            f"if {test_name}:\n    return {then_name}({arguments})\n"
            f"return {else_name}({arguments})\n"
        ).body
        then_def, else_def, test_assign = template[:3]
        then_def.body = _fresh_returns(_out_of_place(copy.deepcopy(then_path)))
        else_def.body = _fresh_returns(_out_of_place(copy.deepcopy(else_path)))
        test_assign.value = _logical(copy.deepcopy(node.test))
        return template

    def _reads_outside(self, node) -> set[str]:
        inside = {id(n) for n in _walk_scope(node)}
        return {n.id for n in ast.walk(self.definition)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in inside}

    def _generate(self, node, body, orelse, carried, outputs, where) -> list:
        index = len(self.rewritten)
        then_name, else_name, test_name = (f"{PREFIX}{kind}_{index}" for kind in ("then", "else", "test"))
        returned = f"    return ({''.join(n + ', ' for n in outputs)})"
        template = ast.parse(
            f"def {then_name}({', '.join(carried)}):\n    pass\n{returned}\n"
            f"def {else_name}({', '.join(carried)}):\n    pass\n{returned}\n"
            f"{test_name} = None\n"
            f"if {RUNTIME}.is_traced_tensor({test_name}):\n"
            f"    ({''.join(n + ', ' for n in outputs)}) = {RUNTIME}.cond({test_name}, {then_name}, {else_name}, "
            f"({''.join(n + ', ' for n in carried)}), {tuple(outputs)!r}, {where!r})\n"
            f"elif {test_name}:\n    pass\n"
        ).body
        then_def, else_def, test_assign, dispatch = template
        then_def.body[:1] = _out_of_place(copy.deepcopy(body))
        else_def.body[:1] = _out_of_place(copy.deepcopy(orelse))  # empty: the branch hands its arguments back
        for branch, statements in ((then_def, body), (else_def, orelse)):
            views = _assigned_views(statements)
            branch.body[-1].value.elts = [_fresh(name) if name.id in views else name
                                          for name in branch.body[-1].value.elts]
        test_assign.value = _logical(copy.deepcopy(node.test))
        fallback = dispatch.orelse[0]
        fallback.body, fallback.orelse = body, orelse
        return template


def _logical(test):
    """``and``/``or``/``not`` at the top of a test become the runtime helpers (operands as thunks, so Python
    values still short-circuit)."""
    if isinstance(test, ast.BoolOp):
        helper = "and_" if isinstance(test.op, ast.And) else "or_"
        return _runtime_call(helper, [ast.Lambda(args=_no_arguments(), body=_logical(value))
                                      for value in test.values])
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _runtime_call("not_", [_logical(test.operand)])
    return test


def _no_arguments():
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                         defaults=[])


def _compile(function, definition, lines):
    """Builds the copy inside a factory whose parameters are the runtime module and the original's free
    variables (``__class__`` for ``super()``...), so the copy closes over the same cells."""
    from . import runtime

    free = inspect.unwrap(function).__code__.co_freevars
    factory = ast.FunctionDef(
        name=PREFIX + "factory",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(RUNTIME), *(ast.arg(n) for n in free)], vararg=None,
                           kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[definition, ast.Return(ast.Name(definition.name, ast.Load()))],
        decorator_list=[], returns=None, type_params=[],
    )
    module = ast.fix_missing_locations(ast.Module(body=[factory], type_ignores=[]))
    # Compiled from the unparsed text, registered in linecache under a name of its own: tracebacks and torch's
    # node stack traces then point at the generated lines, which exist.
    text = ast.unparse(module) + "\n"
    filename = f"<autopatch rewrite of {_name(function)}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    inner = inspect.unwrap(function)  # the plain function the source is, below any decorators
    namespace: dict = {}
    exec(compile(text, filename, "exec"), inner.__globals__, namespace)
    cells = [cell.cell_contents for cell in inner.__closure__ or ()]
    rewritten_inner = namespace[PREFIX + "factory"](runtime, *cells)
    rewritten_inner.__defaults__ = inner.__defaults__
    rewritten_inner.__kwdefaults__ = inner.__kwdefaults__
    for attribute in ("__module__", "__qualname__", "__doc__", "__annotations__"):
        setattr(rewritten_inner, attribute, getattr(inner, attribute))
    rewritten = _rewrap(function, rewritten_inner)
    rewritten.__autopatch_source__ = ast.unparse(definition) + "\n"
    rewritten.__autopatch_rewritten__ = tuple(sorted(lines))
    return rewritten


def _rewrap(layer, new_inner):
    """``layer`` (the original, possibly wrapped by decorators that set ``__wrapped__``) with ``new_inner`` in
    place of the plain function at the bottom: each wrapper is copied with the closure cell that held the layer
    below it now holding that layer's copy. The wrappers keep their behaviour (``can_return_tuple``...)."""
    below = getattr(layer, "__wrapped__", None)
    if below is None:
        return new_inner
    replacement = _rewrap(below, new_inner)
    cells = layer.__closure__ or ()

    def holds_below(cell) -> bool:
        try:
            return cell.cell_contents is below
        except ValueError:  # an empty cell
            return False

    if not any(holds_below(cell) for cell in cells):
        raise NotRewritable(f"{_name(layer)}: a decorator whose wrapper does not hold the function it wraps")
    closure = tuple(types.CellType(replacement) if holds_below(cell) else cell for cell in cells)
    copy_ = types.FunctionType(layer.__code__, layer.__globals__, layer.__name__, layer.__defaults__, closure)
    copy_.__kwdefaults__ = layer.__kwdefaults__
    copy_.__dict__.update(layer.__dict__)
    for attribute in ("__module__", "__qualname__", "__doc__", "__annotations__"):
        setattr(copy_, attribute, getattr(layer, attribute))
    copy_.__wrapped__ = replacement
    return copy_
