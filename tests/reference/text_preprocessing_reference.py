"""Known answers for kiln's text and categorical preprocessing ops (Keras 3, TF backend).

Run once with /root/.cache/kiln/tfvenv/bin/python; the numbers are written into
crates/kiln-data/src/preprocess/text_tests.rs. Inputs are fixed below.
"""
import os
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import numpy as np
import tensorflow as tf
import keras

np.set_printoptions(precision=7, suppress=True, linewidth=200)
CORPUS = [
    "The cat sat on the mat.",
    "The dog ate my homework!",
    "A cat, a dog; and THE bird?",
    "dog dog cat",
]
QUERY = ["the cat ate a fish", "Bird, bird... BIRD!"]


def show(name, value):
    v = np.asarray(value)
    print(f"{name}: shape={list(v.shape)}\n{v.tolist()}")


tv = keras.layers.TextVectorization(output_sequence_length=6)
tv.adapt(CORPUS)
show("tv_int_vocab", tv.get_vocabulary())
show("tv_int", tv(QUERY))

tv2 = keras.layers.TextVectorization(ngrams=2, max_tokens=12, output_mode="int", output_sequence_length=8)
tv2.adapt(CORPUS)
show("tv_ngram_vocab", tv2.get_vocabulary())
show("tv_ngram_int", tv2(QUERY))

for mode in ["multi_hot", "count", "tf_idf"]:
    t = keras.layers.TextVectorization(output_mode=mode, max_tokens=10)
    t.adapt(CORPUS)
    show(f"tv_{mode}_vocab", t.get_vocabulary())
    show(f"tv_{mode}", t(QUERY))
    if mode == "tf_idf":
        show("tv_tf_idf_weights", t._lookup_layer.idf_weights_const.numpy())
t = keras.layers.TextVectorization(output_mode="multi_hot", max_tokens=20, pad_to_max_tokens=True)
t.adapt(CORPUS)
show("tv_multi_hot_padded", t(QUERY))
t = keras.layers.TextVectorization(split="character", standardize="lower", output_sequence_length=10)
t.adapt(["Ab, ba!", "aab"])
show("tv_char_vocab", t.get_vocabulary())
show("tv_char", t(["Bad ab", "zz"]))

# StringLookup
sl = keras.layers.StringLookup()
sl.adapt(np.array(["b", "a", "c", "a", "b", "a", "d"]))
show("sl_vocab", sl.get_vocabulary())
show("sl_fwd", sl(np.array([["a", "d", "zz"], ["b", "", "c"]])))
sl = keras.layers.StringLookup(vocabulary=["x", "y", "z"], num_oov_indices=2, mask_token="")
show("sl_oov2", sl(np.array(["x", "", "q", "w", "z", "hello", "y"])))
sl = keras.layers.StringLookup(vocabulary=["x", "y", "z"], invert=True)
show("sl_invert", sl(np.array([0, 1, 2, 3, 7])))
sl = keras.layers.StringLookup(vocabulary=["x", "y", "z"], mask_token="[M]", invert=True)
show("sl_invert_mask", sl(np.array([0, 1, 2, 3, 4])))
sl = keras.layers.StringLookup(vocabulary=["x", "y", "z"], output_mode="multi_hot")
show("sl_multi_hot", sl(np.array([["x", "q", "x"], ["z", "z", "y"]])))
sl = keras.layers.StringLookup(vocabulary=["x", "y", "z"], output_mode="one_hot")
show("sl_one_hot", sl(np.array(["y", "q"])))
sl = keras.layers.StringLookup(vocabulary=["x", "y", "z"], output_mode="count")
show("sl_count", sl(np.array([["x", "q", "x"], ["z", "z", "y"]])))
sl = keras.layers.StringLookup(output_mode="tf_idf")
sl.adapt(tf.constant([["a", "b", "a"], ["c", "a", "a"], ["b", "b", "d"]]))
show("sl_tfidf_vocab", sl.get_vocabulary())
show("sl_tfidf", sl(np.array([["a", "b", "q"], ["d", "d", "c"]])))

