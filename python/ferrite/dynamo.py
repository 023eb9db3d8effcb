"""The ``torch.compile`` backend: ``torch.compile(model, backend="ferrite")``.

The package registers it under the ``torch_dynamo_backends`` entry point, so the name works
right after ``pip install``. What it does with the FX graph TorchDynamo captures:

1. the graph is lowered to ATen ops, with the core ATen decompositions
   (``torch._decomp.core_aten_decompositions``) of the ops Ferrite does not map, so that a
   mapped op (``addmm``, ``native_layer_norm``, ``gelu``) is kept whole and costs no Python
   decomposition. An inference graph is lowered by one fake-tensor trace
   (``make_fx``), the cheapest way to ATen; one that mutates (an in-place op) or has symbolic
   inputs, and every training graph, goes through AOT dispatch
   (``torch._dynamo.backends.common.aot_autograd``) as Inductor does, whose functionalization
   makes mutations safe to partition and which builds the backward graph. An output that eager
   returns as a view of an input (or of a tensor another output shares) is taken again as a
   view in torch at run time, as AOT autograd does, so that writes through it reach the same
   storage as in eager;
2. ``torch.fx.passes.infra.partitioner.CapabilityBasedPartitioner`` groups the nodes Ferrite
   maps (``ATEN`` below) into regions; every other node stays in the graph and runs eagerly;
3. each region is built as a Ferrite graph through the builder and compiled for the CPU at its
   first call, per input dtypes and shapes (a shape change that Dynamo's guards let through
   compiles again; with ``dynamic=False`` Dynamo itself recompiles per shape). Regions whose
   build fails run eagerly, with the reason kept for ``explain``.

Parameters and buffers arrive as graph inputs (AOT lifts them, or Dynamo passes those of inlined
modules); AOT lists them as static inputs (``fw_metadata.static_input_indices``), the direct
trace takes those that are ``nn.Parameter``s or that Dynamo marks static. Those the graph
does not mutate are frozen: each region builds them into its program as constants at its first
call, so a steady-state call passes and copies only the other inputs (numpy views of the tensors,
``Tensor.numpy()``, which the program copies once into its own storage). A frozen tensor is
still checked on every call, by its storage pointer and version counter (two attribute reads),
so a parameter updated in place or replaced after compiling rebuilds the region instead of
running stale weights. Outputs come back through ``torch.from_numpy`` without a copy.

Training: a graph that needs gradients (grad mode on and an input or parameter that requires
grad) goes through AOT autograd's joint forward + backward trace, split into a forward and a
backward graph by ``min_cut_rematerialization_partition`` (Inductor's partitioner: cheap
pointwise ops are recomputed in the backward graph instead of saved). Both graphs go through the
same mapping and partitioning as an inference graph, but nothing is frozen: the parameters
change at every optimizer step, so they stay inputs of the programs. What a backward graph
needs beyond the forward ops (one-hot ``scatter`` of a loss, ``index_put`` of an embedding's
rows, ``slice_scatter``) is mapped; other ops run eagerly as in inference, and
``explain_training`` reports them.

Symbolic shapes (``dynamic=True``, or Dynamo's automatic dynamic once a shape changed): an
inference graph with symbolic sizes is compiled per concrete shape at call time (traced again
with the call's sizes as numbers and compiled as a static graph, kept per shape), so a new
shape costs a Ferrite compile (milliseconds) instead of an eager run. A training graph with
symbolic sizes still runs its symbolic regions eagerly.

Nothing here imports torch until the backend is called, so ``import ferrite`` stays free of it.
"""

from __future__ import annotations

import dataclasses
import operator
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _ferrite

__all__ = ["ferrite_backend", "explain", "explain_training", "Explanation", "ATEN"]

#: torch dtype names and their Ferrite dtypes (bfloat16 is left out: numpy has no such type).
TORCH_DTYPES = {
    "torch.float32": "f32",
    "torch.float16": "f16",
    "torch.float64": "f64",
    "torch.int8": "i8",
    "torch.int16": "i16",
    "torch.int32": "i32",
    "torch.int64": "i64",
    "torch.uint8": "u8",
    "torch.uint16": "u16",
    "torch.uint32": "u32",
    "torch.uint64": "u64",
    "torch.bool": "bool",
}

INT64_MAX = 2**63 - 1


class Unsupported(Exception):
    """A node Ferrite does not map (the message says why)."""


def _dtype(torch_dtype) -> str:
    name = str(torch_dtype)
    if name not in TORCH_DTYPES:
        raise Unsupported(f"dtype {name}")
    return TORCH_DTYPES[name]


# --- The ATen mapping: each entry builds the op on ferrite.Vars. --------------------------------
#
# Handlers get the node's arguments with every input node replaced by its Var (lists stay lists)
# and return a Var, or a tuple/list of Vars for multi-output ops (read by operator.getitem).


def _axes(dims, rank):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        return [dims]
    return list(dims)


def _reduce(method):
    def build(x, dim=None, keepdim=False, *, dtype=None):
        if dtype is not None:
            x = x.cast(_dtype(dtype))
        return getattr(x, method)(_axes(dim, x.ndim), keepdim)

    return build


def _add(x, y, *, alpha=1):
    return x + (y if alpha == 1 else y * alpha)


def _sub(x, y, *, alpha=1):
    return x - (y if alpha == 1 else y * alpha)


def _rsub(x, y, *, alpha=1):
    return y - (x if alpha == 1 else x * alpha)


def _div(x, y, *, rounding_mode=None):
    if rounding_mode is None:
        return x / y
    if rounding_mode == "trunc":
        return x.trunc_divide(y)
    if rounding_mode == "floor":
        return x.floor_divide(y)
    raise Unsupported(f"div rounding_mode={rounding_mode!r}")


def _pow_scalar(base, exponent):
    # aten.pow.Scalar: a number raised to a tensor.
    return base**exponent


def _addmm(bias, a, b, *, beta=1, alpha=1):
    product = a @ b
    if alpha != 1:
        product = product * alpha
    return product + (bias if beta == 1 else bias * beta)


