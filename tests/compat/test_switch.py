"""tensorbatch.compat.install(): ``import tensordict`` resolves to tensorbatch. Each case runs in a fresh
interpreter (the switch changes ``sys.modules``, and this suite imports the real tensordict)."""

from __future__ import annotations

import pytest

from ._run import check_output, run_python

# tensordict modules that resolve under the switch (the ones TorchRL 0.14 imports among them)
MODULES = [
    "tensordict",
    "tensordict.utils",
    "tensordict.base",
    "tensordict.tensorclass",
    "tensordict.memmap",
    "tensordict._tensorcollection",
    "tensordict._C",
    "tensordict.store",
    "tensordict._td",
    "tensordict._lazy",
    "tensordict.tensordict",
    "tensordict._pytree",
    "tensordict.functional",
    "tensordict.persistent",
    "tensordict.nn",
    "tensordict.nn.params",
    "tensordict.nn.functional_modules",
    "tensordict.nn.common",
    "tensordict.nn.sequence",
    "tensordict.nn.utils",
    "tensordict.nn.probabilistic",
    "tensordict.nn.distributions",
    "tensordict.nn.ensemble",
    "tensordict.nn.cudagraphs",
    "tensordict.nn.tensorclass_module",
]


def test_modules_resolve_to_tensorbatch() -> None:
    out = check_output(f"""
        import importlib, sys
        import tensorbatch.compat
        tensorbatch.compat.install()
        import tensordict, tensorbatch
        assert tensordict.TensorDict is tensorbatch.TensorDict
        assert tensordict.TensorDictBase is tensorbatch.TensorDictBase
        for name in {MODULES!r}:
            module = importlib.import_module(name)
            assert sys.modules[name] is module, name
        from tensordict.nn import TensorDictParams, TensorDictModule, ProbabilisticTensorDictSequential
        from tensordict.nn.probabilistic import interaction_type, set_interaction_type, _use_generator
        from tensordict.nn.distributions import NormalParamExtractor, Delta
        from tensordict.nn.utils import _set_dispatch_td_nn_modules, _set_skip_existing_None, mappings
        assert TensorDictModule is tensorbatch.nn.TensorDictModule and Delta is tensorbatch.nn.distributions.Delta
        from tensordict.tensorclass import NonTensorData, TensorClass
        from tensordict.memmap import MemoryMappedTensor
        from tensordict.store import TensorDictStore
        from tensordict._tensorcollection import TensorCollection
        assert TensorDictParams is tensorbatch.nn.TensorDictParams and TensorClass is tensorbatch.TensorClass
        assert MemoryMappedTensor is tensorbatch.MemoryMappedTensor and NonTensorData is tensorbatch.NonTensorData
        assert tensordict.nn is sys.modules["tensordict.nn"]  # the alias, not tensorbatch.nn
        assert "tensordict" not in sys.modules["tensorbatch"].__name__
        print(tensordict.__version__, type(tensordict.TensorDict(a=1)).__module__)
    """)
    assert out.split() == ["0.15.3", "tensorbatch._td"]


def test_private_names_live_in_the_compat_layer_only() -> None:
    out = check_output("""
        import tensorbatch.compat
        tensorbatch.compat.install()
        import torch
        from tensordict.utils import (_zip_strict, _unravel_key_to_tuple, _shape, _getitem_batch_size,
                                      _maybe_correct_neg_dim, _is_non_tensor, _is_tensorclass)
        from tensordict.base import (_ACCEPTED_CLASSES, _NESTED_TENSORS_AS_LISTS, _default_is_leaf,
                                     _is_leaf_nontensor, NO_DEFAULT)
        from tensordict._C import unravel_keys
        from tensordict.nn.functional_modules import _exclude_td_from_pytree
        import tensorbatch.utils, tensorbatch.base
        for name in ("_zip_strict", "_getitem_batch_size", "_shape"):
            assert not hasattr(tensorbatch.utils, name), name
        assert not hasattr(tensorbatch.base, "_NESTED_TENSORS_AS_LISTS")
        print(list(_zip_strict([1], [2])), _getitem_batch_size([4, 3], (slice(None), 0)), unravel_keys(("a", ("b",))))
        print(bool(_NESTED_TENSORS_AS_LISTS), _NESTED_TENSORS_AS_LISTS(torch.Tensor), _unravel_key_to_tuple(("a", 0)))
    """)
    assert out.splitlines() == ["[(1, 2)] torch.Size([4]) ('a', 'b')", "False True ()"]


