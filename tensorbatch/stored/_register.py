"""``register_storage``: one call makes a storage known everywhere.

It attaches ``TensorDictBase.to_<name>`` and the classmethod ``TensorDictBase.from_<name>``, makes
``TensorDict.from_schema(..., storage=name)`` build on it, and has TensorClass and TypedTensorDict forward the
two methods (``_delegation.forward``). ``tools/gen_stubs.py`` then writes them into ``base.pyi`` like any method.
No edit of ``tensorbatch/__init__.py``, ``_delegation`` or ``_schema`` is needed for a new storage.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .. import _delegation, _schema
from ..base import TensorDictBase

STORAGES: dict[str, dict[str, Callable[..., Any]]] = {}  # name -> {"to", "from", "schema"}


def register_storage(
    name: str,
    *,
    to: Callable[..., Any],
    opener: Callable[..., Any],
    schema: Callable[..., Any] | str | None = None,
    where: str | None = None,
) -> None:
    """Make the storage ``name`` known everywhere.

    Args:
        name: the storage's name: ``td.to_<name>(...)``, ``TensorDict.from_<name>(...)``, ``storage=name``.
        to: ``to(td, where, **kwargs)``: writes ``td`` and returns the stored TensorDict over it.
        opener: ``opener(where, **kwargs)``: the stored TensorDict over existing data.
        schema: ``schema(schema, batch_size=..., device=..., **kwargs)`` (or ``"module:function"``, imported on
            first use) for ``from_schema(storage=name)``; None when the storage has none.
        where: the name ``from_<name>`` gives the opener's first parameter when the opener calls it otherwise
            (tensordict's classmethods say ``filename``, its functions ``zarr_file``/``h5_file``); None: the
            opener's own.

    Examples:
        >>> import tensorbatch
        >>> from tensorbatch.stored._register import STORAGES
        >>> sorted(STORAGES), hasattr(tensorbatch.TensorDict, "from_zarr")
        (['h5', 'zarr'], True)
    """
    if not name.isidentifier():
        raise ValueError(f"register_storage: the name {name!r} is not an identifier (it names methods)")

    def from_storage(cls: Any, /, *args: Any, **kwargs: Any) -> Any:
        if where is not None and where in kwargs:  # (the first parameter by its classmethod's name)
            if args:
                raise TypeError(f"from_{name}() got multiple values for argument {where!r}")
            args = (kwargs.pop(where),)
        return opener(*args, **kwargs)

    parameters = list(inspect.signature(opener).parameters.values())  # (the opener's, for help() and checks)
    if where is not None:
        parameters[0] = parameters[0].replace(name=where)
    from_storage.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("cls", inspect.Parameter.POSITIONAL_ONLY), *parameters]
    )
    from_storage.__name__ = f"from_{name}"
    from_storage.__qualname__ = f"TensorDictBase.from_{name}"
    from_storage.__doc__ = opener.__doc__
    setattr(TensorDictBase, f"to_{name}", to)
    setattr(TensorDictBase, f"from_{name}", classmethod(from_storage))
    if schema is not None:
        _schema.register(name, schema)
    STORAGES[name] = {"to": to, "from": opener, **({"schema": schema} if schema is not None else {})}  # type: ignore[dict-item]
    _delegation.forward({f"to_{name}", f"from_{name}"})
