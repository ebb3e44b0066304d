"""How tf.distribute.MirroredStrategy splits a global batch across replicas.

Run: /root/.cache/kiln/tfvenv/bin/python tests/reference/distribute_rebatch.py
(TensorFlow 2.21, four logical CPU devices). Output, recorded in
crates/kiln/src/distribute/split.rs (`split_sizes`):

    2 7 [4, 3]            3 7 [3, 3, 1]         4 7 [2, 2, 2, 1]
    2 5 [3, 2]            3 5 [2, 2, 1]         4 5 [2, 2, 1, 0]
    2 2 [1, 1]            3 2 [1, 1, 0]         4 2 [1, 1, 0, 0]
    3 range(13).batch(9): [3, 3, 3] then [2, 2, 0]

i.e. ceil(batch / replicas) examples per replica in order, the last replicas getting what is
left; a smaller last batch is split by its own size.
"""
import tensorflow as tf

cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    cpus[0], [tf.config.LogicalDeviceConfiguration()] * 4
)


def sizes(strategy, ds):
    out = []
    for b in strategy.experimental_distribute_dataset(ds):
        out.append([int(t.shape[0]) for t in strategy.experimental_local_results(b)])
    return out


for n in (2, 3, 4):
    s = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(n)])
    for g in (7, 5, 2):
        print(n, g, sizes(s, tf.data.Dataset.range(g).batch(g))[0])
s = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(3)])
print(3, "range(13).batch(9):", sizes(s, tf.data.Dataset.range(13).batch(9)))