class _LayerNormOutputs:
    """native_layer_norm's (output, mean, rstd), each built when read: inference reads only
    the output, a training forward graph also saves mean and rstd for the backward one."""

    def __init__(self, x, weight, bias, eps):
        self.x, self.weight, self.bias, self.eps = x, weight, bias, eps

    def __getitem__(self, i):
        x = self.x
        if i == 0:
            return x.layer_norm(self.weight, self.bias, self.eps)
        if i == 1:
            return x.mean([-1], True)
        if i == 2:
            return (x.var([-1], 0, True) + self.eps).rsqrt()
        raise IndexError(i)


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    if len(normalized_shape) != 1:
        raise Unsupported("layer_norm over more than the last axis")
    n = normalized_shape[0]
    g = _graph_of(x)
    weight = weight if weight is not None else g.ones([n], x.dtype)
    bias = bias if bias is not None else g.zeros([n], x.dtype)
    return _LayerNormOutputs(x, weight, bias, eps)


def _shape(x, size):
    return [int(s) for s in size]


def _expand(x, size, *, implicit=False):
    size = list(size)
    lead = len(size) - x.ndim
    full = [x.shape[i - lead] if s == -1 else int(s) for i, s in enumerate(size)]
    return x.expand(full)


def _squeeze(x, dim=None):
    if dim is None:
        return x.squeeze()
    dims = [dim] if isinstance(dim, int) else list(dim)
    # PyTorch leaves axes that are not of extent 1 alone.
    keep = [d for d in dims if x.shape[d] == 1]
    return x.squeeze(keep) if keep else x


def _slice(x, dim=0, start=None, end=None, step=1):
    extent = x.shape[dim]
    start = 0 if start is None else start
    end = extent if end is None or end >= INT64_MAX else end
    start = max(start + extent, 0) if start < 0 else min(start, extent)
    end = max(end + extent, 0) if end < 0 else min(end, extent)
    if (start, end, step) == (0, extent, 1):
        return x
    return x.slice(dim, start, max(end, start), step)


def _select(x, dim, index):
    extent = x.shape[dim]
    index = index + extent if index < 0 else index
    return x.slice(dim, index, index + 1).squeeze(dim)


def _identity(x, *args, **kwargs):
    return x


def _to_copy(x, *, dtype=None, **kwargs):
    return x.cast(_dtype(dtype)) if dtype is not None else x


def _cast(x, dtype):
    return x.cast(_dtype(dtype))


