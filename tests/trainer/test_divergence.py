"""The divergence guard (a NaN/inf loss stops training with one line) and the check before export."""

from __future__ import annotations

import math

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from trainer.callbacks import Diverged, DivergenceGuard, check_trained  # noqa: E402


@pytest.mark.parametrize("loss", [math.nan, math.inf, -math.inf, np.float32("nan"), np.float64("inf")])
def test_guard_stops_at_the_first_non_finite_training_loss(loss):
    guard = DivergenceGuard(num_epochs=8)
    guard.on_epoch_begin(2)
    guard.on_train_batch_end(0, {"loss": 0.7, "accuracy": math.nan})  # only the loss counts
    with pytest.raises(Diverged) as err:
        guard.on_train_batch_end(16, {"loss": loss})
    assert str(err.value) == (f"training diverged: the training loss is {float(loss)} at epoch 3/8, step 17; "
                              "nothing was exported (lower --learning-rate or check the data)")


def test_guard_checks_the_validation_loss_at_epoch_end():
    guard = DivergenceGuard(num_epochs=2)
    guard.on_epoch_end(0, {"loss": 0.5, "val_loss": 0.6})
    with pytest.raises(Diverged, match="the validation loss is nan at the end of epoch 2/2"):
        guard.on_epoch_end(1, {"loss": 0.5, "val_loss": math.nan})


def test_guard_stops_fit_before_later_callbacks_see_the_step():
    seen = []

    class Recorder(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(batch)

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.array([[1.0], [2.0], [math.nan], [3.0]], dtype="float32")
    with pytest.raises(Diverged, match=r"training loss is nan at epoch 1/3, step 3;"):
        model.fit(x, np.ones(4), batch_size=1, epochs=3, shuffle=False, verbose=0,
                  callbacks=[DivergenceGuard(3), Recorder()])
    assert seen == [0, 1]


def test_check_trained_refuses_a_non_finite_loss_or_weight():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, name="out")])
    check_trained(model, {"loss": 0.4, "accuracy": 0.8})
    with pytest.raises(Diverged, match=r"^training diverged: the evaluation loss is inf after training;"):
        check_trained(model, {"loss": math.inf})
    kernel, bias = model.get_weights()
    bias[0] = math.nan
    model.set_weights([kernel, bias])
    with pytest.raises(Diverged, match=r"^training diverged: weight \S*bias is not finite after training"):
        check_trained(model, {"loss": 0.4})
