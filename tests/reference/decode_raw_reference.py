"""Known answers of tf.io.decode_raw for kiln-data's decode_raw test
(crates/kiln-data/src/preprocess/tests.rs, decode_raw_is_tf_io_decode_raw).

    /root/.cache/kiln/tfvenv/bin/python tests/reference/decode_raw_reference.py

TensorFlow 2.21 prints:
    [  1 256  -1]
    [16777216    65536       -1]
    [[ 1.] [-2.]] (2, 1)
    [7 8 9]
    InvalidArgumentError ... Input to DecodeRaw has length 3 that is not a multiple of 4, the size of int32
    InvalidArgumentError ... DecodeRaw requires input strings to all be the same size ...
"""

import tensorflow as tf

b = bytes([1, 0, 0, 0, 0, 1, 0, 0, 255, 255, 255, 255])
print(tf.io.decode_raw(b, tf.int32).numpy())
print(tf.io.decode_raw(b, tf.int32, little_endian=False).numpy())
two = tf.io.decode_raw([b"\x00\x00\x80\x3f", b"\x00\x00\x00\xc0"], tf.float32)
print(two.numpy(), two.shape)
print(tf.io.decode_raw(b"\x07\x08\x09", tf.uint8).numpy())
for bad in [lambda: tf.io.decode_raw(b"\x07\x08\x09", tf.int32),
            lambda: tf.io.decode_raw([b"ab", b"abcd"], tf.uint8)]:
    try:
        bad()
    except tf.errors.InvalidArgumentError as e:
        print(type(e).__name__, e.message)