def test_public_utils_names() -> None:
    out = check_output("""
        import tensorbatch.compat
        tensorbatch.compat.install()
        import torch
        from tensordict.utils import Buffer, expand_as_right, expand_right, is_non_tensor, is_tensorclass, logger
        print(expand_right(torch.ones(2), (2, 3)).shape, expand_as_right(torch.ones(2), torch.zeros(2, 4)).shape,
              Buffer is torch.nn.Buffer, logger.name)
    """)
    assert out.split() == ["torch.Size([2,", "3])", "torch.Size([2,", "4])", "True", "tensorbatch"]


def test_refuses_when_real_tensordict_is_imported() -> None:
    out = check_output("""
        import tensordict
        import tensorbatch.compat
        try:
            tensorbatch.compat.install()
        except RuntimeError as e:
            print("refused:", e)
        print(tensorbatch.compat.is_installed(), type(tensordict.TensorDict).__module__)
    """)
    assert out.startswith("refused: tensorbatch.compat.install() must run before tensordict is imported")
    assert "before importing tensordict or any library that imports it" in out
    assert out.splitlines()[-1].startswith("False")


def test_install_twice_is_a_no_op_and_uninstall_restores() -> None:
    out = check_output("""
        import sys
        import tensorbatch.compat as compat
        compat.install(); compat.install()
        print(sum(type(f).__name__ == "Finder" for f in sys.meta_path), compat.is_installed())
        import tensordict, tensorbatch
        print(tensordict.TensorDict is tensorbatch.TensorDict, hasattr(tensorbatch.TensorDict, "_fast_apply"))
        compat.uninstall(); compat.uninstall()
        print(compat.is_installed(), hasattr(tensorbatch.TensorDict, "_fast_apply"),
              any(n == "tensordict" or n.startswith("tensordict.") for n in sys.modules))
        import tensordict
        print(tensordict.TensorDict is tensorbatch.TensorDict,
              tensordict.__file__.endswith("site-packages/tensordict/__init__.py"))
    """)
    assert out.splitlines() == ["1 True", "True True", "False False False", "False True"]


def test_unknown_module_and_name_raise_as_usual() -> None:
    out = check_output("""
        import tensorbatch.compat
        tensorbatch.compat.install()
        import tensordict
        try:
            import tensordict.no_such_module
        except ModuleNotFoundError as e:
            print(type(e).__name__, e.name)
        try:
            from tensordict.utils import no_such_name
        except ImportError as e:
            print(type(e).__name__)
        try:
            tensordict.base.no_such_name
        except AttributeError as e:
            print("AttributeError", "tensorbatch.compat" in str(e))
    """)
    assert out.splitlines() == ["ModuleNotFoundError tensordict.no_such_module", "ImportError", "AttributeError True"]


