"""Idiom catalogue, area 2: guards on everything a trace read (issue 13).

Module attributes (``self.scale``, flags, ``self.training``), attributes of objects reached
from a module or a global (a ``config``), hooks registered before or after the first call,
replaced submodules, and attribute writes in ``forward``; each changed between calls and
compared with eager PyTorch by ``idiom_harness.check_idiom`` (values, grads, module
attributes and buffers after every step).
"""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn as nn

import thunder_mlir
from idiom_harness import Step, check_idiom, check_raises


def x34():
    return (torch.randn(3, 4),)


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 2.0
        self.use_relu = True
        self.dims = [0]

    def forward(self, x):
        y = self.lin(x) * self.scale
        y = y.relu() if self.use_relu else y.tanh()
        return y.sum(dim=self.dims)


def set_attr(name, value):
    def step(m):
        setattr(m, name, value)
    return step


def test_module_float_attribute_changed():
    jm = check_idiom(Scaled(), x34, [Step(), Step(before=set_attr("scale", 3.0)), Step()])
    info = thunder_mlir.cache_info(jm)
    assert info["misses"] == 2 and "attribute 'scale'" in info["recompile_reasons"][0]
    assert any("attribute 'scale'" in g for g in info["guards"])


def test_module_flag_changed():
    check_idiom(Scaled(), x34, [Step(), Step(before=set_attr("use_relu", False))])


def test_module_list_attribute_mutated_in_place():
    def append(m):
        m.dims.append(1)
    check_idiom(Scaled(), x34, [Step(), Step(before=append)])


def test_submodule_attribute_changed():
    def change(m):
        m.lin.out_features = m.lin.out_features  # unchanged value: no recompile needed
        m.lin.weight.data.mul_(2)  # a parameter: an input, seen without recompiling
    jm = check_idiom(Scaled(), x34, [Step(), Step(before=change)])
    assert thunder_mlir.cache_info(jm)["misses"] == 1