def _pad(x, pad, value=0.0):
    # torch: (before, after) pairs from the last axis backwards; ferrite: axis 0 first.
    pads = [0] * (2 * x.ndim)
    for i in range(len(pad) // 2):
        axis = x.ndim - 1 - i
        pads[2 * axis] = pad[2 * i]
        pads[2 * axis + 1] = pad[2 * i + 1]
    return x.pad(pads, float(value))


def _graph_of(x):
    return x.graph


def _full(ctx, size, fill_value, *, dtype=None, **kwargs):
    return ctx.graph.full(list(size), float(fill_value), _dtype(dtype) if dtype else "f32")


def _scalar_tensor(ctx, value, *, dtype=None, **kwargs):
    return ctx.graph.full([], float(value), _dtype(dtype) if dtype else "f32")


def _arange(ctx, start, end=None, step=1, *, dtype=None, **kwargs):
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = all(isinstance(v, int) for v in (start, end, step))
        name = "i64" if ints else "f32"
    else:
        name = _dtype(dtype)
    return ctx.graph.arange(float(start), float(end), float(step), name)


def _full_like(x, fill_value, *, dtype=None, **kwargs):
    y = x.full_like(float(fill_value))
    return y.cast(_dtype(dtype)) if dtype is not None else y


def _gelu(x, *, approximate="none"):
    return x.gelu_tanh() if approximate == "tanh" else x.gelu()


def _leaky_relu(x, negative_slope=0.01):
    return _ferrite.where(x > 0.0, x, x * negative_slope)


def _hardtanh(x, min_val=-1.0, max_val=1.0):
    return x.clamp(min_val, max_val)


def _var(x, dim=None, *, correction=None, keepdim=False):
    return x.var(_axes(dim, x.ndim), 1 if correction is None else int(correction), keepdim)


def _var_mean(x, dim=None, *, correction=None, keepdim=False):
    return (_var(x, dim, correction=correction, keepdim=keepdim), x.mean(_axes(dim, x.ndim), keepdim))


def _index(x, indices):
    # x[..., idx, ...] with one index tensor after leading full slices (None): a take.
    indices = list(indices)
    while indices and indices[-1] is None:
        indices.pop()
    if not indices or any(i is not None for i in indices[:-1]):
        raise Unsupported("advanced indexing with more than one index tensor")
    return x.index_select(len(indices) - 1, indices[-1])


def _argmax(x, dim=None, keepdim=False):
    return x.argmax(dim, keepdim)


def _argmin(x, dim=None, keepdim=False):
    return x.argmin(dim, keepdim)


def _any_all(method):
    # any / all: the largest / least of the operand's truth values, as 0 or 1.
    def build(x, dim=None, keepdim=False):
        truth = (x if x.dtype == "bool" else x.ne(0)).cast("f32")
        return getattr(truth, method)(_axes(dim, x.ndim), keepdim).gt(0.5)

    return build


def _bool_only(method):
    def build(x, y):
        if x.dtype != "bool":
            raise Unsupported("bitwise ops on integers")
        return getattr(x, method)(y)

    return build


def _bitwise_not(x):
    if x.dtype != "bool":
        raise Unsupported("bitwise_not on integers")
    return x.logical_not()


def _split_with_sizes(x, sizes, dim=0):
    return x.split(list(sizes), dim)


def _split(x, size, dim=0):
    return x.split(size, dim) if isinstance(size, int) else x.split(list(size), dim)


def _softmax(x, dim, half_to_float=False):
    return x.softmax(dim)


def _log_softmax(x, dim, half_to_float=False):
    return x.log_softmax(dim)


def _embedding(weight, indices, *args, **kwargs):
    return weight.index_select(0, indices)


def _scatter_value(x, dim, index, value):
    # What a loss's backward builds (nll_loss's one-hot gradient): one index per slice along
    # `dim`, so a comparison with the positions along it picks the element to write.
    dim = dim % x.ndim
    if index.ndim != x.ndim or index.shape[dim] != 1:
        raise Unsupported("scatter with more than one index per slice")
    extent = x.shape[dim]
    positions = x.graph.arange(0.0, float(extent), 1.0, index.dtype)
    positions = positions.reshape([extent if a == dim else 1 for a in range(x.ndim)])
    return _ferrite.where(index == positions, float(value), x)


def _index_add(x, dim, index, source, *, alpha=1):
    return x.index_add(dim, index, source if alpha == 1 else source * alpha)


def _index_put(x, indices, values, accumulate=False):
    # What embedding's backward builds: rows of `values` added into a zero table at `indices`.
    indices = list(indices)
    if not accumulate:
        raise Unsupported("index_put without accumulate (duplicate indices are unordered)")
    if len(indices) != 1 or indices[0] is None or indices[0].dtype == "bool":
        raise Unsupported("index_put with other than one integer index tensor")
    index = indices[0]
    count = 1
    for s in index.shape:
        count *= s
    rows = values.expand(list(index.shape) + list(x.shape[1:])).reshape([count] + list(x.shape[1:]))
    return x.index_add(0, index.reshape([count]), rows)


def _slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    # x with src written over x[start:end] along dim: the untouched slices around it and src.
    if step != 1:
        raise Unsupported("slice_scatter with a step")
    extent = x.shape[dim]
    start = 0 if start is None else start
    end = extent if end is None or end >= INT64_MAX else end
    start = max(start + extent, 0) if start < 0 else min(start, extent)
    end = max(end + extent, 0) if end < 0 else min(end, extent)
    pieces = [x.slice(dim, 0, start)] if start > 0 else []
    pieces.append(src)
    if end < extent:
        pieces.append(x.slice(dim, end, extent))
    return pieces[0] if len(pieces) == 1 else _ferrite.concat(pieces, dim)


def _cat(tensors, dim=0):
    # torch.cat skips 1-D empty operands whatever the others' rank: the `torch.tensor([])` a
    # transformers KV cache starts from before its first update.
    kept = [t for t in tensors if t.shape != (0,)]
    if not kept:
        return tensors[0]
    return kept[0] if len(kept) == 1 else _ferrite.concat(kept, dim)


def _method(name):
    return lambda x, *args: getattr(x, name)(*args)


def _binary(name):
    return lambda x, y: getattr(x, name)(y)


#: Core ATen ops Ferrite compiles, by `str(node.target)` (`aten.add.Tensor`). Entries that need
#: the graph itself (creation ops) take the region's context first and are listed in CREATION.
ATEN: Dict[str, Callable[..., Any]] = {
    **{f"aten.{op}.Tensor": f for op, f in [("add", _add), ("sub", _sub)]},
    **{f"aten.{op}.Scalar": f for op, f in [("add", _add), ("sub", _sub)]},
    "aten.rsub.Scalar": _rsub,
    "aten.rsub.Tensor": _rsub,
    "aten.mul.Tensor": _binary("mul"),
    "aten.mul.Scalar": _binary("mul"),
    "aten.div.Tensor": _div,
    "aten.div.Scalar": _div,
    "aten.div.Tensor_mode": _div,
    "aten.div.Scalar_mode": _div,
    "aten.pow.Tensor_Scalar": _binary("pow"),
    "aten.pow.Tensor_Tensor": _binary("pow"),
    "aten.pow.Scalar": _pow_scalar,
    "aten.remainder.Tensor": _binary("remainder"),
    "aten.remainder.Scalar": _binary("remainder"),
    "aten.fmod.Tensor": _binary("fmod"),
    "aten.fmod.Scalar": _binary("fmod"),
    "aten.floor_divide.default": _binary("floor_divide"),
    "aten.maximum.default": _binary("maximum"),
    "aten.minimum.default": _binary("minimum"),
    **{
        f"aten.{op}.{kind}": _binary(op)
        for op in ["eq", "ne", "lt", "le", "gt", "ge"]
        for kind in ["Tensor", "Scalar"]
    },
    "aten.logical_and.default": _binary("logical_and"),
    "aten.logical_or.default": _binary("logical_or"),
    "aten.logical_not.default": _method("logical_not"),
    "aten.bitwise_and.Tensor": _bool_only("logical_and"),
    "aten.bitwise_or.Tensor": _bool_only("logical_or"),
    "aten.bitwise_not.default": _bitwise_not,
    **{
        f"aten.{op}.default": _method(name)
        for op, name in [
            ("neg", "neg"),
            ("abs", "abs"),
            ("exp", "exp"),
            ("log", "log"),
            ("sqrt", "sqrt"),
            ("rsqrt", "rsqrt"),
            ("reciprocal", "reciprocal"),
            ("sin", "sin"),
            ("cos", "cos"),
            ("tanh", "tanh"),
            ("sigmoid", "sigmoid"),
            ("relu", "relu"),
            ("silu", "silu"),
            ("erf", "erf"),
            ("erfc", "erfc"),
            ("floor", "floor"),
            ("ceil", "ceil"),
            ("sign", "sign"),
        ]
    },
    "aten.gelu.default": _gelu,
    "aten.leaky_relu.default": _leaky_relu,
    "aten.hardtanh.default": _hardtanh,
    "aten.clamp.default": lambda x, min=None, max=None: x.clamp(min, max),
    "aten.clamp_min.default": lambda x, min: x.clamp(min, None),
    "aten.clamp_max.default": lambda x, max: x.clamp(None, max),
    "aten.where.self": lambda c, a, b: _ferrite.where(c, a, b),
    "aten.masked_fill.Scalar": lambda x, mask, value: x.masked_fill(mask, value),
    "aten.mm.default": _binary("matmul"),
    "aten.bmm.default": _binary("matmul"),
    "aten.matmul.default": _binary("matmul"),
    "aten.addmm.default": _addmm,
    "aten.sum.dim_IntList": _reduce("sum"),
    "aten.sum.default": lambda x, *, dtype=None: _reduce("sum")(x, None, False, dtype=dtype),
    "aten.mean.dim": _reduce("mean"),
    "aten.mean.default": lambda x, *, dtype=None: _reduce("mean")(x, None, False, dtype=dtype),
    "aten.amax.default": _reduce("max"),
    "aten.amin.default": _reduce("min"),
    "aten.prod.dim_int": lambda x, dim, keepdim=False, *, dtype=None: _reduce("prod")(
        x, [dim], keepdim, dtype=dtype
    ),
    **{f"aten.any.{kind}": _any_all("max") for kind in ["default", "dim", "dims"]},
    **{f"aten.all.{kind}": _any_all("min") for kind in ["default", "dim", "dims"]},
    "aten.argmax.default": _argmax,
    "aten.argmin.default": _argmin,
    "aten.var.correction": _var,
    "aten.var_mean.correction": _var_mean,
    "aten.index.Tensor": _index,
    "aten._softmax.default": _softmax,
    "aten._log_softmax.default": _log_softmax,
    "aten.native_layer_norm.default": _layer_norm,
    "aten.view.default": lambda x, size: x.reshape(_shape(x, size)),
    "aten._unsafe_view.default": lambda x, size: x.reshape(_shape(x, size)),
    "aten.reshape.default": lambda x, size: x.reshape(_shape(x, size)),
    "aten.permute.default": lambda x, dims: x.permute(list(dims)),
    "aten.t.default": lambda x: x.transpose(0, 1) if x.ndim == 2 else x,
    "aten.transpose.int": lambda x, a, b: x.transpose(a, b),
    "aten.expand.default": _expand,
    "aten.squeeze.dim": _squeeze,
    "aten.squeeze.dims": _squeeze,
    "aten.squeeze.default": _squeeze,
    "aten.unsqueeze.default": lambda x, dim: x.unsqueeze(dim),
    "aten.slice.Tensor": _slice,
    "aten.select.int": _select,
    "aten.cat.default": _cat,
    "aten.clone.default": _identity,
    "aten.alias.default": _identity,
    "aten.detach.default": _identity,
    "aten.lift_fresh_copy.default": _identity,
    "aten._to_copy.default": _to_copy,
    "prims.convert_element_type.default": _cast,
    "aten.embedding.default": _embedding,
    "aten.index_select.default": lambda x, dim, index: x.index_select(dim, index),
    "aten.gather.default": lambda x, dim, index, *, sparse_grad=False: x.gather(dim, index),
    "aten.scatter.value": _scatter_value,
    "aten.index_put.default": _index_put,
    "aten.index_add.default": _index_add,
    "aten.index_reduce.default": lambda x, dim, index, source, reduce, *, include_self=True: (
        x.index_reduce(dim, index, source, reduce, include_self)
    ),
    "aten.slice_scatter.default": _slice_scatter,
    "aten.constant_pad_nd.default": _pad,
    "aten.full_like.default": _full_like,
    "aten.zeros_like.default": lambda x, *, dtype=None, **kw: _full_like(x, 0.0, dtype=dtype),
    "aten.ones_like.default": lambda x, *, dtype=None, **kw: _full_like(x, 1.0, dtype=dtype),
    "aten.tril.default": lambda x, diagonal=0: x.tril(diagonal),
    "aten.triu.default": lambda x, diagonal=0: x.triu(diagonal),
    "aten.split_with_sizes.default": _split_with_sizes,
    "aten.split.Tensor": _split,
}

#: Creation ops: their handlers take the region context first (they have no tensor operand).
CREATION: Dict[str, Callable[..., Any]] = {
    "aten.full.default": _full,
    "aten.scalar_tensor.default": _scalar_tensor,
    "aten.arange.default": _arange,
    "aten.arange.start": _arange,
    "aten.arange.start_step": _arange,
}


def _target_name(node) -> str:
    if node.target is operator.getitem:
        return "getitem"
    return str(node.target)


def unsupported_reason(node) -> Optional[str]:
    """Why Ferrite does not compile this FX node, or None when it does."""
    if node.op != "call_function":
        return None if node.op in ("placeholder", "output", "get_attr") else f"{node.op} node"
    name = _target_name(node)
    if name == "getitem":
        source = node.args[0]
        return unsupported_reason(source) if hasattr(source, "op") else None
    if name not in ATEN and name not in CREATION:
        return f"no mapping for {name}"
    val = node.meta.get("val")
    values = val if isinstance(val, (list, tuple)) else [val]
    for v in values:
        if v is None:
            continue
        if not hasattr(v, "dtype"):
            return f"{name} computes a {type(v).__name__}, not a tensor"
        try:
            _dtype(v.dtype)
        except Unsupported as e:
            return f"{name} on {e}"
        if any(not isinstance(s, int) for s in v.shape):
            return f"{name} has a symbolic shape (compile with dynamic=False)"
    for a in _flat(node.args) + _flat(list(node.kwargs.values())):
        if hasattr(a, "op") and a.op != "get_attr":
            v = a.meta.get("val")
            if v is not None and not hasattr(v, "dtype") and not isinstance(v, (list, tuple)):
                return f"{name} takes a symbolic value ({a.name})"
    return None


def _flat(items):
    out = []
    for a in items:
        if isinstance(a, (list, tuple)):
            out.extend(_flat(a))
        else:
            out.append(a)
    return out


# --- Regions: an FX submodule compiled by Ferrite. ------------------------------------------------


class _Context:
    """What creation ops build into: the region's graph."""

    def __init__(self, graph):
        self.graph = graph


def build_region(gm, inputs, frozen: Sequence[int] = ()) -> Tuple[_ferrite.Program, List[str]]:
    """Builds and compiles the Ferrite program of an FX graph module of mapped nodes for
    `inputs` (tensors: only their `dtype` and `shape` are read, but for the positions in
    `frozen`, whose values become constants of the program); returns it with the op names it
    maps. The program's parameters are the other inputs, in order. Reads nothing of torch but
    the graph, so it also runs on stand-ins."""
    g = _ferrite.Graph("region")
    env: Dict[Any, Any] = {}
    ops: List[str] = []
    placeholders = iter(enumerate(inputs))
    frozen = set(frozen)
    started = time.perf_counter()

    def value(a):
        if isinstance(a, (list, tuple)):
            return type(a)(value(x) for x in a)
        if hasattr(a, "op"):
            return env[a]
        return a

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            i, t = next(placeholders)
            if i in frozen:
                env[node] = g.constant(f"frozen{i}", _to_numpy(t))
            else:
                env[node] = g.input(f"in{i}", _dtype(t.dtype), list(t.shape))
        elif node.op == "get_attr":
            tensor = getattr(gm, node.target)
            env[node] = g.constant(node.target.replace(".", "_"), _to_numpy(tensor))
        elif node.op == "call_function":
            name = _target_name(node)
            reason = unsupported_reason(node)
            if reason is not None:
                raise Unsupported(reason)
            args = [value(a) for a in node.args]
            kwargs = {k: value(v) for k, v in node.kwargs.items()}
            if name == "getitem":
                result = args[0][args[1]]
            elif name in CREATION:
                result = CREATION[name](_Context(g), *args, **kwargs)
            else:
                result = ATEN[name](*args, **kwargs)
                ops.append(name)
            env[node] = result
            _check_meta(node, env[node])
        elif node.op == "output":
            outs = node.args[0]
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            g.output(*[env[o] for o in outs])
        else:
            raise Unsupported(f"{node.op} node")
    built = time.perf_counter()
    program = _ferrite.compile(g, target="cpu")
    _TIMES["build"] = built - started
    _TIMES["compile"] = time.perf_counter() - built
    return program, ops


#: How long the last build_region took to build the graph and to compile it, in seconds.
_TIMES: Dict[str, float] = {}


def _check_meta(node, var):
    """The Var's type must be what PyTorch computes (node.meta["val"]), else the mapping is
    wrong for these operands and the region runs eagerly."""
    val = node.meta.get("val")
    if val is None or not isinstance(var, _ferrite.Var) or not hasattr(val, "shape"):
        return
    if tuple(int(s) for s in val.shape) != var.shape or _dtype(val.dtype) != var.dtype:
        raise Unsupported(
            f"{_target_name(node)}: Ferrite computes {var.dtype}{list(var.shape)}, "
            f"PyTorch {val.dtype}{list(val.shape)}"
        )


def _to_numpy(t):
    t = t.detach()
    if t.device.type != "cpu":
        raise Unsupported(f"a tensor on {t.device}")
    return t.numpy()


@dataclasses.dataclass
class Region:
    """One region of a captured graph: the ops Ferrite compiles, or the reason it does not."""

    ops: List[str]
    compiled: bool
    reason: Optional[str] = None
    #: How many of its inputs (parameters, buffers) were built in as constants.
    frozen: int = 0
    #: The AOT graph it belongs to: "inference", or "forward" / "backward" of a training one.
    graph: str = "inference"


@dataclasses.dataclass
class Fallback:
    """An op that runs eagerly in PyTorch, and why."""

    op: str
    reason: str
    #: As Region.graph.
    graph: str = "inference"


def _stamp(t):
    """What identifies a frozen tensor's value without reading it: its storage pointer and
    version counter (bumped by every in-place write), or None for a tensor without a version
    counter (an inference-mode tensor), which is then not frozen."""
    try:
        return (t.data_ptr(), t._version)
    except RuntimeError:
        return None


class _FerriteRegion:
    """Runs an FX submodule of mapped nodes with Ferrite, compiled per input signature. The
    inputs at the positions in `frozen` (parameters and buffers the graph does not mutate) are
    built into the program as constants; a change to one (another tensor, or an in-place write)
    rebuilds it."""

    def __init__(
        self, gm, record: "Explanation", frozen: Sequence[int] = (), graph: str = "inference"
    ):
        self.gm = gm
        self.graph = graph
        self.frozen = tuple(sorted(frozen))
        self.frozen_set = set(self.frozen)
        # Per signature of the other inputs: (program, its frozen positions, their stamps).
        self.programs: Dict[Tuple, Any] = {}
        self.record = record
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        self.tuple_output = isinstance(out_node.args[0], (list, tuple))

    def _compile(self, args):
        import torch

        stamps = {}
        for i in self.frozen:
            if isinstance(args[i], torch.Tensor):
                stamp = _stamp(args[i])
                if stamp is not None:
                    stamps[i] = stamp
        try:
            program, ops = build_region(self.gm, args, frozen=list(stamps))
            self.record.regions.append(
                Region(ops=ops, compiled=True, frozen=len(stamps), graph=self.graph)
            )
            self.record.add_time("ferrite_build", _TIMES["build"])
            self.record.add_time("ferrite_compile", _TIMES["compile"])
        except (Unsupported, _ferrite.FerriteError) as e:
            program, stamps = "eager", {}
            self.record.regions.append(
                Region(ops=[_target_name(n) for n in self.gm.graph.nodes if n.op == "call_function"],
                       compiled=False, reason=str(e), graph=self.graph)
            )
        live = [i for i in range(len(args)) if i not in stamps]
        return program, live, stamps

    def __call__(self, *args):
        # The steady-state path of every call: list comprehensions over precomputed
        # positions, torch.Size as it is in the key.
        import torch

        key = tuple(
            [
                (a.dtype, a.shape) if isinstance(a, torch.Tensor) else a
                for a in [args[i] for i in range(len(args)) if i not in self.frozen_set]
            ]
        )
        entry = self.programs.get(key)
        if entry is not None:
            for i, stamp in entry[2].items():
                a = args[i]
                if a.data_ptr() != stamp[0] or a._version != stamp[1]:
                    entry = None
                    break
        if entry is None:
            entry = self.programs[key] = self._compile(args)
        program, live, _ = entry
        if program == "eager":
            return self.gm(*args)
        try:
            # No detach: under no_grad the tensors need none, and `numpy()` refuses those
            # that would, as it refuses other devices; _to_numpy then says what to do.
            arrays = [args[i].numpy() for i in live]
        except (RuntimeError, TypeError):
            arrays = [_to_numpy(args[i]) for i in live]
        outputs = [torch.from_numpy(o) for o in program.run(*arrays)]
        return tuple(outputs) if self.tuple_output else outputs[0]


@dataclasses.dataclass
class Explanation:
    """What the backend made of a model: per captured graph, its Ferrite regions and the ops
    that fall back to eager PyTorch with the reason."""

    graphs: int = 0
    regions: List[Region] = dataclasses.field(default_factory=list)
    fallbacks: List[Fallback] = dataclasses.field(default_factory=list)
    graph_breaks: List[str] = dataclasses.field(default_factory=list)
    #: How each graph Dynamo captured was lowered to ATen: "trace" (one fake-tensor trace) or
    #: "aot" (AOT dispatch).
    lowerings: List[str] = dataclasses.field(default_factory=list)
    #: Seconds spent, summed over the graphs and regions: "aot" (the lowering to ATen, by the
    #: direct trace or AOT dispatch, up to the partitioner), "partition", "ferrite_build" (the
    #: mapping onto the builder) and "ferrite_compile" (`ferrite.compile`). Dynamo's own
    #: tracing and guards are the rest of a first call.
    seconds: Dict[str, float] = dataclasses.field(default_factory=dict)

    def add_time(self, what: str, seconds: float) -> None:
        self.seconds[what] = self.seconds.get(what, 0.0) + seconds

    def __str__(self) -> str:
        lines = [
            f"{self.graphs} graph(s) captured, {len(self.graph_breaks)} graph break(s); "
            f"{sum(r.compiled for r in self.regions)} region(s) compiled by Ferrite, "
            f"{len(self.fallbacks)} op(s) run eagerly"
        ]
        for i, r in enumerate(self.regions):
            what = f"ferrite, {r.frozen} input(s) frozen" if r.compiled else f"eager ({r.reason})"
            lines.append(
                f"  region {i}{_graph_tag(r.graph)}: {len(r.ops)} ops on {what}: "
                f"{', '.join(sorted(set(r.ops)))}"
            )
        for f in self.fallbacks:
            lines.append(f"  eager{_graph_tag(f.graph)}: {f.op}: {f.reason}")
        for b in self.graph_breaks:
            lines.append(f"  graph break: {b}")
        if self.seconds:
            lines.append("  seconds: " + ", ".join(f"{k} {v:.4f}" for k, v in self.seconds.items()))
        return "\n".join(lines)


def _graph_tag(graph: str) -> str:
    return "" if graph == "inference" else f" ({graph})"


def _partition(
    gm, record: Explanation, frozen: Sequence[int] = (), graph: str = "inference"
) -> Callable[..., Any]:
    """The ATen graph module's forward with its mapped parts replaced by Ferrite regions;
    `frozen` are the positions among the module's placeholders of the inputs to freeze into
    the programs, and `graph` names the AOT graph for the record. A graph that Ferrite maps
    whole is one region, called directly: no partitioner pass (a cold import and tens of
    milliseconds on GPT-2), and no FX module around the region at every call."""
    if _maps_whole(gm):
        return _FerriteRegion(gm, record, frozen, graph)
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            # Regions hold calls only: placeholders, constants and the output stay outside
            # (the partitioner asks about every node).
            if node.op != "call_function":
                return False
            if _in_torch(node):
                if node.target is not operator.getitem:
                    record.fallbacks.append(Fallback(_target_name(node), VIEW_REASON, graph))
                return False
            reason = unsupported_reason(node)
            if reason is not None:
                record.fallbacks.append(Fallback(op=_target_name(node), reason=reason, graph=graph))
            return reason is None

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    # By name: the partitioner's graph may hold copies of the nodes.
    frozen_names = {placeholders[i].name for i in frozen if i < len(placeholders)}
    partitioner = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=True)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions())
    for node in fused.graph.nodes:
        if node.op == "call_module" and str(node.target).startswith("fused_"):
            positions = [
                i
                for i, a in enumerate(node.args)
                if getattr(a, "op", None) == "placeholder" and a.name in frozen_names
            ]
            region = _FerriteRegion(getattr(fused, node.target), record, positions, graph)
            # A child module's slot takes only a module.
            setattr(fused, node.target, _module(region))
    return fused.forward


