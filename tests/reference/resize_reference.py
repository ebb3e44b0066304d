"""Known answers of tf.image.resize(bilinear) for kiln-data's resize test
(crates/kiln-data/src/preprocess/tests.rs, resize_matches_tf_on_a_multichannel_pattern).

    /root/.cache/kiln/tfvenv/bin/python tests/reference/resize_reference.py
"""

import numpy as np
import tensorflow as tf

h, w, c = 3, 5, 2
x = np.array([(7 * y + 13 * xx + 29 * ch) % 256 for y in range(h) for xx in range(w) for ch in range(c)],
             np.uint8).reshape(h, w, c)
for size in [(4, 7), (2, 3)]:
    y = tf.image.resize(x, size, method="bilinear").numpy()
    print(size, [float(v) for v in y.reshape(-1)])
