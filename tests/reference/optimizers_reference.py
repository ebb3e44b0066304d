"""Known answers for kiln's optimizers (RMSprop, Adagrad, Adadelta, Adamax, Nadam, Lion, Adam /
AdamW with amsgrad) and learning-rate schedules (CosineDecayRestarts, PolynomialDecay,
InverseTimeDecay), computed once with Keras 3 on the CPU.

Run:
    /root/.cache/kiln/tfvenv/bin/python tests/reference/optimizers_reference.py
(TensorFlow 2.21, Keras 3.15.) The printed values are pasted into
crates/kiln/src/compile/optimizers/tests.rs (weights after each of three steps, from fixed
weights and gradients, each optimizer with non-default arguments) and
crates/kiln/src/compile/schedules.rs (the schedules' values at several steps).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import keras
from keras import optimizers
from keras.optimizers import schedules

W0 = np.array([[0.5, -1.25], [2.0, 0.0]], dtype=np.float32)
GRADS = [
    np.array([[0.1, -0.2], [0.3, 0.0]], dtype=np.float32),
    np.array([[-0.05, 0.4], [0.1, 1e-3]], dtype=np.float32),
    np.array([[0.2, 0.2], [-0.3, -2.0]], dtype=np.float32),
]

CASES = {
    "rmsprop_centered_momentum": optimizers.RMSprop(
        learning_rate=0.01, rho=0.8, momentum=0.5, epsilon=1e-6, centered=True
    ),
    "rmsprop_plain": optimizers.RMSprop(learning_rate=0.01, rho=0.7),
    "adagrad": optimizers.Adagrad(learning_rate=0.05, initial_accumulator_value=0.2, epsilon=1e-6),
    "adadelta": optimizers.Adadelta(learning_rate=1.0, rho=0.9, epsilon=1e-6),
    "adamax": optimizers.Adamax(learning_rate=0.02, beta_1=0.8, beta_2=0.99, epsilon=1e-6),
    "nadam": optimizers.Nadam(learning_rate=0.02, beta_1=0.85, beta_2=0.99, epsilon=1e-6),
    "lion": optimizers.Lion(learning_rate=0.01, beta_1=0.8, beta_2=0.95),
    "adam_amsgrad": optimizers.Adam(learning_rate=0.01, beta_2=0.9, amsgrad=True),
    "adamw_amsgrad": optimizers.AdamW(learning_rate=0.01, weight_decay=0.1, beta_2=0.9, amsgrad=True),
}

for name, opt in CASES.items():
    w = keras.Variable(W0)
    rows = []
    for g in GRADS:
        opt.apply_gradients([(g, w)])
        rows.append(", ".join(repr(float(x)) for x in np.asarray(w).reshape(-1)))
    print(f"{name}:")
    for r in rows:
        print(f"    [{r}],")

SCHEDULES = {
    "cosine_restarts": (
        schedules.CosineDecayRestarts(0.1, 10, t_mul=2.0, m_mul=0.5, alpha=0.1),
        [0, 3, 9, 10, 17, 29, 30, 45, 69, 70, 100],
    ),
    "cosine_restarts_t1": (
        schedules.CosineDecayRestarts(0.1, 8, t_mul=1.0, m_mul=0.9),
        [0, 4, 7, 8, 12, 20, 33],
    ),
    "polynomial": (
        schedules.PolynomialDecay(0.1, 50, end_learning_rate=0.01, power=2.0),
        [0, 1, 10, 25, 49, 50, 80],
    ),
    "polynomial_cycle": (
        schedules.PolynomialDecay(0.1, 50, end_learning_rate=0.01, power=0.5, cycle=True),
        [0, 1, 25, 50, 51, 75, 100, 101, 160],
    ),
    "inverse_time": (schedules.InverseTimeDecay(0.1, 10, 0.5), [0, 1, 5, 10, 25, 100]),
    "inverse_time_staircase": (
        schedules.InverseTimeDecay(0.1, 10, 0.5, staircase=True),
        [0, 5, 9, 10, 25, 100],
    ),
}

for name, (s, steps) in SCHEDULES.items():
    vals = ", ".join(f"({k}, {float(np.asarray(s(k)))!r})" for k in steps)
    print(f"{name}: [{vals}]")
