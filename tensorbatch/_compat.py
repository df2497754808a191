"""Every touch point with torch-version-dependent or private torch APIs lives here."""

from __future__ import annotations

import sys
from typing import Any

import torch

# The base of torch's no_grad-style blocks (a context manager that decorates functions and generators, each
# call in a fresh copy): private, present since torch 1.x; tensorbatch.nn's skip-existing and dispatch blocks use it.
from torch.utils._contextlib import _DecoratorContextManager as _DecoratorContextManager

DecoratorContextManager = _DecoratorContextManager

try:  # private module, stable since torch 2.2; the public spelling arrived later
    from torch.utils import _pytree as pytree
except ImportError:  # pragma: no cover
    pytree = None  # type: ignore[assignment]


def register_pytree_node(
    cls: type, flatten: Any, unflatten: Any, flatten_with_keys: Any, to_dumpable: Any, from_dumpable: Any
) -> None:
    """Register ``cls`` with torch's pytree (used by torch.compile, export and vmap)."""
    if pytree is None:  # pragma: no cover
        return
    pytree.register_pytree_node(
        cls,
        flatten,
        unflatten,
        serialized_type_name=f"{cls.__module__}.{cls.__qualname__}",
        flatten_with_keys_fn=flatten_with_keys,
        to_dumpable_context=to_dumpable,
        from_dumpable_context=from_dumpable,
    )


# torch's ``_broadcast_to_and_flatten(tree, treespec)`` (private, stable since torch 1.13): vmap broadcasts its
# in_dims/out_dims over the tree that ``treespec`` unflattens from ints, and needs the same node types at the
# root (a 1-tuple ``out_dims=(0,)`` over one output is a tuple there: torch special-cases a tensor, nothing else).
_BROADCAST_CODE = getattr(getattr(pytree, "_broadcast_to_and_flatten", None), "__code__", None)


def broadcasting_one_tuple() -> bool:
    """True when vmap broadcasts a 1-tuple ``out_dims`` over a tree whose root is the node being unflattened.

    Asked by a node's unflatten given vmap's placeholders: torch's ``_broadcast_to_and_flatten`` calls
    ``tree_unflatten``, which calls ``TreeSpec.unflatten``, which calls the root node's unflatten (the frame
    that asks): three frames up. The root then comes back as a 1-tuple of itself, so that
    ``vmap(f, out_dims=(0,))`` over a function returning one TensorDict broadcasts as over one tensor (torch
    special-cases a tensor only). No patching of torch; False where torch calls otherwise.
    """
    try:
        frame = sys._getframe(4)
    except ValueError:  # pragma: no cover - a stack that shallow is not vmap's
        return False
    if frame.f_code is not _BROADCAST_CODE:
        return False
    tree = frame.f_locals.get("tree")
    return type(tree) is tuple and len(tree) == 1


def pytree_nodes() -> dict[type, Any]:
    """The pytree registry of torch (``SUPPORTED_NODES``), for the compat layer's ``_exclude_td_from_pytree``."""
    nodes: dict[type, Any] = pytree.SUPPORTED_NODES
    return nodes


def mapping_key(key: str | tuple[str, ...]) -> Any:
    """A pytree key entry for a mapping key."""
    return pytree.MappingKey(key)


def fake_mode_active() -> bool:
    """True under an active ``FakeTensorMode``: tensors made then are fake, and files cannot be mapped."""
    active = getattr(torch._guards, "active_fake_mode", None)  # private API (as tensordict uses it)
    return active is not None and active() is not None


try:  # private API (stable since torch 2.0): functorch's batched tensors, as vmap passes them to a function
    # ``is_batched(tensor)``: True for a tensor batched by ``torch.vmap`` (its mapped dim hidden). The C
    # function itself (no wrapper: the pointwise ops ask it once per call); dynamo traces it.
    from torch._C._functorch import is_batchedtensor as _is_batchedtensor
except ImportError:  # pragma: no cover

    def _is_batchedtensor(tensor: torch.Tensor) -> bool:
        return False


is_batched = _is_batchedtensor

# ``transforms_active()``: True inside a functorch transform (vmap, grad, jvp...), under torch.compile too
# (dynamo traces it). Global, no tensor to ask: the pointwise ops ask it once per call.
transforms_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)

# ``dynamo_compiling()``: True while dynamo traces (it folds the call), False otherwise: a function that returns
# False in eager, cheaper than ``torch.compiler.is_compiling`` (which also asks TorchScript). Not True under
# non-strict export, where Python runs as in eager.
dynamo_compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)


# ``exporting()``: True while ``torch.export`` traces (strict or not); dynamo reads the flag as it traces.
exporting = getattr(torch.compiler, "is_exporting", lambda: False)


def skip_dynamo_frame(fn: Any) -> None:
    """Have dynamo run the frames of ``fn`` (a function or method) as they are, still tracing it where inlined.

    For a ``__torch_function__``: called by code dynamo runs eagerly inside a compiled region (a functorch
    transform, pytree), it compiled it as a frame of its own, guarded without the function it got (a
    ``method-wrapper``): ``t.shape`` gave the attribute read before it (``t.is_nested``: False). Private API
    (``torch._dynamo.eval_frame.skip_code`` without importing dynamo); nothing where it is missing.
    """
    frames: Any = getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None)
    strategy, action = getattr(frames, "_FrameExecStrategy", None), getattr(frames, "_FrameAction", None)
    if strategy is None or action is None or not hasattr(frames, "set_code_exec_strategy"):
        return
    frames.set_code_exec_strategy(getattr(fn, "__func__", fn).__code__, strategy(action.SKIP, action.DEFAULT))