def _maps_whole(gm) -> bool:
    """Whether every call in the graph is mapped and every output is a distinct result of
    one: a region returns fresh tensors, so an input returned as it is, or one tensor
    returned twice, needs the partitioner's graph around the region."""
    outputs = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and (_in_torch(node) or unsupported_reason(node) is not None):
            return False
        if node.op == "output":
            outputs = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
    return all(getattr(o, "op", None) == "call_function" for o in outputs) and len(
        set(outputs)
    ) == len(outputs)


#: Why `_views_in_torch`'s views run in torch, for `explain`.
VIEW_REASON = "a view returned aliasing an input or another output: taken in torch, as in eager"


def _in_torch(node) -> bool:
    """Whether `_views_in_torch` left `node` (or, for a getitem, the view it reads) to torch."""
    if node.target is operator.getitem and hasattr(node.args[0], "meta"):
        node = node.args[0]
    return bool(node.meta.get(TORCH_VIEW))


def _module(region: "_FerriteRegion"):
    """`region` as a torch module (defined here, so that importing this file needs no torch)."""
    import torch

    class FerriteRegion(torch.nn.Module):
        def __init__(self, region):
            super().__init__()
            self.region = region

        def forward(self, *args):
            return self.region(*args)

    return FerriteRegion(region)


