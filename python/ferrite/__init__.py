"""Ferrite: a compiler for tensor programs.

Load a graph (``ferrite.load("model.fg")``, ``ferrite.load("model.onnx", dims={"batch": 1})``)
or build one (``g = ferrite.Graph("mlp")``, ``x = g.input("x", "f32", [64, 784])``, ops on
``Var``s, ``g.output(y)``), compile it (``prog = ferrite.compile(g, target="cpu")``) and run it
on numpy arrays (``prog.run(x, w)``, or ``prog(x, w)``). ``prog.profile(...)`` profiles fused
against unfused kernels and writes Chrome traces. Errors are ``ferrite.FerriteError``s with the
messages of the ``ferrite`` command line tool.
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
    "load",
    "scaled_dot_product_attention",
    "stack",
    "where",
]

