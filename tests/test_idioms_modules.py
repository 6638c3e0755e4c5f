"""Idiom catalogue, modules: ``nn.Module`` idioms run eagerly and jitted, step by step,
through ``tests/idiom_harness.py`` (outputs, ``state_dict`` after each call — running
statistics, ``num_batches_tracked``, materialized Lazy parameters —, plain attributes and
gradients compared with eager).

Random modules (fractional max pooling, dropout inside ``nn.LSTM`` or attention) run on the
torch fallback, drawing from torch's generator as eager does; the harness seeds both sides
alike, so they are compared for equality, gradients included (the fallback's backward
replays the forward's draws).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from idiom_harness import Step, check_idiom

import thunder_mlir


def _train_then_eval():
    return [Step(), Step(), Step(before=lambda m: m.eval()), Step(before=lambda m: m.train())]


def test_batchnorm_train_then_eval():
    # running statistics and num_batches_tracked updated in training, read in eval
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    check_idiom(model, lambda: (torch.randn(2, 3, 6, 6, requires_grad=True),),
                _train_then_eval())


def test_batchnorm_cumulative_average():
    # momentum=None: the factor 1 / num_batches_tracked changes every step, one program
    model = nn.BatchNorm1d(5, momentum=None)
    jm = check_idiom(model, lambda: (torch.randn(8, 5, requires_grad=True),),
                     [Step(), Step(), Step(), Step(before=lambda m: m.eval())])
    assert thunder_mlir.fallback_ops(jm) == []


def test_instancenorm_with_running_stats():
    # track_running_stats: the batch's per-instance statistics averaged into the buffers in
    # training, the buffers used in eval (use_input_stats=False)
    model = nn.Sequential(nn.Linear(6, 6), nn.Unflatten(1, (2, 3)),
                          nn.InstanceNorm1d(2, affine=True, track_running_stats=True))
    check_idiom(model, lambda: (torch.randn(4, 6, requires_grad=True),), _train_then_eval())


def test_lazy_modules_materialize_on_the_first_call():
    # the first call infers the parameters' shapes and initializes them from torch's
    # generator (eagerly); the following calls are compiled
    model = nn.Sequential(nn.LazyConv1d(4, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2))
    jm = check_idiom(model, lambda: (torch.randn(3, 2, 7, requires_grad=True),),
                     [Step(), Step(), Step()])
    assert thunder_mlir.cache_misses(jm) == 1


def test_fractional_max_pool_draws_from_torchs_generator():
    # no _random_samples: the pooling regions are drawn from torch's generator on the
    # fallback, and the backward differentiates at the same regions
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.FractionalMaxPool2d(2, output_ratio=0.6))
    check_idiom(model, lambda: (torch.randn(2, 2, 11, 9, requires_grad=True),),
                [Step(), Step()])


def test_lstm_with_dropout_between_layers():
    # training-mode dropout inside torch.lstm (fallback, eager's generator), then eval
    model = nn.LSTM(4, 5, num_layers=2, dropout=0.5, bidirectional=True)
    check_idiom(model, lambda: (torch.randn(6, 3, 4, requires_grad=True),), _train_then_eval())


def test_transformer_encoder_with_causal_then_padding_masks():
    # the causal-mask hint is not read from the mask's values while tracing
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    check_idiom(model, lambda: (torch.randn(2, 5, 8, requires_grad=True),),
                [Step(), Step(), Step(before=lambda m: m.eval())],
                make_kwargs=lambda: {"mask": causal})


def test_cross_entropy_with_class_weights_buffer():
    # class weights registered as a buffer: an input of the program that is not
    # differentiated (nll_loss refuses a weight that requires grad)
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 3)
            self.register_buffer("class_weights", torch.tensor([0.2, 1.0, 3.0]))

        def forward(self, x, target):
            return nn.functional.cross_entropy(self.proj(x), target, weight=self.class_weights,
                                               label_smoothing=0.1)

    check_idiom(Head(), lambda: (torch.randn(6, 4, requires_grad=True),
                                 torch.randint(0, 3, (6,))), [Step(), Step()])
