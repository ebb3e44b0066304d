//! [`Dataset::shuffle`]: tf.data's buffered shuffle.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node};
use crate::element::Element;
use crate::error::Result;

impl Dataset {
    /// `tf.data.Dataset.shuffle(buffer_size, seed, reshuffle_each_iteration)`.
    ///
    /// The algorithm is tf.data's: fill a buffer with the first `buffer_size` elements, then
    /// repeatedly emit a uniformly chosen buffered element and put the next input element in
    /// its place; when the input ends, drain the buffer in random order. A buffer at least as
    /// large as the dataset gives a uniform permutation; `buffer_size == 1` is the identity.
    ///
    /// Seeding: with `seed = Some(s)` the orders are a deterministic function of `s` and of how
    /// many iterations this shuffle has started. With `reshuffle_each_iteration` each new
    /// iteration — each [`Dataset::iter`] call, and each repetition under a later
    /// [`Dataset::repeat`] — uses a different order (iteration `k` is seeded from `s` and `k`),
    /// so a dataset rebuilt with the same seed replays the same sequence of orders; without it
    /// every iteration repeats the first order. `seed = None` draws `s` at random when the
    /// dataset is built.
    ///
    /// The order depends on `rand`'s `StdRng`, so it is reproducible with the same kiln build
    /// but does not match TensorFlow's own random streams.
    ///
    /// Input errors are yielded as soon as they are read. `buffer_size == 0` makes iteration
    /// yield a single [`crate::DataError::InvalidArgument`].
    pub fn shuffle(
        self,
        buffer_size: usize,
        seed: Option<u64>,
        reshuffle_each_iteration: bool,
    ) -> Dataset {
        if buffer_size == 0 {
            return Dataset::invalid("shuffle: buffer_size must be at least 1".into());
        }
        Dataset::from_node(ShuffleNode {
            input: self.node,
            buffer_size,
            seed: seed.unwrap_or_else(|| rand::rng().random()),
            seeded: seed.is_some(),
            reshuffle_each_iteration,
            iterations: AtomicU64::new(0),
        })
    }
}

struct ShuffleNode {
    input: Arc<dyn Node>,
    buffer_size: usize,
    seed: u64,
    /// Whether `seed` was given (an unseeded shuffle's random seed is left out of the
    /// fingerprint, so rebuilding the pipeline keeps it).
    seeded: bool,
    reshuffle_each_iteration: bool,
    /// Iterations started so far (the seed generator's state).
    iterations: AtomicU64,
}

/// SplitMix64's finaliser: a bijective mix of 64 bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Node for ShuffleNode {
    fn iter(&self) -> BoxIter {
        let iteration = if self.reshuffle_each_iteration {
            self.iterations.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        };
        let rng = StdRng::seed_from_u64(mix(self.seed ^ mix(iteration)));
        Box::new(ShuffleIter {
            input: self.input.iter(),
            input_done: false,
            buffer: Vec::with_capacity(self.buffer_size.min(1 << 16)),
            buffer_size: self.buffer_size,
            rng,
        })
    }

    fn cardinality(&self) -> Cardinality {
        self.input.cardinality()
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("shuffle")
            .u64(self.buffer_size as u64)
            .bool(self.seeded)
            .u64(if self.seeded { self.seed } else { 0 })
            .bool(self.reshuffle_each_iteration)
            .input(self.input.fingerprint())
            .finish()
    }
}

struct ShuffleIter {
    input: BoxIter,
    input_done: bool,
    buffer: Vec<Element>,
    buffer_size: usize,
    rng: StdRng,
}

impl Iterator for ShuffleIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        while !self.input_done && self.buffer.len() < self.buffer_size {
            match self.input.next() {
                Some(Ok(element)) => self.buffer.push(element),
                Some(Err(err)) => return Some(Err(err)),
                None => self.input_done = true,
            }
        }
        if self.buffer.is_empty() {
            return None;
        }
        let index = self.rng.random_range(0..self.buffer.len());
        // `swap_remove` moves the last slot into `index`; the next fill appends, so every
        // buffered element stays equally likely to be drawn.
        Some(Ok(self.buffer.swap_remove(index)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::testutil::{collect, range};

    #[test]
    fn same_seed_same_order_and_a_permutation() {
        let a = collect(&range(100).shuffle(100, Some(7), false));
        let b = collect(&range(100).shuffle(100, Some(7), false));
        assert_eq!(a, b);
        let input: Vec<i64> = (0..100).collect();
        assert_ne!(a, input, "100 elements should not stay in order");
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, input);
        // A different seed gives a different order.
        assert_ne!(collect(&range(100).shuffle(100, Some(8), false)), a);
    }

    #[test]
    fn small_buffer_is_still_a_permutation_and_local() {
        let out = collect(&range(100).shuffle(10, Some(1), false));
        let mut sorted = out.clone();
        sorted.sort();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        // With a buffer of 10, output position i can only hold an input index <= i + 9.
        for (i, v) in out.iter().enumerate() {
            assert!(*v <= i as i64 + 9, "position {i} holds {v}");
        }
    }

    #[test]
    fn reshuffle_each_iteration_changes_order_reproducibly() {
        let orders = |seed| {
            let ds = range(50).shuffle(50, Some(seed), true);
            (0..3).map(|_| collect(&ds)).collect::<Vec<_>>()
        };
        let first = orders(3);
        assert_ne!(first[0], first[1]);
        assert_ne!(first[1], first[2]);
        assert_eq!(
            first,
            orders(3),
            "rebuilding with the same seed replays the orders"
        );
        for order in &first {
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        }
    }

    #[test]
    fn reshuffle_under_repeat_differs_per_repetition() {
        let ds = range(20).shuffle(20, Some(11), true).repeat(Some(2));
        let out = collect(&ds);
        assert_eq!(out.len(), 40);
        assert_ne!(out[..20], out[20..]);
        let again = collect(&range(20).shuffle(20, Some(11), true).repeat(Some(2)));
        assert_eq!(out, again);
    }

    #[test]
    fn without_reshuffle_every_iteration_is_the_same() {
        let ds = range(50).shuffle(50, Some(5), false);
        let first = collect(&ds);
        assert_eq!(collect(&ds), first);
        assert_eq!(collect(&ds), first);
        let repeated = collect(&ds.clone().repeat(Some(2)));
        assert_eq!(repeated[..50], first[..]);
        assert_eq!(repeated[50..], first[..]);
        // Unseeded but not reshuffled: fixed at build time too.
        let unseeded = range(50).shuffle(50, None, false);
        assert_eq!(collect(&unseeded), collect(&unseeded));
    }

    #[test]
    fn buffer_size_one_is_identity() {
        let ds = range(30).shuffle(1, Some(9), true);
        assert_eq!(collect(&ds), (0..30).collect::<Vec<_>>());
    }

    #[test]
    fn buffer_size_zero_is_invalid_and_cardinality_kept() {
        let results: Vec<_> = range(3).shuffle(0, None, true).iter().collect();
        assert_eq!(results.len(), 1);
        assert!(matches!(
            results[0],
            Err(crate::DataError::InvalidArgument(_))
        ));
        assert_eq!(
            range(7).shuffle(3, None, true).cardinality(),
            Cardinality::Finite(7)
        );
    }
}
