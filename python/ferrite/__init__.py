"""Ferrite: a compiler for tensor programs.

Load a graph (``ferrite.load("model.fg")``, ``ferrite.load("model.onnx", dims={"batch": 1})``)
or build one (``g = ferrite.Graph("mlp")``, ``x = g.input("x", "f32", [64, 784])``, ops on
``Var``s, ``g.output(y)``), compile it (``prog = ferrite.compile(g, target="cpu")``) and run it
on numpy arrays (``prog.run(x, w)``, or ``prog(x, w)``). ``prog.profile(...)`` profiles fused
against unfused kernels and writes Chrome traces. Errors are ``ferrite.FerriteError``s with the
messages of the ``ferrite`` command line tool.

``ferrite.dynamo`` is the ``torch.compile`` backend (``backend="ferrite"``), and
``ferrite.explain(model, *args)`` tells which parts of a PyTorch model it compiles (both need
torch, which ``import ferrite`` does not import).
"""

from ._ferrite import (
    DTYPES,
    BuildError,
    CompileError,
    FerriteError,
    FileError,
    Graph,
    InputError,
    InternalError,
    MemoryBudgetError,
    OnnxError,
    OptionError,
    ParseError,
    Program,
    RunError,
    Var,
    compile,
    concat,
    load,
    scaled_dot_product_attention,
    stack,
    where,
)

__all__ = [
    "DTYPES",
    "BuildError",
    "CompileError",
    "FerriteError",
    "FileError",
    "Graph",
    "InputError",
    "InternalError",
    "MemoryBudgetError",
    "OnnxError",
    "OptionError",
    "ParseError",
    "Program",
    "RunError",
    "Var",
    "compile",
    "concat",
    "explain",
    "load",
    "scaled_dot_product_attention",
    "stack",
    "where",
]


def explain(model, *args, **kwargs):
    """Compiles the PyTorch ``model`` with the Ferrite backend, calls it on ``args`` under
    ``torch.no_grad()`` and returns a ``ferrite.dynamo.Explanation``: the regions Ferrite
    compiled, the ops that run eagerly with their names and why, and Dynamo's graph breaks
    (``print`` it for a report). Needs torch."""
    from .dynamo import explain as _explain

    return _explain(model, *args, **kwargs)
