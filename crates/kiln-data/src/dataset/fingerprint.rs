//! [`Dataset::fingerprint`]: a stable 64-bit hash of a pipeline's structure and sources.
//!
//! Every node describes itself to a [`Fingerprint`] builder: its kind (`"batch"`, `"shuffle"`),
//! the arguments that change its output (batch size, seed, …) and its inputs' fingerprints.
//! Sources hash their identity: in-memory data by content; file sources should use
//! [`Fingerprint::file`] (path or URL, size, and modification time or ETag). The file cache
//! ([`crate::dataset::CacheTarget::File`]) stores the fingerprint of its upstream pipeline and
//! refuses a cache file built by a different one.
//!
//! What a fingerprint cannot see: the code of user closures (`map`, `filter`, `interleave`).
//! Such a node contributes its kind and its position in the pipeline only, so **changing a
//! map function does not change the fingerprint** — as with TensorFlow's own cache, use a new
//! cache prefix (or delete the cache file) after changing one. Arguments that do not change the
//! output (`num_parallel_calls` of an order-preserving `map`, `prefetch` buffers) are left out
//! on purpose, so tuning them keeps a cache valid.
//!
//! The hash is kiln's own (a SplitMix64-mixed fold of 64-bit words, with every field
//! length-prefixed): stable across runs, processes and platforms of the same kiln version, not
//! cryptographic.

use std::path::Path;

use super::Dataset;
use crate::element::{Buffer, Element};

impl Dataset {
    /// A stable 64-bit hash of the pipeline: node kinds, their output-relevant arguments and
    /// their sources (in-memory data by content). Two datasets built the same way from the same
    /// data have the same fingerprint, in this process or another.
    ///
    /// User closures (`map`, `filter`, `interleave`) are identified by position only: changing
    /// a closure's code does not change the fingerprint. Computing it hashes in-memory source
    /// data once per source (the result is remembered).
    pub fn fingerprint(&self) -> u64 {
        self.node.fingerprint()
    }
}

/// Builder of a node's fingerprint: feed the kind, arguments and inputs, then [`finish`].
///
/// [`finish`]: Fingerprint::finish
#[derive(Debug, Clone)]
pub(crate) struct Fingerprint {
    state: u64,
}

/// Version of the fingerprint scheme; bump it when a node's description changes meaning.
const SCHEME: u64 = 1;

