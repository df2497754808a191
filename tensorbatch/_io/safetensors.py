"""``to_safetensors`` / ``from_safetensors``: a TensorDict as a safetensors file, through the ``safetensors`` package.

Each tensor is stored under its nested key joined with ``"."`` (the names of a model's ``state_dict``). The
structure (each level's batch size and dim names, lazy stacks' stack dim, tensorclasses, non-tensor
values) is one JSON document in the file's metadata under ``"tensordict"``, as tensordict 0.15 writes it,
so either library reads the other's files. A file without it (a model checkpoint) loads as a nested
TensorDict with an empty batch size.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .._errors import fmt_path
from .._nontensor import NonTensorData, NonTensorStack, is_non_tensor
from .._ops.traverse import is_td, stacked_members
from .._unbatched import UnbatchedTensor

_METADATA_KEY = "tensordict"  # the metadata entry holding the structure
_VERSION = 1  # the version of that JSON document


def _safetensors() -> Any:
    try:
        import safetensors.torch
    except ImportError:
        raise ImportError(
            "safetensors files need the safetensors package: pip install 'tensorbatch[safetensors]'"
        ) from None
    return safetensors


def to_safetensors(data: Any, path: str | Path) -> None:
    """Save a TensorDict (or TensorClass) to a safetensors file; :func:`from_safetensors` rebuilds it.

    Tensors sharing memory are saved as separate copies, and tensors on another device through the CPU.
    The file is written to a temporary sibling, then renamed into place.

    Args:
        data: the TensorDict, lazy stack or TensorClass to save.
        path: the file to write.

    Raises:
        TypeError: for what the format cannot hold, naming the key: a nested or sparse tensor, a non-tensor
            value that is not plain JSON (str, int, float, bool, None, list, dict), a stack of non-tensor
            values, a lazy stack whose members have different keys, or a bare non-tensor value.
        ValueError: when two keys get the same name once joined with ``"."`` (``"a.b"`` and ``("a", "b")``).

    Examples:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> from tensorbatch import TensorDict, from_safetensors, to_safetensors
        >>> td = TensorDict({"weight": torch.ones(2, 3), "sub": {"bias": torch.zeros(2)}}, batch_size=[2])
        >>> path = Path(tempfile.mkdtemp()) / "td.safetensors"
        >>> to_safetensors(td, path)
        >>> loaded = from_safetensors(path)
        >>> loaded.batch_size, loaded["sub", "bias"]
        (torch.Size([2]), tensor([0., 0.]))
    """
    from ._shared import atomic_target

    st = _safetensors()
    if is_non_tensor(data) or not (is_td(data) or hasattr(data, "_non_tensordict")):
        raise TypeError(
            f"to_safetensors saves a TensorDict or a TensorClass, not a {type(data).__name__} "
            "(put a non-tensor value in a TensorDict first)"
        )
    tensors: dict[str, torch.Tensor] = {}
    root = _encode(data, (), tensors)  # everything is checked before the file is opened
    _unshare(tensors)
    metadata = {_METADATA_KEY: json.dumps({"version": _VERSION, "root": root})}
    with atomic_target(path) as tmp:
        st.torch.save_file(tensors, tmp, metadata=metadata)


def _encode(td: Any, path: tuple[str, ...], tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The JSON description of one level; its tensors go to ``tensors`` under their dotted names."""
    extras: dict[str, Any] = {}
    level: dict[str, Any] = {"batch_size": list(td.batch_size)}
    if hasattr(td, "_non_tensordict"):  # a TensorClass: its class, then its TensorDict's level
        level["class"] = str(type(td))
        extras = {k: NonTensorData(v) for k, v in td._non_tensordict.items() if v is not None}
        td = td._tensordict
    names = td._maybe_names()
    level["names"] = list(names) if names is not None else None
    stacked = stacked_members(td)
    if stacked is not None:
        keys = [sorted(member.keys(True, True)) for member in stacked[1]]
        if any(k != keys[0] for k in keys):
            raise TypeError(
                f"cannot save the lazy stack at {fmt_path(path) if path else 'the root'} as "
                "safetensors: its members have different keys (give them the same keys first)"
            )
        level["stack_dim"] = stacked[0]
    entries = level["keys"] = {}
    for key, value in [*td.items(), *extras.items()]:
        at = (*path, key)
        if isinstance(value, NonTensorStack):
            raise TypeError(
                f"cannot save the non-tensor stack at {fmt_path(at)} as safetensors: only single "
                "JSON values are supported"
            )
        if is_non_tensor(value):
            if not _is_json(value.data):
                raise TypeError(
                    f"cannot save the non-tensor value at {fmt_path(at)} as safetensors: its type "
                    f"{type(value.data).__name__} is not a JSON value (str, int, float, bool, None, "
                    "list or dict)"
                )
            entries[key] = {"non_tensor": value.data}
        elif is_td(value) or hasattr(value, "_non_tensordict"):
            entries[key] = {"td": _encode(value, at, tensors)}
        else:
            if value.is_nested or value.layout != torch.strided:
                raise TypeError(
                    f"cannot save the tensor at {fmt_path(at)} as safetensors: only dense tensors are "
                    f"supported, got {'a nested tensor' if value.is_nested else value.layout}"
                )
            name = ".".join(at)
            if name in tensors:
                raise ValueError(
                    f"two keys of the TensorDict get the safetensors name {name!r} (one is {fmt_path(at)})"
                )
            tensors[name] = value.detach().as_subclass(torch.Tensor).cpu().contiguous()
            entries[key] = {"tensor": name}
            if isinstance(value, UnbatchedTensor):  # tensordict's mark: its shape need not start with the batch
                entries[key]["unbatched"] = True
    return level


