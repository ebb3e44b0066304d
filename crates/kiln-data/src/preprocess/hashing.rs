//! [`Hashing`]: Keras' `Hashing` layer, with TensorFlow's string hashes —
//! [`fingerprint64`] (FarmHash's `Fingerprint64`, behind `tf.strings.to_hash_bucket_fast`) and
//! [`siphash24`] (behind `tf.strings.to_hash_bucket_strong`, used when a `salt` is given).

use super::categorical::{OutputMode, encode};
use crate::element::{Array, Buffer};
use crate::error::{DataError, Result};

const K0: u64 = 0xc3a5_c85c_97cb_3127;
const K1: u64 = 0xb492_b66f_be98_f273;
const K2: u64 = 0x9ae1_6a3b_2f90_404f;

fn fetch64(s: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(s[i..i + 8].try_into().expect("8 bytes"))
}

fn fetch32(s: &[u8], i: usize) -> u64 {
    u64::from(u32::from_le_bytes(s[i..i + 4].try_into().expect("4 bytes")))
}

fn shift_mix(v: u64) -> u64 {
    v ^ (v >> 47)
}

fn hash_len16(u: u64, v: u64, mul: u64) -> u64 {
    let mut a = (u ^ v).wrapping_mul(mul);
    a ^= a >> 47;
    let mut b = (v ^ a).wrapping_mul(mul);
    b ^= b >> 47;
    b.wrapping_mul(mul)
}

fn hash_len0to16(s: &[u8]) -> u64 {
    let len = s.len();
    if len >= 8 {
        let mul = K2.wrapping_add(len as u64 * 2);
        let a = fetch64(s, 0).wrapping_add(K2);
        let b = fetch64(s, len - 8);
        let c = b.rotate_right(37).wrapping_mul(mul).wrapping_add(a);
        let d = a.rotate_right(25).wrapping_add(b).wrapping_mul(mul);
        return hash_len16(c, d, mul);
    }
    if len >= 4 {
        let mul = K2.wrapping_add(len as u64 * 2);
        let a = fetch32(s, 0);
        return hash_len16((len as u64).wrapping_add(a << 3), fetch32(s, len - 4), mul);
    }
    if len > 0 {
        let (a, b, c) = (s[0] as u32, s[len >> 1] as u32, s[len - 1] as u32);
        let y = a.wrapping_add(b << 8);
        let z = (len as u32).wrapping_add(c << 2);
        return shift_mix(u64::from(y).wrapping_mul(K2) ^ u64::from(z).wrapping_mul(K0))
            .wrapping_mul(K2);
    }
    K2
}

fn hash_len17to32(s: &[u8]) -> u64 {
    let len = s.len();
    let mul = K2.wrapping_add(len as u64 * 2);
    let a = fetch64(s, 0).wrapping_mul(K1);
    let b = fetch64(s, 8);
    let c = fetch64(s, len - 8).wrapping_mul(mul);
    let d = fetch64(s, len - 16).wrapping_mul(K2);
    hash_len16(
        a.wrapping_add(b)
            .rotate_right(43)
            .wrapping_add(c.rotate_right(30))
            .wrapping_add(d),
        a.wrapping_add(b.wrapping_add(K2).rotate_right(18))
            .wrapping_add(c),
        mul,
    )
}

fn hash_len33to64(s: &[u8]) -> u64 {
    let len = s.len();
    let mul = K2.wrapping_add(len as u64 * 2);
    let a = fetch64(s, 0).wrapping_mul(K2);
    let b = fetch64(s, 8);
    let c = fetch64(s, len - 8).wrapping_mul(mul);
    let d = fetch64(s, len - 16).wrapping_mul(K2);
    let y = a
        .wrapping_add(b)
        .rotate_right(43)
        .wrapping_add(c.rotate_right(30))
        .wrapping_add(d);
    let z = hash_len16(
        y,
        a.wrapping_add(b.wrapping_add(K2).rotate_right(18))
            .wrapping_add(c),
        mul,
    );
    let e = fetch64(s, 16).wrapping_mul(mul);
    let f = fetch64(s, 24);
    let g = y.wrapping_add(fetch64(s, len - 32)).wrapping_mul(mul);
    let h = z.wrapping_add(fetch64(s, len - 24)).wrapping_mul(mul);
    hash_len16(
        e.wrapping_add(f)
            .rotate_right(43)
            .wrapping_add(g.rotate_right(30))
            .wrapping_add(h),
        e.wrapping_add(f.wrapping_add(a).rotate_right(18))
            .wrapping_add(g),
        mul,
    )
}