def test_private_methods() -> None:
    out = check_output("""
        import tensorbatch.compat
        tensorbatch.compat.install()
        import torch
        from tensordict import TensorDict, NonTensorData, lazy_stack
        from tensordict.base import _is_leaf_nontensor
        td = TensorDict(a=torch.ones(2), b={"c": torch.zeros(2)}, s=NonTensorData("x", batch_size=[2]), batch_size=[2])
        print(sorted(td._fast_apply(lambda k, x: x + 1 if k == ("b", "c") else None, named=True, nested_keys=True,
                                   filter_empty=True, default=None).keys(True, True)))
        print(sorted(map(str, td._fast_apply(lambda x: x, is_leaf=_is_leaf_nontensor, filter_empty=True).keys(
            True, True, is_leaf=_is_leaf_nontensor))))
        print(list(td._fast_apply(lambda x: None, filter_empty=True).keys()))
        td._set_str("d", torch.ones(2), validated=True, inplace=False, non_blocking=False)
        print(td["d"].tolist(), td._has_names(), td.refine_names("t")._has_names())
        s = lazy_stack([TensorDict(a=torch.ones(())), TensorDict(a=torch.ones(()), b=torch.ones(()))])
        print(s._has_exclusive_keys, lazy_stack([TensorDict(a=torch.ones(()))] * 2)._has_exclusive_keys)
        dest = TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3])
        dest._stack_onto_([TensorDict(a=torch.full((3,), float(i)), batch_size=[3]) for i in range(2)], 0)
        print(dest["a"].tolist())
    """)
    assert out.splitlines() == [
        "[('b', 'c')]",
        "[\"('b', 'c')\", 'a', 's']",
        "['s']",
        "[1.0, 1.0] False True",
        "True False",
        "[[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]",
    ]


@pytest.mark.parametrize("flag", ["--reference", "--switch"])
def test_private_methods_match_tensordict(flag: str) -> None:
    """The same private-method script prints the same with the real tensordict and under the switch."""
    code = """
        import sys
        if sys.argv[1] == "--switch":
            import tensorbatch.compat
            tensorbatch.compat.install()
        import torch
        from tensordict import TensorDict, NonTensorData
        from tensordict.base import _is_leaf_nontensor
        td = TensorDict(a=torch.ones(2), b={"c": torch.zeros(2)}, s=NonTensorData("x", batch_size=[2]), batch_size=[2])
        out = td._fast_apply(lambda k, x: x + 1 if k == ("b", "c") else None, named=True, nested_keys=True,
                             filter_empty=True, default=None)
        print(sorted(out.keys(True, True)), out["b", "c"].tolist())
        seen = []
        td._fast_apply(lambda x: seen.append(type(x).__name__), is_leaf=_is_leaf_nontensor, filter_empty=True)
        print(sorted(seen), list(td._fast_apply(lambda x: None, filter_empty=True).keys()))
        print(td.exclude("s")._fast_apply(lambda x: None, filter_empty=True))
        print(td._fast_apply(lambda x: x, call_on_nested=True, filter_empty=True).batch_size)
    """
    done = run_python(code.replace("sys.argv[1]", repr(flag)))
    assert done.returncode == 0, done.stderr[-3000:]
    reference = run_python(code.replace("sys.argv[1]", repr("--reference")))
    assert done.stdout == reference.stdout


def test_submodule_import_keeps_a_function_of_the_same_name() -> None:
    """``tensordict.tensorclass`` is the decorator (as in both libraries) after ``import tensordict.tensorclass``."""
    out = check_output("""
        import tensorbatch.compat
        tensorbatch.compat.install()
        import torch
        from tensordict.tensorclass import NonTensorData, is_non_tensor
        from tensordict import tensorclass

        @tensorclass
        class T:
            x: torch.Tensor

        print(callable(tensorclass), T(x=torch.zeros(2), batch_size=[2]).x.shape, is_non_tensor(NonTensorData(1)))
    """)
    assert out.split() == ["True", "torch.Size([2])", "True"]


def test_public_names_of_tensordict_modules() -> None:
    """Re-exports of tensordict.base and tensordict.functional that tensorbatch's modules cannot hold (layering)."""
    out = check_output("""
        import tensorbatch.compat
        tensorbatch.compat.install()
        import tensorbatch
        from tensordict.base import from_dict, from_h5, is_tensor_collection, get_defaults_to_none
        from tensordict.functional import collate, dense_stack_tds
        print(from_dict is tensorbatch.from_dict, from_h5 is tensorbatch.from_h5, callable(collate))
        print(hasattr(tensorbatch.base, "from_dict"), hasattr(tensorbatch.functional, "collate"))
    """)
    assert out.splitlines() == ["True True True", "False False"]
