"""``static_range``: loops unrolled in the source before Numba compiles it (Triton's idea).

A thread's mma fragments are small local arrays (``s[n, e]``); they live in registers only if
every index into them is a compile-time constant, i.e. if the loops over them are fully unrolled.
NVVM unrolls short innermost loops but not loops nested in others, and Numba has no unroll
pragma. So a kernel written with ``for n in static_range(NT):`` is passed through
``unrolled(func)``, which rewrites its syntax tree: each such loop becomes NT copies of its body
with ``n`` replaced by 0, 1, ..., NT - 1 (nested static loops too). The bounds are evaluated
when the kernel is built, from the function's globals and closure. Run directly (not through
``unrolled``), ``static_range`` is ``range``, so the code means the same either way.
"""
from __future__ import annotations

import ast
import copy
import inspect
import textwrap


def static_range(n: int) -> range:
    """``range(n)``, with ``n`` known when the kernel is built: ``unrolled`` expands the loop."""
    return range(n)


#: Nodes that open a scope of their own, where the loop variable could be rebound.
_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
                  ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _outside_inner_loops(stmts):
    """The nodes of ``stmts`` that are not inside a nested for/while body."""
    for stmt in stmts:
        yield stmt
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            yield from ast.walk(stmt.iter if isinstance(stmt, (ast.For, ast.AsyncFor)) else stmt.test)
            yield from _outside_inner_loops(stmt.orelse)
        else:
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.stmt):
                    yield from _outside_inner_loops([child])
                else:
                    yield from ast.walk(child)


class _Substitute(ast.NodeTransformer):
    def __init__(self, name: str, value: int):
        self.name, self.value = name, value

    def visit_Name(self, node):
        if node.id == self.name:
            if not isinstance(node.ctx, ast.Load):
                raise SyntaxError(f"static_range variable {self.name!r} is assigned in its loop")
            return ast.copy_location(ast.Constant(self.value), node)
        return node


class _Unroll(ast.NodeTransformer):
    def __init__(self, namespace: dict):
        self.namespace = namespace

    def visit_For(self, node):
        it = node.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                and it.func.id == "static_range"):
            self.generic_visit(node)
            return node
        if node.orelse or not isinstance(node.target, ast.Name) or len(it.args) != 1 or it.keywords:
            raise SyntaxError("static_range loops take one plain variable, one bound and no else")
        if any(isinstance(n, _NESTED_SCOPES) for stmt in node.body for n in ast.walk(stmt)):
            raise SyntaxError("static_range loops cannot hold functions, lambdas or comprehensions")
        if any(isinstance(n, (ast.Break, ast.Continue)) for n in _outside_inner_loops(node.body)):
            raise SyntaxError("static_range loops cannot break or continue")
        name = node.target.id
        count = eval(compile(ast.Expression(it.args[0]), "<static_range>", "eval"), self.namespace)
        body = []
        for value in range(count):
            for stmt in node.body:
                stmt = _Substitute(name, value).visit(copy.deepcopy(stmt))
                new = self.visit(stmt)
                body.extend(new if isinstance(new, list) else [new])
        if count:   # as after a Python loop, the variable keeps its last value
            body.append(ast.Assign([ast.Name(name, ast.Store())], ast.Constant(count - 1)))
        return body or [ast.Pass()]


def unrolled(func):
    """``func`` recompiled with its ``static_range`` loops unrolled (decorators dropped: apply
    ``cuda.jit`` to the result). Its closure variables become globals of the new function."""
    lines, first = inspect.getsourcelines(func)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)     # errors point at the kernel's own lines
    fdef = tree.body[0]
    fdef.decorator_list = []
    namespace = dict(func.__globals__)
    if func.__closure__:
        namespace.update(zip(func.__code__.co_freevars, (c.cell_contents for c in func.__closure__)))
    fdef = _Unroll(namespace).visit(fdef)
    module = ast.fix_missing_locations(ast.Module(body=[fdef], type_ignores=[]))
    exec(compile(module, inspect.getsourcefile(func), "exec"), namespace)
    return namespace[func.__name__]