def _frozen_inputs() -> List[int]:
    """The positions among the AOT graph's inputs of the parameters and buffers (AOT's static
    inputs) that the graph does not mutate: those to freeze."""
    import torch

    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    if meta is None:
        return []
    infos = meta.input_info
    return [
        i
        for i in meta.static_input_indices or []
        if i < len(infos) and not infos[i].mutates_data and not infos[i].mutates_metadata
    ]


def _decompositions():
    """The core ATen decompositions of the ops Ferrite does not map: a mapped op (addmm,
    native_layer_norm, gelu, the ops of ATEN and CREATION) is compiled as it is, so tracing
    does not spend time decomposing it. Built once per process from the table that
    `core_aten_decompositions` starts from: that function also lists every
    CompositeImplicitAutograd op for torch.export (a third of a second, at every call), which
    a trace below autograd decomposes anyway."""
    global _DECOMPOSITIONS
    if _DECOMPOSITIONS is None:
        import torch._decomp

        core = getattr(torch._decomp, "_core_aten_decompositions_post_autograd", None)
        table = core() if core is not None else torch._decomp.core_aten_decompositions()
        _DECOMPOSITIONS = {
            op: fn for op, fn in table.items() if str(op) not in ATEN and str(op) not in CREATION
        }
    return _DECOMPOSITIONS


