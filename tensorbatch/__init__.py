"""tensorbatch: a batched, nested dict of tensors that behaves like one tensor."""
# ruff: noqa: I001  (the import order is the install order: features before the wrappers that forward them)

from . import _pytree as _pytree  # registers TensorDict with torch's pytree

# (features adding classmethods to TensorDictBase come before the wrappers, which forward them as classmethods)
from . import _schema as _schema  # TensorDictBase.from_schema
from . import persistent as persistent  # TensorDictBase.from_h5/to_h5 (light: h5py is imported when a file is used)
from . import stored as stored  # the stored layer and its storages: to_zarr/from_zarr (zarr is imported when used)
from . import nn as nn  # from_module(s)/to_module, TensorDictParams (before the wrappers forward them)
from ._convert import from_any as from_any
from ._convert import from_dict as from_dict
from ._convert import from_namedtuple as from_namedtuple
from ._convert import from_pytree as from_pytree
from ._convert import from_struct_array as from_struct_array
from ._convert import from_tuple as from_tuple

# (feature modules install their methods on TensorDictBase before the wrappers copy the list)
from ._io import distributed as _distributed  # noqa: F401  # TensorDictBase.send, recv, reduce, broadcast...
from ._io.append import append_memmap as append_memmap
from ._io.archive import is_memmap_archive as is_memmap_archive
from ._io.archive import pack_memmap as pack_memmap
from ._io.archive import refresh_archive_checksums as refresh_archive_checksums
from ._io.archive import unpack_memmap as unpack_memmap
from ._io.methods import load as load
from ._io.safetensors import from_safetensors as from_safetensors  # (light: safetensors loads when called)
from ._io.safetensors import to_safetensors as to_safetensors
from ._io.methods import load_memmap as load_memmap
from ._io.methods import memmap as memmap
from ._io.methods import save as save
from ._keys import NestedKey as NestedKey
from ._keys import unravel_key as unravel_key
from ._keys import unravel_key_list as unravel_key_list
from ._keys import unravel_key_to_tuple as unravel_key_to_tuple
from ._lazy import LazyStackedTensorDict as LazyStackedTensorDict
from ._lazy import dense_stack_tds as dense_stack_tds
from ._lazy import lazy_stack as lazy_stack
from ._lazy import maybe_dense_stack as maybe_dense_stack
from ._nontensor import NonTensorData as NonTensorData
from ._nontensor import NonTensorStack as NonTensorStack
from ._nontensor import is_non_tensor as is_non_tensor
from ._ops.pack import PackLayout as PackLayout  # (installs TensorDictBase.pack)
from ._td import TensorDict as TensorDict
from .base import TensorDictBase as TensorDictBase
from .functional import cat as cat
from .functional import group_by as group_by
from .functional import make_tensordict as make_tensordict
from .functional import merge_tensordicts as merge_tensordicts
from .functional import pad as pad
from .functional import pad_sequence as pad_sequence
from .functional import stack as stack
from .functional import unpad_sequence as unpad_sequence
from .memmap import MemoryMappedTensor as MemoryMappedTensor
from .persistent import from_h5 as from_h5  # (light: h5py is imported when a file is used)
from .stored import from_zarr as from_zarr  # (light: zarr is imported when a store is opened)
from .tabular import from_arrow as from_arrow  # (light: pandas/pyarrow load when called)
from .tabular import from_csv as from_csv
from .tabular import from_json as from_json
from .tabular import from_pandas as from_pandas
from .tabular import from_parquet as from_parquet
from .tabular import to_arrow as to_arrow
from .tabular import to_csv as to_csv
from .tabular import to_json as to_json
from .tabular import to_pandas as to_pandas
from .tabular import to_parquet as to_parquet
from .tensorclass import TensorClass as TensorClass
from .tensorclass import is_tensorclass as is_tensorclass
from .tensorclass import tensorclass as tensorclass
from .typed import TypedTensorDict as TypedTensorDict
from . import store  # noqa: F401  # (light: redis is imported when a store is used) TensorDictBase.to_store
from .utils import assert_allclose_td as assert_allclose_td
from .utils import assert_close as assert_close
from .utils import is_tensor_collection as is_tensor_collection
from ._base.collection import TensorCollection as TensorCollection
from ._io.methods import from_consolidated as from_consolidated
from ._keys import KEY_SEPARATOR as KEY_SEPARATOR
from ._options import capture_non_tensor_stack as capture_non_tensor_stack
from ._options import get_defaults_to_none as get_defaults_to_none
from ._options import get_printoptions as get_printoptions
from ._options import get_progress as get_progress
from ._options import lazy_legacy as lazy_legacy
from ._options import list_to_stack as list_to_stack
from ._options import set_capture_non_tensor_stack as set_capture_non_tensor_stack
from ._options import set_get_defaults_to_none as set_get_defaults_to_none
from ._options import set_lazy_legacy as set_lazy_legacy
from ._options import set_list_to_stack as set_list_to_stack
from ._options import set_printoptions as set_printoptions
from ._options import set_progress as set_progress
from ._nontensor import MetaData as MetaData
from ._nontensor import NonTensorDataBase as NonTensorDataBase
from ._unbatched import UnbatchedTensor as UnbatchedTensor
from .tensorclass import TensorAttrs as TensorAttrs
from .tensorclass import from_dataclass as from_dataclass
from .utils import default_is_leaf as default_is_leaf
from .utils import is_bool as is_bool
from .utils import is_floating as is_floating
from .utils import is_inexact as is_inexact
from .utils import is_integer as is_integer
from .utils import is_leaf_nontensor as is_leaf_nontensor
from .utils import parse_tensor_dict_string as parse_tensor_dict_string
from .nn import TensorDictParams as TensorDictParams
from .nn import TensorClassModuleBase as TensorClassModuleBase
from .nn import TensorClassModuleWrapper as TensorClassModuleWrapper
from .nn import as_tensordict_module as as_tensordict_module
from .nn import from_module as from_module
from .nn import from_modules as from_modules
from . import tensordict as tensordict  # tensordict's module names (``from tensordict.tensordict import ...``)
from . import typedtensordict as typedtensordict
from ._collate import collate as collate

