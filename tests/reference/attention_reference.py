"""Known answers for kiln's sequence layers (crates/kiln/src/model/functional_tests.rs,
`sequence_layers_match_keras`): Embedding, PositionEmbedding, Add, MultiHeadAttention,
LayerNormalization and a TransformerEncoder block (keras_hub's post-norm block, composed from
Keras layers) on token ids [1, 4, 2], with every weight set by the formula both sides share:

    values(name)[i] = 0.5 * sin(0.37 * i + 0.11 * sum(bytes(name)))   (row-major, Keras shape)

Run: /root/.cache/kiln/tfvenv/bin/python tests/reference/attention_reference.py
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402


def values(name, shape):
    n = int(np.prod(shape))
    seed = sum(name.encode())
    return (0.5 * np.sin(0.37 * np.arange(n) + 0.11 * seed)).reshape(shape).astype("float32")


class PositionEmbedding(layers.Layer):
    def __init__(self, sequence_length, **kw):
        super().__init__(**kw)
        self.sequence_length = sequence_length

    def build(self, shape):
        self.w = self.add_weight(shape=(self.sequence_length, shape[-1]), name="embeddings")

    def call(self, x):
        n = keras.ops.shape(x)[1]
        return keras.ops.broadcast_to(self.w[:n], keras.ops.shape(x))


ids = keras.Input((3,), dtype="int32")
tok = layers.Embedding(5, 4, name="tok")(ids)
pos = PositionEmbedding(6, name="pos")(tok)
emb = layers.Add()([tok, pos])
mha = layers.MultiHeadAttention(2, 2, name="mha")(emb, emb)
ln = layers.LayerNormalization(name="ln")(layers.Add()([emb, mha]))
# keras_hub TransformerEncoder(intermediate_dim=6, num_heads=2, activation="gelu"), post-norm.
a = layers.MultiHeadAttention(2, 2, name="enc_att")(ln, ln)
x = layers.LayerNormalization(epsilon=1e-5, name="enc_ln1")(layers.Add()([ln, a]))
f = layers.Dense(6, activation="gelu", name="enc_ffn1")(x)
f = layers.Dense(4, name="enc_ffn2")(f)
out = layers.LayerNormalization(epsilon=1e-5, name="enc_ln2")(layers.Add()([x, f]))
model = keras.Model(ids, out)

kiln_names = {
    "enc_att/": "enc/self_attention_layer/",
    "enc_ln1/": "enc/self_attention_layer_norm/",
    "enc_ffn1/": "enc/feedforward_intermediate_dense/",
    "enc_ffn2/": "enc/feedforward_output_dense/",
    "enc_ln2/": "enc/feedforward_layer_norm/",
}
for w in model.weights:
    name = w.path
    for k, v in kiln_names.items():
        name = name.replace(k, v)
    w.assign(values(name, tuple(w.shape)))
    print(name, tuple(w.shape))
y = model.predict(np.array([[1, 4, 2]], dtype="int32"), verbose=0)
print("output:", ", ".join(f"{v:.6f}" for v in y.reshape(-1)))