_DECOMPOSITIONS = None


def _trace_inference(gm, example_inputs):
    """An inference graph's ATen graph by a fake-tensor trace (`make_fx` with the
    decompositions of the unmapped ops), without AOT autograd's metadata pass, and the
    positions of its parameters and buffers; None where AOT is needed: symbolic inputs, or a
    graph that mutates its inputs. In-place ops on its own tensors (which the partitioner could
    not order) are made out-of-place where nothing else views their tensor, the rest by a
    second trace through functionalization."""
    import torch
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    if not all(isinstance(t, torch.Tensor) for t in example_inputs):
        return None
    fake = detect_fake_mode(example_inputs)
    if fake is None:
        # Real example inputs (a `_PerShape` graph at one call's shapes).
        from torch._subclasses.fake_tensor import FakeTensorMode

        fake = FakeTensorMode()
    inputs = [fake.from_tensor(t, static_shapes=True) for t in example_inputs]

    def mutates(aten_gm):
        return any(
            node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload)
            and node.target._schema.is_mutable
            for node in aten_gm.graph.nodes
        )

    with fake:
        aten_gm = make_fx(gm, decomposition_table=_decompositions())(*inputs)
        if mutates(aten_gm) and _out_of_place(aten_gm):
            aten_gm.recompile()
        if mutates(aten_gm):
            # Views stay views: Ferrite maps them, not their *_copy forms.
            functional = torch.func.functionalize(gm, remove="mutations")
            aten_gm = make_fx(functional, decomposition_table=_decompositions())(*inputs)
            if mutates(aten_gm):
                return None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    static = [
        i
        for i, (node, t) in enumerate(zip(placeholders, example_inputs))
        if isinstance(t, torch.nn.Parameter)
        or node.meta.get("tensor_dict", {}).get("_dynamo_static_input_type")
    ]
    return aten_gm, static