/// SplitMix64's finaliser: a bijective mix of 64 bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Fingerprint {
    /// Starts the description of a node of kind `kind` (e.g. `"batch"`).
    pub(crate) fn new(kind: &str) -> Fingerprint {
        Fingerprint { state: mix(SCHEME) }.str(kind)
    }

    /// Adds one 64-bit word.
    pub(crate) fn u64(mut self, v: u64) -> Fingerprint {
        self.word(v);
        self
    }

    /// Adds a flag.
    pub(crate) fn bool(self, v: bool) -> Fingerprint {
        self.u64(u64::from(v))
    }

    /// Adds a string (length-prefixed).
    pub(crate) fn str(self, s: &str) -> Fingerprint {
        self.bytes(s.as_bytes())
    }

    /// Adds a byte string (length-prefixed).
    pub(crate) fn bytes(mut self, bytes: &[u8]) -> Fingerprint {
        self.write_bytes(bytes);
        self
    }

    /// Adds an input node's fingerprint.
    pub(crate) fn input(self, fingerprint: u64) -> Fingerprint {
        self.u64(fingerprint)
    }

    /// Adds an element's content: component names, dtypes, shapes and values.
    pub(crate) fn element(mut self, element: &Element) -> Fingerprint {
        self.word(element.len() as u64);
        for (name, array) in element.iter() {
            self = self.str(name).str(array.dtype().name());
            self.word(array.shape().len() as u64);
            for &d in array.shape() {
                self.word(d as u64);
            }
            self.buffer(array.data());
        }
        self
    }

    /// Adds a file's identity — its location (path or URL), size and version (modification
    /// time of a local file; ETag, else last-modified time, of an `s3://` object: one HEAD
    /// request) — for file sources, so a rewritten or replaced file changes the fingerprint. A
    /// file whose metadata cannot be read contributes its location and a marker (reading it
    /// will report the error).
    pub(crate) fn file(self, path: &Path) -> Fingerprint {
        let this = self.str(&path.to_string_lossy());
        match crate::storage::identity(path) {
            Some((size, version)) => this.u64(size).str(&version),
            None => this.str("<unreadable>"),
        }
    }

    /// Adds the identities ([`Fingerprint::file`]) of a source's files, in order.
    pub(crate) fn files(self, paths: &[std::path::PathBuf]) -> Fingerprint {
        paths
            .iter()
            .fold(self.u64(paths.len() as u64), |f, p| f.file(p))
    }

    /// The fingerprint.
    pub(crate) fn finish(self) -> u64 {
        mix(self.state)
    }

    fn word(&mut self, w: u64) {
        self.state = mix(self.state ^ w).rotate_left(17);
    }

    fn write_bytes(&mut self, bytes: &[u8]) {
        self.word(bytes.len() as u64);
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.word(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.word(u64::from_le_bytes(word));
        }
    }

    /// Adds a buffer's values (little-endian bit patterns, packed into 64-bit words).
    fn buffer(&mut self, buffer: &Buffer) {
        self.word(buffer.len() as u64);
        match buffer {
            Buffer::U8(v) => self.write_bytes(v),
            Buffer::I32(v) => {
                for pair in v.chunks(2) {
                    let lo = pair[0] as u32 as u64;
                    let hi = pair.get(1).map_or(0, |&x| x as u32 as u64);
                    self.word(lo | (hi << 32));
                }
            }
            Buffer::F32(v) => {
                for pair in v.chunks(2) {
                    let lo = pair[0].to_bits() as u64;
                    let hi = pair.get(1).map_or(0, |x| x.to_bits() as u64);
                    self.word(lo | (hi << 32));
                }
            }
            Buffer::I64(v) => v.iter().for_each(|&x| self.word(x as u64)),
            Buffer::F64(v) => v.iter().for_each(|x| self.word(x.to_bits())),
            Buffer::String(v) => v.iter().for_each(|b| {
                self.word(b.len() as u64);
                self.write_bytes(b);
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Parallelism;
    use crate::dataset::testutil::range;
    use crate::element::Array;

    #[test]
    fn same_pipeline_same_fingerprint_and_arguments_matter() {
        let build = |n, b| range(n).shuffle(4, Some(1), true).batch(b, false);
        assert_eq!(build(10, 2).fingerprint(), build(10, 2).fingerprint());
        assert_ne!(build(10, 2).fingerprint(), build(10, 3).fingerprint());
        assert_ne!(build(10, 2).fingerprint(), build(11, 2).fingerprint());
        assert_ne!(
            range(10).take(3).fingerprint(),
            range(10).skip(3).fingerprint()
        );
        assert_ne!(
            range(10).shuffle(4, Some(1), true).fingerprint(),
            range(10).shuffle(4, Some(2), true).fingerprint()
        );
        assert_ne!(
            range(10).repeat(Some(2)).fingerprint(),
            range(10).repeat(None).fingerprint()
        );
    }

    #[test]
    fn data_content_is_hashed() {
        let a = Array::new(vec![3], Buffer::F32(vec![1.0, 2.0, 3.0])).unwrap();
        let b = Array::new(vec![3], Buffer::F32(vec![1.0, 2.0, 3.5])).unwrap();
        let c = Array::new(vec![3], Buffer::I32(vec![1, 2, 3])).unwrap();
        let fp = |x: Array| {
            Dataset::from_tensor_slices(Element::new().with("x", x))
                .unwrap()
                .fingerprint()
        };
        assert_eq!(fp(a.clone()), fp(a.clone()));
        assert_ne!(fp(a.clone()), fp(b));
        assert_ne!(fp(a.clone()), fp(c), "dtype is part of the identity");
        let renamed = Dataset::from_tensor_slices(Element::new().with("y", a.clone())).unwrap();
        assert_ne!(
            fp(a),
            renamed.fingerprint(),
            "names are part of the identity"
        );
    }

    #[test]
    fn unseeded_shuffle_and_tuning_knobs_do_not_change_it() {
        assert_eq!(
            range(10).shuffle(4, None, true).fingerprint(),
            range(10).shuffle(4, None, true).fingerprint()
        );
        let plain = range(10).map(Ok, Parallelism::Sequential).fingerprint();
        assert_eq!(
            plain,
            range(10).map(Ok, Parallelism::Fixed(3)).fingerprint()
        );
        assert_eq!(
            plain,
            range(10)
                .map(Ok, Parallelism::Sequential)
                .prefetch(4)
                .fingerprint()
        );
        // A map is identified by position: a map is not the identity.
        assert_ne!(plain, range(10).fingerprint());
    }

    #[test]
    fn byte_strings_are_length_prefixed() {
        let a = Fingerprint::new("k").str("ab").str("c").finish();
        let b = Fingerprint::new("k").str("a").str("bc").finish();
        assert_ne!(a, b);
        let padded = Fingerprint::new("k").bytes(&[1, 0]).finish();
        let short = Fingerprint::new("k").bytes(&[1]).finish();
        assert_ne!(padded, short);
    }
}