/// FarmHash's `WeakHashLen32WithSeeds` over the 32 bytes of `s` at `i`.
fn weak32(s: &[u8], i: usize, a: u64, b: u64) -> (u64, u64) {
    let (w, x, y, z) = (
        fetch64(s, i),
        fetch64(s, i + 8),
        fetch64(s, i + 16),
        fetch64(s, i + 24),
    );
    let mut a = a.wrapping_add(w);
    let mut b = b.wrapping_add(a).wrapping_add(z).rotate_right(21);
    let c = a;
    a = a.wrapping_add(x).wrapping_add(y);
    b = b.wrapping_add(a.rotate_right(44));
    (a.wrapping_add(z), b.wrapping_add(c))
}

/// The state of [`fingerprint64`]'s 64-byte loop: `x, y, z, v, w`.
type FarmState = (u64, u64, u64, (u64, u64), (u64, u64));

/// One 64-byte block of [`fingerprint64`] at `pos`: the loop's body with `mul = K1, k = 1`,
/// the last block's with the final `mul` and `k = 9`.
fn farm_round(s: &[u8], pos: usize, mul: u64, k: u64, state: FarmState) -> FarmState {
    let (mut x, mut y, mut z, mut v, mut w) = state;
    x = x
        .wrapping_add(y)
        .wrapping_add(v.0)
        .wrapping_add(fetch64(s, pos + 8))
        .rotate_right(37)
        .wrapping_mul(mul);
    y = y
        .wrapping_add(v.1)
        .wrapping_add(fetch64(s, pos + 48))
        .rotate_right(42)
        .wrapping_mul(mul);
    x ^= w.1.wrapping_mul(k);
    y = y
        .wrapping_add(v.0.wrapping_mul(k))
        .wrapping_add(fetch64(s, pos + 40));
    z = z.wrapping_add(w.0).rotate_right(33).wrapping_mul(mul);
    v = weak32(s, pos, v.1.wrapping_mul(mul), x.wrapping_add(w.0));
    w = weak32(
        s,
        pos + 32,
        z.wrapping_add(w.1),
        y.wrapping_add(fetch64(s, pos + 16)),
    );
    (z, y, x, v, w)
}

/// FarmHash's `Fingerprint64` (`farmhashna::Hash64`): the hash TensorFlow's
/// `tf.strings.to_hash_bucket_fast` and `tf.fingerprint` use. Stable across platforms.
pub fn fingerprint64(s: &[u8]) -> u64 {
    let len = s.len();
    if len <= 16 {
        return hash_len0to16(s);
    }
    if len <= 32 {
        return hash_len17to32(s);
    }
    if len <= 64 {
        return hash_len33to64(s);
    }
    let seed: u64 = 81;
    let y = seed.wrapping_mul(K1).wrapping_add(113);
    let z = shift_mix(y.wrapping_mul(K2).wrapping_add(113)).wrapping_mul(K2);
    let x = seed.wrapping_mul(K2).wrapping_add(fetch64(s, 0));
    let end = ((len - 1) / 64) * 64;
    let last64 = end + ((len - 1) & 63) - 63;
    let mut state = (x, y, z, (0, 0), (0, 0));
    let mut pos = 0;
    loop {
        state = farm_round(s, pos, K1, 1, state);
        pos += 64;
        if pos == end {
            break;
        }
    }
    let (x, y, z, mut v, mut w) = state;
    let mul = K1.wrapping_add((z & 0xff) << 1);
    w.0 = w.0.wrapping_add(((len - 1) & 63) as u64);
    v.0 = v.0.wrapping_add(w.0);
    w.0 = w.0.wrapping_add(v.0);
    let (x, y, z, v, w) = farm_round(s, last64, mul, 9, (x, y, z, v, w));
    hash_len16(
        hash_len16(v.0, w.0, mul)
            .wrapping_add(shift_mix(y).wrapping_mul(K0))
            .wrapping_add(z),
        hash_len16(v.1, w.1, mul).wrapping_add(x),
        mul,
    )
}

