"""Parameters as TensorDicts: :class:`TensorDictParams`, and ``from_module``/``from_modules``/``to_module``.

Importing this package attaches ``TensorDict.from_module``, ``TensorDict.from_modules`` and
``TensorDictBase.to_module`` (``tensorbatch`` imports it).
"""

from . import _modules
from .params import TensorDictParams as TensorDictParams

_modules.install()

__all__ = ["TensorDictParams"]