def _out_of_place(aten_gm) -> bool:
    """Replaces each in-place op (`add_`) whose target is a tensor of the graph's own that
    nothing else views (the `arange(n).add_(offset)` of transformers' masks) by its
    out-of-place form, read by the uses after it: the second, functionalizing trace is then
    not needed. Returns whether it replaced any; others (on inputs, on views, with a dtype
    the out-of-place op would promote) stay for functionalization."""
    import torch

    graph = aten_gm.graph
    order = {node: i for i, node in enumerate(graph.nodes)}
    base: Dict[Any, Any] = {}
    viewed = set()
    for node in graph.nodes:
        source = _aliased_source(node)
        base[node] = node if source is None else base[source]
        if source is not None:
            viewed.add(base[node])
    replaced = False
    for node in list(graph.nodes):
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        schema = target._schema
        writes = [a.alias_info is not None and a.alias_info.is_write for a in schema.arguments]
        if not schema.name.startswith("aten::") or not writes or not writes[0] or any(writes[1:]):
            continue
        packet = getattr(torch.ops.aten, schema.name[len("aten::") :].rstrip("_"), None)
        functional = getattr(packet, target._overloadname, None) if packet is not None else None
        self_ = node.args[0]
        if (
            functional is None
            or functional._schema.is_mutable
            or getattr(self_, "op", None) != "call_function"
            or base.get(self_) is not self_
            or self_ in viewed
        ):
            continue
        val, result = self_.meta.get("val"), node.meta.get("val")
        others = [a.meta.get("val") if hasattr(a, "op") else a for a in node.args[1:]]
        try:
            promoted = torch.result_type(val, others[0]) if others else val.dtype
        except (TypeError, RuntimeError):
            continue
        if result is None or promoted != val.dtype:
            continue
        with graph.inserting_before(node):
            fresh = graph.call_function(functional, node.args, dict(node.kwargs))
        fresh.meta = dict(node.meta)
        order[fresh] = order[node]
        base[fresh] = fresh
        # The uses of the tensor after the write read the new value; those before, the old.
        for user in list(self_.users):
            if user is not node and user is not fresh and order[user] > order[node]:
                user.replace_input_with(self_, fresh)
        node.replace_all_uses_with(fresh)
        graph.erase_node(node)
        replaced = True
    if replaced:
        graph.lint()
    return replaced


def _aliased_source(node):
    """The node argument whose storage `node`'s result shares (a view op's `self`, the view
    list a getitem reads), or None for a result of its own."""
    import torch

    if node.op != "call_function":
        return None
    if node.target is operator.getitem:
        source = node.args[0]
        return source if _aliased_source(source) is not None else None
    if not isinstance(node.target, torch._ops.OpOverload):
        return None
    # A view's schema marks its result and its `self` with one alias set, `Tensor(a)`; the
    # elements of a list result (`split`'s `Tensor(a)[]`) carry theirs out of reach.
    schema = node.target._schema
    if not any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
        return None
    for arg, value in zip(schema.arguments, node.args):
        info = arg.alias_info
        if info is not None and not info.is_write and hasattr(value, "op"):
            return value
    return None


#: The `node.meta` key of the views that `_views_in_torch` leaves to torch.
TORCH_VIEW = "ferrite_torch_view"


def _views_in_torch(aten_gm) -> None:
    """Makes the outputs that eager PyTorch returns as views of an input, or of a tensor that
    another output also views (or is), views again: each is taken at run time in torch by a
    copy of its chain of view ops, from the input or from that tensor (then an output of its
    region), as AOT autograd regenerates aliased outputs. A Ferrite region returns fresh
    tensors, so without this a caller that writes into such an output (or into the input
    afterwards) would see otherwise than in eager. The original chains stay for the graph's
    other uses of the views, inside the regions. A view of an intermediate that no other
    output shares may stay a copy: nothing else can see its storage."""
    graph = aten_gm.graph
    output = next(n for n in graph.nodes if n.op == "output")
    base: Dict[Any, Any] = {}
    for node in graph.nodes:
        source = _aliased_source(node)
        base[node] = node if source is None else base[source]
    flat = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    outs = [o for o in flat if hasattr(o, "op")]
    sharing: Dict[Any, int] = {}
    for o in outs:
        sharing[base[o]] = sharing.get(base[o], 0) + 1
    rebuilt: Dict[Any, Any] = {}

    def rebuild(node):
        if node is base[node]:
            return node
        if node not in rebuilt:
            source = _aliased_source(node)
            copy_of_source = rebuild(source)
            with graph.inserting_before(output):
                copy = graph.call_function(
                    node.target,
                    tuple(copy_of_source if a is source else a for a in node.args),
                    dict(node.kwargs),
                )
            copy.meta = dict(node.meta)
            copy.meta[TORCH_VIEW] = True
            rebuilt[node] = copy
        return rebuilt[node]

    replaced = [
        rebuild(o)
        if hasattr(o, "op")
        and o is not base[o]
        and (base[o].op in ("placeholder", "get_attr") or sharing[base[o]] > 1)
        else o
        for o in flat
    ]
    if rebuilt:
        output.args = (type(flat)(replaced) if flat is output.args[0] else replaced[0],)
        graph.eliminate_dead_code()
        graph.lint()
        aten_gm.recompile()


def _needs_grad(gm, example_inputs) -> bool:
    """Whether AOT autograd would make this a training graph."""
    import torch

    if not torch.is_grad_enabled():
        return False
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    return any(t.requires_grad for t in tensors) or any(p.requires_grad for p in gm.parameters())


_LAST = Explanation()


