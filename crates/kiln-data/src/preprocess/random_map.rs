//! [`Dataset::map_with_rng`]: a map whose function draws random numbers, reproducibly.
//!
//! Element `i` (0-based, counted in this dataset's input order) of iteration `k` (the `k`-th
//! [`Dataset::iter`] call on this dataset, or the `k`-th repetition under a later `repeat`)
//! gets a fresh `StdRng` seeded from `(seed, k, i)`. So the numbers an element sees depend
//! neither on thread scheduling nor on `num_parallel_calls`, differ from epoch to epoch, and a
//! pipeline rebuilt with the same seed replays the same sequence — what Keras' seeded random
//! layers give inside `tf.data` (TensorFlow's own random streams are not reproduced).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::dataset::{BoxIter, Cardinality, Dataset, Fingerprint, Node, Parallelism};
use crate::element::{Array, Buffer, Element};
use crate::error::Result;

/// Internal component carrying an element's position to the (possibly parallel) map.
const RNG_INDEX: &str = "__kiln_rng_index";

type RngFn = Arc<dyn Fn(Element, &mut StdRng) -> Result<Element> + Send + Sync>;

impl Dataset {
    /// `map(f, num_parallel_calls)` where `f` also receives a random generator: element `i`
    /// of iteration `k` gets a `StdRng` seeded from `(seed, k, i)` (see the module docs).
    /// Order is preserved; errors and panics behave as in [`Dataset::map`]. Cardinality: the
    /// input's.
    pub fn map_with_rng<F>(self, seed: u64, f: F, num_parallel_calls: Parallelism) -> Dataset
    where
        F: Fn(Element, &mut StdRng) -> Result<Element> + Send + Sync + 'static,
    {
        self.map_with_rng_deterministic(seed, f, num_parallel_calls, true)
    }

    /// [`Dataset::map_with_rng`] with tf.data's `deterministic` argument (see
    /// [`Dataset::map_with`]): with `false`, a parallel map may emit elements out of order.
    /// Each element still gets the generator of its input position, so the values are those
    /// of the deterministic map; only the order may differ.
    pub fn map_with_rng_deterministic<F>(
        self,
        seed: u64,
        f: F,
        num_parallel_calls: Parallelism,
        deterministic: bool,
    ) -> Dataset
    where
        F: Fn(Element, &mut StdRng) -> Result<Element> + Send + Sync + 'static,
    {
        Dataset::from_node(RngMapNode {
            input: self,
            seed,
            f: Arc::new(f),
            parallelism: num_parallel_calls,
            deterministic,
            iterations: AtomicU64::new(0),
        })
    }
}

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The generator of element `index` of iteration `iteration`.
pub(crate) fn element_rng(seed: u64, iteration: u64, index: u64) -> StdRng {
    StdRng::seed_from_u64(mix(mix(seed ^ mix(iteration)) ^ index))
}

struct RngMapNode {
    input: Dataset,
    seed: u64,
    f: RngFn,
    parallelism: Parallelism,
    /// tf.data's `deterministic` (see [`Dataset::map_with`]).
    deterministic: bool,
    /// Iterations started so far.
    iterations: AtomicU64,
}

impl Node for RngMapNode {
    fn iter(&self) -> BoxIter {
        let iteration = self.iterations.fetch_add(1, Ordering::Relaxed);
        let (seed, f) = (self.seed, Arc::clone(&self.f));
        let numbered = Dataset::from_node(NumberNode {
            input: self.input.clone(),
        });
        let mapped = numbered.map_with(
            move |mut e| {
                let index = e
                    .remove(RNG_INDEX)
                    .and_then(|a| a.data().try_to_i64().ok())
                    .and_then(|v| v.first().copied())
                    .unwrap_or_default() as u64;
                f(e, &mut element_rng(seed, iteration, index))
            },
            self.parallelism,
            self.deterministic,
        );
        mapped.iter_within()
    }

    fn cardinality(&self) -> Cardinality {
        self.input.cardinality()
    }

    fn fingerprint(&self) -> u64 {
        let fp = Fingerprint::new("map_with_rng").u64(self.seed);
        let fp = if !self.deterministic && self.parallelism != Parallelism::Sequential {
            fp.str("nondeterministic")
        } else {
            fp
        };
        fp.input(self.input.fingerprint()).finish()
    }
}

/// Adds each element's position as the `int64` scalar [`RNG_INDEX`].
struct NumberNode {
    input: Dataset,
}

impl Node for NumberNode {
    fn iter(&self) -> BoxIter {
        Box::new(self.input.iter_within().enumerate().map(|(i, r)| {
            r.map(|mut e| {
                e.insert(
                    RNG_INDEX,
                    Array::scalar(Buffer::I64(vec![i as i64])).expect("one value for a scalar"),
                );
                e
            })
        }))
    }

    fn cardinality(&self) -> Cardinality {
        self.input.cardinality()
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("number")
            .input(self.input.fingerprint())
            .finish()
    }
}