fromkeys = TensorDict.fromkeys


# name -> the module defining it, imported on first use (it imports an optional dependency: h5py, redis)
_LAZY = {
    "PersistentTensorDict": ".persistent",
    "TensorDictStore": ".store",
    "LazyStackedTensorDictStore": ".store",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"

__all__ = [
    "LazyStackedTensorDict",
    "MemoryMappedTensor",
    "NestedKey",
    "NonTensorData",
    "NonTensorStack",
    "PersistentTensorDict",
    "TensorClass",
    "TensorDict",
    "TensorDictBase",
    "TypedTensorDict",
    "assert_allclose_td",
    "assert_close",
    "cat",
    "dense_stack_tds",
    "from_any",
    "from_arrow",
    "from_csv",
    "from_dict",
    "from_h5",
    "from_json",
    "from_namedtuple",
    "from_pandas",
    "from_parquet",
    "from_pytree",
    "from_struct_array",
    "from_tuple",
    "from_zarr",
    "fromkeys",
    "group_by",
    "is_non_tensor",
    "is_tensor_collection",
    "is_tensorclass",
    "lazy_stack",
    "load",
    "load_memmap",
    "make_tensordict",
    "maybe_dense_stack",
    "memmap",
    "merge_tensordicts",
    "pad",
    "pad_sequence",
    "save",
    "stack",
    "tensorclass",
    "to_arrow",
    "to_csv",
    "to_json",
    "to_pandas",
    "to_parquet",
    "unpad_sequence",
    "unravel_key",
    "unravel_key_list",
    "unravel_key_to_tuple",
]
__all__ += [  # the global options and helpers
    "KEY_SEPARATOR",
    "MetaData",
    "NonTensorDataBase",
    "TensorAttrs",
    "TensorCollection",
    "UnbatchedTensor",
    "capture_non_tensor_stack",
    "default_is_leaf",
    "from_consolidated",
    "from_dataclass",
    "get_defaults_to_none",
    "get_printoptions",
    "get_progress",
    "is_bool",
    "is_floating",
    "is_inexact",
    "is_integer",
    "is_leaf_nontensor",
    "lazy_legacy",
    "list_to_stack",
    "parse_tensor_dict_string",
    "set_capture_non_tensor_stack",
    "set_get_defaults_to_none",
    "set_lazy_legacy",
    "set_list_to_stack",
    "set_printoptions",
    "set_progress",
]
__all__ += ["TensorClassModuleBase", "TensorClassModuleWrapper", "as_tensordict_module"]
__all__ += [
    "LazyStackedTensorDictStore",
    "TensorDictParams",
    "TensorDictStore",
    "collate",
    "from_module",
    "from_modules",
    "tensordict",
    "typedtensordict",
]
__all__ += [  # memmap archives, append_memmap, safetensors files, pack
    "PackLayout",
    "append_memmap",
    "from_safetensors",
    "is_memmap_archive",
    "pack_memmap",
    "refresh_archive_checksums",
    "to_safetensors",
    "unpack_memmap",
]