/// SipHash-2-4 keyed with `key`: TensorFlow's `StrongKeyedHash`, behind
/// `tf.strings.to_hash_bucket_strong(key=...)`.
pub fn siphash24(key: [u64; 2], s: &[u8]) -> u64 {
    let mut v = [
        key[0] ^ 0x736f_6d65_7073_6575,
        key[1] ^ 0x646f_7261_6e64_6f6d,
        key[0] ^ 0x6c79_6765_6e65_7261,
        key[1] ^ 0x7465_6462_7974_6573,
    ];
    let round = |v: &mut [u64; 4]| {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    };
    let compress = |v: &mut [u64; 4], m: u64| {
        v[3] ^= m;
        round(v);
        round(v);
        v[0] ^= m;
    };
    let chunks = s.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        compress(&mut v, u64::from_le_bytes(c.try_into().expect("8 bytes")));
    }
    let mut last = (s.len() as u64 & 0xff) << 56;
    for (i, &b) in rest.iter().enumerate() {
        last |= u64::from(b) << (8 * i);
    }
    compress(&mut v, last);
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// A value Keras' `Hashing` compares with `mask_value`: a string or an integer.
#[derive(Debug, Clone, PartialEq)]
pub enum HashValue {
    /// A string value.
    String(String),
    /// An integer value.
    Int(i64),
}

/// `keras.layers.Hashing(num_bins, mask_value, salt, output_mode)`: each value to a bin in
/// `[0, num_bins)` by its FarmHash `Fingerprint64` (SipHash-2-4 keyed by `salt` when given),
/// modulo the bins. Integers hash by their decimal string and floats are truncated to
/// integers first, as Keras does (`tf.as_string`). With `mask_value`, bin 0 is reserved for
/// it and the other values hash into `[1, num_bins)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Hashing {
    /// Number of bins (at least 1).
    pub num_bins: usize,
    /// The value sent to bin 0.
    pub mask_value: Option<HashValue>,
    /// SipHash key (Keras' `salt`: one integer `s` is `[s, s]`).
    pub salt: Option<[u64; 2]>,
    /// `int` (default), `one_hot`, `multi_hot` or `count`.
    pub output_mode: OutputMode,
}

impl Hashing {
    fn bucket(&self, bytes: &[u8], bins: u64) -> u64 {
        match self.salt {
            Some(key) => siphash24(key, bytes) % bins,
            None => fingerprint64(bytes) % bins,
        }
    }

    /// The bins of `x` (strings or numbers), encoded by `output_mode`.
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] for `num_bins == 0` or an `output_mode` Hashing lacks.
    pub fn apply(&self, x: &Array) -> Result<Array> {
        if self.num_bins == 0 || self.output_mode == OutputMode::TfIdf {
            return Err(DataError::InvalidArgument(
                "Hashing needs num_bins >= 1 and output_mode \"int\", \"one_hot\", \"multi_hot\" or \"count\""
                    .into(),
            ));
        }
        let masked = self.mask_value.is_some() && self.num_bins > 1;
        let bins = self.num_bins as u64 - u64::from(masked);
        let values: Vec<(Vec<u8>, bool)> = match x.data() {
            Buffer::String(v) => v
                .iter()
                .map(|s| {
                    let is_mask = matches!(&self.mask_value, Some(HashValue::String(m)) if m.as_bytes() == s.as_slice());
                    (s.clone(), is_mask)
                })
                .collect(),
            other => other
                .try_to_i64()?
                .into_iter()
                .map(|i| {
                    let is_mask = matches!(self.mask_value, Some(HashValue::Int(m)) if m == i);
                    (i.to_string().into_bytes(), is_mask)
                })
                .collect(),
        };
        let indices: Vec<i64> = values
            .iter()
            .map(|(bytes, is_mask)| match (masked, is_mask) {
                (true, true) => 0,
                (true, false) => self.bucket(bytes, bins) as i64 + 1,
                _ => self.bucket(bytes, bins) as i64,
            })
            .collect();
        encode(&indices, x.shape(), self.output_mode, self.num_bins, None)
    }
}
