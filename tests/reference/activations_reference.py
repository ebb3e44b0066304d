"""Known answers for kiln's activation functions (crates/kiln/src/model/act.rs tests): Keras 3's
`keras.activations.<name>` and its derivative at fixed points, with TensorFlow's autodiff.

Run once with TensorFlow 2.21 / Keras 3.15:  python tests/reference/activations_reference.py
"""
import json

import keras
import tensorflow as tf

X = [-3.0, -1.5, -0.5, 0.0, 0.4, 1.2, 2.5]
NAMES = ["swish", "silu", "elu", "selu", "softplus", "softsign", "hard_sigmoid", "mish",
         "exponential", "relu", "gelu", "sigmoid", "tanh", "linear"]

out = {}
for name in NAMES:
    f = keras.activations.get(name)
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    g = tape.gradient(y, x)
    out[name] = {"value": [float(v) for v in y.numpy()], "grad": [float(v) for v in g.numpy()]}
print(json.dumps({"x": X, "keras": keras.__version__, "activations": out}, indent=1))