class WithConfig(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = types.SimpleNamespace(eps=1e-5, act="gelu")

        class Cfg:  # a plain Python object, as a Hugging Face config
            pass
        self.cfg = Cfg()
        self.cfg.scale = 0.5
        self.cfg.layers = {"skip": False}
        self.norm = nn.LayerNorm(4)

    def forward(self, x):
        y = self.norm(x) * self.cfg.scale
        if self.cfg.layers["skip"]:
            return y
        return torch.nn.functional.gelu(y) if self.config.act == "gelu" else y.relu()


def test_config_object_fields_changed():
    def scale(m):
        m.cfg.scale = 4.0

    def skip(m):
        m.cfg.layers["skip"] = True

    def act(m):
        m.config.act = "relu"
    check_idiom(WithConfig(), x34, [Step(), Step(before=scale), Step(before=skip),
                                    Step(before=set_attr("cfg", WithConfig().cfg)),
                                    Step(before=act)])


class _LayerView:
    """A view of a config built at each read (transformers' ``config.per_layer_config``)."""

    def __init__(self, cfg):
        self._cfg = cfg

    def __getitem__(self, i):
        return self._cfg.scales[i]


class _ViewedConfig:
    def __init__(self):
        self.scales = [0.5, 2.0]
        self.act = torch.tanh

    @property
    def per_layer(self):  # a new object at every read
        return _LayerView(self)

    @property
    def activation(self):  # the same object at every read: identity still guarded
        return self.act


class WithViewedConfig(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = _ViewedConfig()

    def forward(self, x):
        view = self.config.per_layer
        return self.config.activation(x * view[0] + view[1])


def test_a_property_building_a_new_object_at_each_read_is_not_a_recompile():
    """Guarded by identity, ``config.per_layer`` would re-trace every call (every
    transformers 5.23 decoder did, through ``DynamicCache(config=...)``). What the view
    gives the program is read from the config, and those reads are guarded: changing a
    scale, or the object behind the other property, recompiles and matches eager."""
    def scale(m):
        m.config.scales[1] = -1.0

    def act(m):
        m.config.act = torch.sigmoid
    jm = check_idiom(WithViewedConfig(), x34, [Step(), Step(), Step(before=scale), Step(),
                                               Step(before=act), Step()])
    info = thunder_mlir.cache_info(jm)
    assert info["misses"] == 3, info["recompile_reasons"]


def test_train_and_eval():
    class Mode(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x) * (2 if self.lin.training else 3)
    check_idiom(Mode(), x34, [Step(), Step(before=lambda m: m.eval()),
                              Step(before=lambda m: m.train())])


def test_forward_hook_registered_after_the_first_call():
    def hook(m):
        m.lin.register_forward_hook(lambda mod, inp, out: out * 10)
    check_idiom(Scaled(), x34, [Step(), Step(before=hook), Step()])


def test_forward_pre_hook_removed():
    handles = []

    def add(m):
        handles.append(m.register_forward_pre_hook(lambda mod, inp: (inp[0] + 1,)))

    def remove(m):
        while handles:
            handles.pop().remove()
    check_idiom(Scaled(), x34, [Step(before=add), Step(before=remove)])


def test_global_module_forward_hook():
    handles = []

    def add(m):  # (called for each side: registered once, global)
        if not handles:
            handles.append(nn.modules.module.register_module_forward_hook(
                lambda mod, inp, out: out + 1 if isinstance(mod, nn.Linear) else out))
    try:
        check_idiom(Scaled(), x34, [Step(), Step(before=add)])
    finally:
        for h in handles:
            h.remove()


def test_submodule_replaced_by_another_class():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.act = nn.GELU()

        def forward(self, x):
            return self.act(self.lin(x))
    check_idiom(Block(), x34, [Step(), Step(before=set_attr("act", nn.ReLU()))])


def test_forward_method_monkeypatched():
    def patch(m):
        m.forward = types.MethodType(lambda self, x: self.lin(x) * 7, m)
    check_idiom(Scaled(), x34, [Step(), Step(before=patch)])


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0
        self.last_batch = None

    def forward(self, x):
        self.calls += 1
        self.last_batch = x.shape[0]
        return self.lin(x) * self.calls


def test_attribute_writes_in_forward_are_replayed():
    check_idiom(Counting(), x34, [Step(), Step(), Step(before=set_attr("calls", 10))],
                jit_options={"recompile_limit": 100})


def test_attribute_write_not_read_back_is_replayed_without_recompiling():
    class Last(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.seen = None

        def forward(self, x):
            self.seen = tuple(x.shape)
            return self.lin(x)
    jm = check_idiom(Last(), x34, [Step(), Step(), Step()])
    assert thunder_mlir.cache_info(jm)["misses"] == 1


class _Box:
    pass


_GLOBAL_BOX = _Box()


def test_writing_a_tensor_to_an_attribute_is_set_as_eager_on_the_module_only():
    """Issue 48: a tensor the program assigns to an attribute of the module is a program
    output set on it after every run, as eager leaves it; on an object reached from a
    global (nothing the module's call re-reads) it is still refused."""
    class Stash(nn.Module):
        def forward(self, x):
            self.saved = x * 2
            return x
    m = Stash()
    jm = thunder_mlir.jit(m)
    for _ in range(2):
        x = torch.randn(3)
        jm(x)
        assert torch.equal(m.saved, x * 2)

    class ToGlobal(nn.Module):
        def forward(self, x):
            _GLOBAL_BOX.saved = x * 2
            return x
    with pytest.raises(NotImplementedError, match="assigning a tensor to attribute 'saved'"):
        thunder_mlir.jit(ToGlobal())(torch.randn(3))
    assert not hasattr(_GLOBAL_BOX, "saved")


def test_backward_hooks_are_refused():
    m = Scaled()
    m.lin.register_full_backward_hook(lambda mod, gi, go: None)
    with pytest.raises(NotImplementedError, match="backward hooks on lin"):
        thunder_mlir.jit(m)(torch.randn(3, 4))


# ------------------------------------------------------------ objects reached from globals
class Settings:
    def __init__(self):
        self.scale = 2.0
        self.mode = "tanh"


SETTINGS = Settings()
THRESHOLDS = [0.0, 1.0]


def uses_settings(x):
    y = x * SETTINGS.scale
    return y.tanh() if SETTINGS.mode == "tanh" else y.sigmoid()


def test_global_object_attributes_changed():
    def scale(_):
        SETTINGS.scale = 5.0

    def mode(_):
        SETTINGS.mode = "sigmoid"
    try:
        check_idiom(uses_settings, x34, [Step(), Step(before=scale), Step(before=mode)])
    finally:
        SETTINGS.scale, SETTINGS.mode = 2.0, "tanh"


def uses_thresholds(x):
    return x.clamp(THRESHOLDS[0], THRESHOLDS[1])


def test_global_list_mutated_in_place():
    def widen(_):
        THRESHOLDS[1] = 3.0
    try:
        check_idiom(uses_thresholds, lambda: (torch.randn(5) * 3,), [Step(), Step(before=widen)])
    finally:
        THRESHOLDS[1] = 1.0


def helper(x):
    return x.sin()


def uses_helper(x):
    return helper(x) * 2


def test_global_function_rebound():
    global helper
    original = helper

    def rebind(_):
        global helper
        helper = torch.cos
    try:
        check_idiom(uses_helper, x34, [Step(), Step(before=rebind)])
    finally:
        helper = original


def test_global_replaced_by_another_object():
    def replace(_):
        global SETTINGS
        s = Settings()
        s.scale = -1.0
        SETTINGS = s
    try:
        check_idiom(uses_settings, x34, [Step(), Step(before=replace)])
    finally:
        globals()["SETTINGS"] = Settings()


def test_guard_cost_on_a_hit_is_one_generated_function():
    m = Scaled()
    jm = thunder_mlir.jit(m)
    x = torch.randn(3, 4)
    jm(x)
    jm(x)
    assert thunder_mlir.cache_info(jm)["hits"] == 1
    fn = jm._fn.cache._guard_key
    assert fn.__name__ == "<lambda>" and len(fn()) == len(jm._fn.cache.schema)


def test_hugging_face_config_field_changed_after_the_first_call():
    """GPT-2 reads ``self.config.output_hidden_states`` in ``forward``: turning it on after
    the first call returns the hidden states, as eagerly (the config is guarded)."""
    import transformers

    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50)
    model = transformers.GPT2Model(cfg).eval()
    jm = thunder_mlir.jit(model)
    ids = torch.randint(0, 50, (1, 6))
    with torch.no_grad():
        out = jm(ids)
        assert out.hidden_states is None
        model.config.output_hidden_states = True
        out, expected = jm(ids), model(ids)
    assert out.hidden_states is not None and len(out.hidden_states) == 2
    for got, want in zip(out.hidden_states, expected.hidden_states):
        torch.testing.assert_close(got, want)
    reasons = thunder_mlir.cache_info(jm)["recompile_reasons"]
    assert "output_hidden_states" in reasons[-1], reasons
