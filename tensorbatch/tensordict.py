"""``tensorbatch.tensordict``: the names of tensordict's ``tensordict.tensordict`` module.

For code importing them from there (``from tensordict.tensordict import TensorDict``); new code imports from
``tensorbatch``.
"""

from ._keys import NestedKey as NestedKey
from ._lazy import LazyStackedTensorDict as LazyStackedTensorDict
from ._lazy import dense_stack_tds as dense_stack_tds
from ._ops.traverse import NO_DEFAULT as NO_DEFAULT
from ._td import TensorDict as TensorDict
from .base import TensorDictBase as TensorDictBase
from .functional import make_tensordict as make_tensordict
from .functional import merge_tensordicts as merge_tensordicts
from .functional import pad as pad
from .functional import pad_sequence as pad_sequence
from .memmap import MemoryMappedTensor as MemoryMappedTensor
from .tensorclass import is_tensorclass as is_tensorclass
from .utils import assert_allclose_td as assert_allclose_td
from .utils import expand_as_right as expand_as_right
from .utils import expand_right as expand_right
from .utils import is_tensor_collection as is_tensor_collection

__all__ = [
    "NO_DEFAULT",
    "LazyStackedTensorDict",
    "MemoryMappedTensor",
    "NestedKey",
    "TensorDict",
    "TensorDictBase",
    "assert_allclose_td",
    "dense_stack_tds",
    "expand_as_right",
    "expand_right",
    "is_tensor_collection",
    "is_tensorclass",
    "make_tensordict",
    "merge_tensordicts",
    "pad",
    "pad_sequence",
]