# IntegerLookup
il = keras.layers.IntegerLookup()
il.adapt(np.array([12, 36, 1138, 42, 12, 36, 12]))
show("il_vocab", il.get_vocabulary())
show("il_fwd", il(np.array([12, 1138, 7, -1, 0])))
il = keras.layers.IntegerLookup(vocabulary=[12, 36, 1138, 42], num_oov_indices=3, mask_token=0)
show("il_oov3", il(np.array([12, 0, 7, 8, 9, 10, -5, 42])))
il = keras.layers.IntegerLookup(vocabulary=[12, 36, 1138, 42], invert=True)
show("il_invert", il(np.array([0, 1, 2, 3, 4, 9])))

# Hashing
STRS = ["", "a", "cat", "The quick brown fox", "hello world", "0123456789abcdefghij0123456789ABCDEFGHIJ-xyz", "é ü 中文", "x" * 70]
for s in STRS:
    print("fingerprint64", repr(s), np.uint64(tf.strings.to_hash_bucket_fast([s], 2**62).numpy()[0]), tf.fingerprint(tf.constant([s])).numpy().tolist())
h = keras.layers.Hashing(num_bins=7)
show("hash_str7", h(np.array(STRS)))
h = keras.layers.Hashing(num_bins=7, mask_value="")
show("hash_str7_mask", h(np.array(STRS)))
h = keras.layers.Hashing(num_bins=1000, salt=133)
show("hash_str1000_salt133", h(np.array(STRS)))
h = keras.layers.Hashing(num_bins=1000, salt=[7, 11])
show("hash_str1000_salt7_11", h(np.array(STRS)))
INTS = [0, 1, 7, -3, 42, 123456789, -9000000000]
h = keras.layers.Hashing(num_bins=13)
show("hash_int13", h(np.array(INTS, dtype="int64")))
h = keras.layers.Hashing(num_bins=13, mask_value=0)
show("hash_int13_mask0", h(np.array(INTS, dtype="int64")))
h = keras.layers.Hashing(num_bins=5, output_mode="multi_hot")
show("hash_multi_hot", h(np.array([["a", "cat", "dog"]])))

# Discretization
d = keras.layers.Discretization(bin_boundaries=[0.0, 1.0, 2.5])
show("disc_int", d(np.array([-1.0, 0.0, 0.5, 1.0, 2.4, 2.5, 9.0])))
d = keras.layers.Discretization(bin_boundaries=[0.0, 1.0, 2.5], output_mode="one_hot")
show("disc_one_hot", d(np.array([-1.0, 1.0, 9.0])))
d = keras.layers.Discretization(num_bins=4, epsilon=0.01)
data = np.array([0.5, 3.0, 1.0, 7.0, 2.0, 8.0, 4.0, 6.0, 5.0, 9.0, 2.5, 0.0], dtype="float32")
d.adapt(data)
show("disc_adapt_boundaries", d.bin_boundaries)
d = keras.layers.Discretization(num_bins=3, epsilon=0.1)
data2 = (np.arange(50, dtype="float32") * 0.37) % 5.0
d.adapt(data2)
show("disc_adapt2_boundaries", d.bin_boundaries)

# CategoryEncoding
ce = keras.layers.CategoryEncoding(num_tokens=4, output_mode="one_hot")
show("ce_one_hot", ce(np.array([3, 0, 2])))
ce = keras.layers.CategoryEncoding(num_tokens=4, output_mode="multi_hot")
show("ce_multi_hot", ce(np.array([[0, 1], [0, 0], [1, 2], [3, 1]])))
ce = keras.layers.CategoryEncoding(num_tokens=4, output_mode="count")
show("ce_count", ce(np.array([[0, 1, 1], [2, 2, 2]])))