try:  # private API (stable since torch 2.0)
    from torch._C._functorch import CVmapInterpreterPtr as _CVmapInterpreterPtr
    from torch._C._functorch import TransformType as _TransformType
    from torch._C._functorch import get_unwrapped as _get_unwrapped
    from torch._C._functorch import maybe_get_bdim as _maybe_get_bdim
    from torch._C._functorch import maybe_get_level as _maybe_get_level
    from torch._C._functorch import peek_interpreter_stack as _peek_interpreter_stack
except ImportError:  # pragma: no cover
    _TransformType = _get_unwrapped = _maybe_get_bdim = _peek_interpreter_stack = None  # type: ignore[assignment,misc]
    _CVmapInterpreterPtr = _maybe_get_level = None  # type: ignore[assignment,misc]

# ``mapped_dim(tensor)``: the dim that the innermost ``torch.vmap`` maps of a batched tensor, -1 for another
# tensor. The C function itself (pytree's unflatten asks it of every leaf on vmap's common path).
mapped_dim: Any = _maybe_get_bdim if _maybe_get_bdim is not None else (lambda tensor: -1)


def batched_dim(tensor: Any) -> tuple[int, torch.Size]:
    """The dim that the innermost ``torch.vmap`` maps, of a batched tensor, and the shape it maps it in.

    That shape is the tensor's own shape with that dim. Not traceable by dynamo.
    """
    return int(_maybe_get_bdim(tensor)), _get_unwrapped(tensor).shape


def in_vmap() -> bool:
    """True inside a ``torch.vmap`` (functorch) transform, where leaves lose or gain the mapped dims."""
    if _peek_interpreter_stack is None:  # pragma: no cover
        return False
    interpreter = _peek_interpreter_stack()
    return interpreter is not None and interpreter.key() == _TransformType.Vmap


def in_other_transform() -> bool:
    """True when the innermost functorch transform is not ``torch.vmap`` (grad, vjp, jvp, jacrev...)."""
    if _peek_interpreter_stack is None:  # pragma: no cover
        return False
    interpreter = _peek_interpreter_stack()
    return interpreter is not None and interpreter.key() != _TransformType.Vmap


def vmap_level() -> tuple[int, int] | None:
    """The level and the batch size of the innermost ``torch.vmap`` when it is the innermost transform, else None."""
    if _peek_interpreter_stack is None:  # pragma: no cover
        return None
    interpreter = _peek_interpreter_stack()
    if interpreter is None or interpreter.key() != _TransformType.Vmap:
        return None
    return interpreter.level(), _CVmapInterpreterPtr(interpreter).batchSize()


# ``tensor_level(tensor)``: the level of the transform (vmap, grad...) whose wrapper a tensor is, -1 for a plain
# tensor. The C function itself.
tensor_level: Any = _maybe_get_level if _maybe_get_level is not None else (lambda tensor: -1)


def nested_view_from_buffer(data: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """A strided nested tensor of the components ``sizes`` (one row each) laid one after the other in ``data``.

    A view of ``data`` through torch's private ``_nested_view_from_buffer`` (as tensordict does); without
    it, a copy built from the components.
    """
    strides_offsets = getattr(torch, "_nested_compute_contiguous_strides_offsets", None)
    view = getattr(torch, "_nested_view_from_buffer", None)
    if strides_offsets is not None and view is not None and len(sizes):
        strides, offsets = strides_offsets(sizes)
        data = data.reshape(-1)
        # the offsets count from the start of the storage, not of the view
        return view(data, sizes, strides, offsets + data.storage_offset())  # type: ignore[no-any-return]
    comps, start = [], 0  # pragma: no cover - older or newer torch
    for row in sizes.tolist():
        n = 1
        for s in row:
            n *= s
        comps.append(data[start : start + n].view(row))
        start += n
    return torch.nested.as_nested_tensor(comps, layout=torch.strided)


def allow_in_weights_only_load(*entries: Any) -> None:
    """Allowlist rebuild functions (and the classes they take) for ``torch.load(weights_only=True)``.

    Called once by each module that defines rebuild functions, at its import, with exactly the functions its
    ``__reduce__`` methods return (and the classes those pickles name). An entry ``(obj, "module.name")``
    makes the pickled name ``module.name`` resolve to ``obj`` in a weights-only load only (a safer variant of
    the function a trusted load calls). ``torch.serialization.add_safe_globals`` (torch >= 2.4); nothing on
    an older torch, whose default load is not weights-only.

    Every function listed must be safe on crafted arguments: check the types it is given (a class must be
    one of tensorbatch's, or a TensorClass the user allowlisted) and run no code named by the data.
    """
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:
        add(list(entries))


try:  # private module (``torch.utils.data._utils.collate``), its map documented in ``collate``'s docstring
    from torch.utils.data._utils.collate import default_collate_fn_map as _default_collate_fn_map
except ImportError:  # pragma: no cover
    _default_collate_fn_map = None  # type: ignore[assignment]


def register_default_collate(cls: type, fn: Any) -> None:
    """Have ``torch.utils.data.default_collate`` call ``fn(batch, collate_fn_map=...)`` for elements of ``cls``.

    Through torch's ``default_collate_fn_map`` (consulted by exact type, then by ``isinstance`` in order);
    an entry already registered for ``cls`` is kept. Nothing where torch lacks the map.
    """
    if _default_collate_fn_map is not None:
        _default_collate_fn_map.setdefault(cls, fn)