def make_backend(record: Optional[Explanation] = None):
    """A backend that records what it does into `record` (ferrite_backend records into a
    module-level Explanation that `last_explanation()` returns)."""

    def backend(gm, example_inputs, **kwargs):
        target = record if record is not None else _LAST
        entered = time.perf_counter()
        if _symbolic(example_inputs) and not _needs_grad(gm, example_inputs):
            # Dynamo's dynamic shapes: compiled per concrete shape at call time.
            target.lowerings.append("per-shape")
            return _PerShape(gm, backend)
        if not _needs_grad(gm, example_inputs):
            direct = _trace_inference(gm, example_inputs)
            if direct is not None:
                aten_gm, frozen = direct
                target.lowerings.append("trace")
                started = time.perf_counter()
                target.add_time("aot", started - entered)
                target.graphs += 1
                _views_in_torch(aten_gm)
                compiled = _partition(aten_gm, target, frozen)
                target.add_time("partition", time.perf_counter() - started)
                return compiled
        # Imported here: importing AOT autograd is a noticeable part of a first call.
        import torch._functorch.config
        from functorch.compile import min_cut_rematerialization_partition
        from torch._dynamo.backends.common import aot_autograd

        target.lowerings.append("aot")
        traced = []

        def compiler(graph: str):
            def compile_graph(aten_gm, aten_inputs):
                from functorch.compile import make_boxed_func

                started = time.perf_counter()
                if not traced:
                    # AOT traced (and, for training, differentiated and split) before the
                    # first of its graphs reaches a compiler.
                    target.add_time("aot", started - entered)
                    traced.append(True)
                target.graphs += 1
                # A training step's parameters change at every optimizer step: they stay
                # inputs, where an inference graph freezes them.
                frozen = _frozen_inputs() if graph == "inference" else []
                compiled = _partition(aten_gm, target, frozen, graph)
                target.add_time("partition", time.perf_counter() - started)
                return make_boxed_func(compiled)

            return compile_graph

        # No CSE of the joint graph before partitioning: Ferrite's optimizer does its own, and
        # functorch's imports Inductor's pattern matcher, seconds of a cold first step.
        with torch._functorch.config.patch(cse=False):
            return aot_autograd(
                fw_compiler=compiler("forward"),
                bw_compiler=compiler("backward"),
                inference_compiler=compiler("inference"),
                partition_fn=min_cut_rematerialization_partition,
                decompositions=_decompositions(),
            )(gm, example_inputs)

    return backend


def _symbolic(example_inputs) -> bool:
    """Whether Dynamo passed symbolic sizes: a SymInt input, or a tensor of symbolic shape."""
    import torch

    for t in example_inputs:
        if isinstance(t, torch.SymInt):
            return True
        if isinstance(t, torch.Tensor) and any(not isinstance(d, int) for d in t.shape):
            return True
    return False


class _PerShape:
    """A graph with Dynamo's symbolic sizes (``dynamic=True``, or automatic dynamic after a
    shape changed), run compiled: at each call the sizes are concrete, so the graph is traced
    again at them (on the call's tensors, the ints as themselves) and compiled by the backend
    as a static graph, once per distinct shapes and sizes, and kept. Ferrite compiles in
    milliseconds, so a new shape costs a compile, not a fall back to eager."""

    def __init__(self, gm, backend):
        self.gm = gm
        self.backend = backend
        self.programs: Dict[Any, Callable[..., Any]] = {}
        # Inputs whose value the graph reads back as a scalar (`.item()`): written into the
        # static graph, so part of its key.
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.read = {
            i
            for i, p in enumerate(placeholders)
            if any(u.op == "call_method" and u.target == "item" for u in p.users)
        }

    def __call__(self, *args):
        import torch

        key = tuple(
            a.item()
            if i in self.read and isinstance(a, torch.Tensor) and a.dim() == 0
            else (tuple(a.shape), a.dtype, a.requires_grad)
            if isinstance(a, torch.Tensor)
            else a
            for i, a in enumerate(args)
        )
        fn = self.programs.get(key)
        if fn is None:
            fn = self._static(args)
            self.programs[key] = fn
        return fn(*args)

    def _static(self, args):
        import torch
        from torch.fx.experimental.proxy_tensor import make_fx

        # The graph with every size a number: Dynamo's own code with the call's sizes and
        # scalars written in, traced on the call's tensors.
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        specialized = _specialize(self.gm, args)
        static_gm = make_fx(specialized)(*[args[i] for i in tensors])
        compiled = self.backend(static_gm, [args[i] for i in tensors])
        return lambda *call: compiled(*[call[i] for i in tensors])


def _specialize(gm, args):
    """A copy of Dynamo's graph module `gm` whose inputs are the tensor arguments alone: the
    placeholders of the other arguments (SymInts, as ints) are replaced by their values, and
    so is each `.item()` of a 0-dim input tensor (Dynamo lifts a module's float constant, a
    layer norm's eps, as one)."""
    import copy

    import torch

    gm = copy.deepcopy(gm)
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    values = dict(zip(placeholders, args))
    for node in list(graph.nodes):
        if node.op == "call_method" and node.target == "item" and node.args[0] in values:
            t = values[node.args[0]]
            if isinstance(t, torch.Tensor) and t.dim() == 0:
                node.replace_all_uses_with(t.item())
                graph.erase_node(node)
    for node, a in values.items():
        if not isinstance(a, torch.Tensor):
            node.replace_all_uses_with(a)
            graph.erase_node(node)
    graph.lint()
    gm.recompile()
    return gm


#: The backend registered as `backend="ferrite"`.
ferrite_backend = make_backend()


def last_explanation() -> Explanation:
    """What `ferrite_backend` did in this process so far."""
    return _LAST


def explain_training(fn, *args, **kwargs) -> Explanation:
    """As `explain`, for training: compiles `fn`, calls it on `args` with grad mode on and calls
    `.backward()` on its result (a loss; a tensor of more elements is summed first), and
    reports the regions and fallbacks of the forward and backward graphs."""
    import torch

    record = Explanation()
    torch._dynamo.reset()
    try:
        with torch.enable_grad():
            compiled = torch.compile(fn, backend=make_backend(record), dynamic=False)
            result = compiled(*args, **kwargs)
            (result if result.numel() == 1 else result.sum()).backward()
    finally:
        torch._dynamo.reset()
    return record


def explain(model, *args, **kwargs) -> Explanation:
    """Compiles `model` with the Ferrite backend, calls it on `args` under `torch.no_grad()`,
    and reports the regions Ferrite compiled, the ops that fall back to eager PyTorch with
    their names and why, and Dynamo's graph breaks."""
    import torch

    record = Explanation()
    torch._dynamo.reset()
    with torch.no_grad():
        try:
            breaks = torch._dynamo.explain(model)(*args, **kwargs)
            record.graph_breaks = [str(b.reason) for b in getattr(breaks, "break_reasons", [])]
        finally:
            torch._dynamo.reset()
        compiled = torch.compile(model, backend=make_backend(record), dynamic=False)
        compiled(*args, **kwargs)
    torch._dynamo.reset()
    return record