def _is_json(value: Any) -> bool:
    """Whether JSON gives ``value`` back with the same types (no tuples, no non-string keys)."""
    if type(value) in (str, int, float, bool, type(None)):
        return True
    if type(value) is list:
        return all(_is_json(v) for v in value)
    return type(value) is dict and all(type(k) is str and _is_json(v) for k, v in value.items())


def _unshare(tensors: dict[str, torch.Tensor]) -> None:
    """Copy the tensors that overlap another one in memory (safetensors refuses those)."""
    by_storage: dict[int, list[str]] = {}
    for name, tensor in tensors.items():
        if tensor.numel():
            by_storage.setdefault(tensor.untyped_storage().data_ptr(), []).append(name)
    for names in by_storage.values():
        end = -1
        for name in sorted(names, key=lambda n: tensors[n].data_ptr()):
            tensor = tensors[name]
            if tensor.data_ptr() < end:
                tensors[name] = tensor.clone()
            else:
                end = tensor.data_ptr() + tensor.numel() * tensor.element_size()


def from_safetensors(path: str | Path, *, device: Any = None) -> Any:
    """Load a safetensors file as a TensorDict.

    A file written by :func:`to_safetensors` (here or by tensordict) comes back with its structure: batch
    sizes, dim names, lazy stacks, tensorclasses (when their module is imported) and non-tensor values.
    Any other file, such as a model checkpoint, loads as a nested TensorDict with an empty batch size, each
    name split on ``"."``: the layout of ``TensorDict.from_module``, so ``to_module`` writes it into a model.

    Args:
        path: the file.
        device: where to load the tensors (and the result's device); None: the CPU, and no device.

    Raises:
        ValueError: for a structure of another version, or tensors the structure does not name.
        RuntimeError: when a saved tensorclass is not defined (import its module first).

    Examples:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> from safetensors.torch import save_file
        >>> from tensorbatch import from_safetensors
        >>> path = Path(tempfile.mkdtemp()) / "model.safetensors"
        >>> save_file({"0.weight": torch.ones(4, 3), "0.bias": torch.zeros(4)}, path)
        >>> from_safetensors(path)["0", "weight"].shape
        torch.Size([4, 3])
    """
    from .._td import TensorDict

    st = _safetensors()
    device = torch.device(device) if device is not None else None
    with st.safe_open(str(path), framework="pt", device="cpu" if device is None else str(device)) as file:
        doc = (file.metadata() or {}).get(_METADATA_KEY)
        if doc is None:
            out = TensorDict(device=device)
            for name in file.keys():  # (a safetensors file, not a dict)
                out.set(tuple(name.split(".")), file.get_tensor(name))
            return out
        structure = json.loads(doc)
        if structure.get("version") != _VERSION:
            raise ValueError(
                f"cannot load {path}: its tensordict structure has version "
                f"{structure.get('version')!r}, and this version reads version {_VERSION}"
            )
        used: set[str] = set()
        out = _decode(structure["root"], file, device, path, used)
        unnamed = set(file.keys()) - used
        if unnamed:
            raise ValueError(f"the tensors {sorted(unnamed)} of {path} are not in its tensordict structure")
        return out


def _decode(level: dict[str, Any], file: Any, device: Any, path: Any, used: set[str]) -> Any:
    from .._lazy import LazyStackedTensorDict
    from .._td import TensorDict

    td = TensorDict(batch_size=level["batch_size"], names=level.get("names"), device=device)
    for key, entry in level["keys"].items():
        if "tensor" in entry:
            used.add(entry["tensor"])
            tensor = file.get_tensor(entry["tensor"])
            td.set(key, UnbatchedTensor(tensor) if entry.get("unbatched") else tensor)
        elif "non_tensor" in entry:
            td.set_non_tensor(key, entry["non_tensor"])
        else:
            td.set(key, _decode(entry["td"], file, device, path, used))
    stack_dim = level.get("stack_dim")
    if stack_dim is not None:  # a lazy stack: its members are the slices along the stack dim
        members = td.unbind(stack_dim)
        shape = td.batch_size[:stack_dim] + td.batch_size[stack_dim + 1 :]
        out: Any = LazyStackedTensorDict(
            *members, stack_dim=stack_dim, batch_size=None if members else shape, device=device
        )
        if level.get("names") is not None:
            out.names = level["names"]
        td = out
    if level.get("class") is not None:
        return _tensorclass(level["class"], path).from_tensordict(td)
    return td


def _tensorclass(name: str, path: Any) -> Any:
    """The defined TensorClass whose ``str`` is ``name`` (no module is imported by a name read from a file)."""
    from ..tensorclass import TensorClass

    todo = [TensorClass]
    while todo:
        cls = todo.pop()
        if str(cls) == name:
            return cls
        todo += cls.__subclasses__()
    raise RuntimeError(
        f"the tensorclass {name} saved in {path} is not defined: import the module that defines "
        "it before loading the file"
    )
