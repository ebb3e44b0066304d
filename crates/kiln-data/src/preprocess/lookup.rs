//! [`Lookup`]: Keras' `StringLookup` and `IntegerLookup` (`IndexLookup`), with `adapt`.

use std::cmp::Ordering;
use std::collections::HashMap;

use super::categorical::{OutputMode, encode, integer_values};
use super::hashing::fingerprint64;
use crate::element::{Array, Buffer};
use crate::error::{DataError, Result};

/// What a lookup's vocabulary holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// Strings (`StringLookup`, `TextVectorization`).
    String,
    /// Integers (`IntegerLookup`), kept as their decimal text.
    Integer,
}

/// What [`LookupOptions::adapt`] learns: the vocabulary and, for `tf_idf`, its weights.
pub type Adapted = (Vec<Vec<u8>>, Option<Vec<f64>>);

/// The arguments of `StringLookup` / `IntegerLookup` other than the vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct LookupOptions {
    /// Strings or integers.
    pub kind: TokenKind,
    /// Largest vocabulary, special tokens included (`None`: no limit).
    pub max_tokens: Option<usize>,
    /// Indices for values outside the vocabulary (Keras' default 1).
    pub num_oov_indices: usize,
    /// The value that maps to index 0 in `int` mode (and counts nowhere otherwise).
    pub mask_token: Option<Vec<u8>>,
    /// What `invert` returns for OOV indices (`"[UNK]"`, or `-1` for integers).
    pub oov_token: Vec<u8>,
    /// `int` (default), `one_hot`, `multi_hot`, `count` or `tf_idf`.
    pub output_mode: OutputMode,
    /// Map indices back to tokens.
    pub invert: bool,
    /// Make non-`int` outputs `max_tokens` wide.
    pub pad_to_max_tokens: bool,
}

impl LookupOptions {
    /// Index of the first OOV index: 1 with a mask token in `int` mode, else 0.
    fn oov_start(&self) -> usize {
        usize::from(self.mask_token.is_some() && self.output_mode == OutputMode::Int)
    }

    /// Index of the first vocabulary token.
    fn token_start(&self) -> usize {
        self.oov_start() + self.num_oov_indices
    }

    /// Orders tokens as Keras' `adapt` does among equal counts: descending (integers by
    /// value, strings by bytes).
    fn descending(&self, a: &[u8], b: &[u8]) -> Ordering {
        match self.kind {
            TokenKind::String => b.cmp(a),
            TokenKind::Integer => parse_int(b).cmp(&parse_int(a)),
        }
    }

    /// Keras' `adapt`: the vocabulary (most frequent first, ties in descending order, the
    /// mask and OOV tokens left out, at most `max_tokens` minus the special indices) of the
    /// `documents` (each a list of tokens), and for `tf_idf` each token's inverse document
    /// frequency `ln(1 + documents / (1 + documents holding it))`.
    ///
    /// # Errors
    /// The first document's error; [`DataError::InvalidArgument`] when there are no tokens.
    pub fn adapt(&self, documents: impl Iterator<Item = Result<Vec<Vec<u8>>>>) -> Result<Adapted> {
        let mut counts: HashMap<Vec<u8>, (u64, u64)> = HashMap::new();
        let mut num_documents = 0u64;
        for doc in documents {
            let doc = doc?;
            num_documents += 1;
            let mut seen: Vec<&Vec<u8>> = Vec::new();
            for token in &doc {
                let entry = counts.entry(token.clone()).or_default();
                entry.0 += 1;
                if !seen.contains(&token) {
                    seen.push(token);
                    entry.1 += 1;
                }
            }
        }
        if let Some(m) = &self.mask_token {
            counts.remove(m);
        }
        counts.remove(&self.oov_token);
        if counts.is_empty() {
            return Err(DataError::InvalidArgument(
                "the dataset has no tokens to build a vocabulary from (it is empty, or holds \
                 only mask / OOV tokens)"
                    .into(),
            ));
        }
        let mut tokens: Vec<(Vec<u8>, (u64, u64))> = counts.into_iter().collect();
        tokens.sort_by(|(a, (ca, _)), (b, (cb, _))| cb.cmp(ca).then(self.descending(a, b)));
        if let Some(max) = self.max_tokens {
            tokens.truncate(max.saturating_sub(self.token_start()));
        }
        let idf = (self.output_mode == OutputMode::TfIdf).then(|| {
            tokens
                .iter()
                .map(|(_, (_, df))| {
                    f64::from((1.0 + num_documents as f64 / (1.0 + *df as f64)).ln() as f32)
                })
                .collect()
        });
        Ok((tokens.into_iter().map(|(t, _)| t).collect(), idf))
    }
}

fn parse_int(token: &[u8]) -> i64 {
    std::str::from_utf8(token)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// `keras.layers.StringLookup` / `IntegerLookup` with a vocabulary: tokens to indices (mask
/// token → 0 in `int` mode, OOV tokens → `[oov_start, oov_start + num_oov_indices)`, the
/// vocabulary after them), encoded by `output_mode`; or with `invert`, indices back to tokens.
///
/// With several OOV indices an unknown string goes to `fingerprint64(s) % num_oov_indices`
/// and an unknown integer to `floormod(i, num_oov_indices)`, as Keras does.
#[derive(Debug, Clone, PartialEq)]
pub struct Lookup {
    options: LookupOptions,
    tokens: Vec<Vec<u8>>,
    index: HashMap<Vec<u8>, usize>,
    /// `tf_idf`: one weight per output index.
    idf: Vec<f32>,
}

impl Lookup {
    /// A lookup with `vocabulary` (the tokens, optionally preceded by the special tokens as
    /// Keras' `get_vocabulary()` lists them) and, for `tf_idf`, one `idf_weights` entry per
    /// vocabulary entry.
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] for an empty or repeated vocabulary, the mask token
    /// inside it, more tokens than `max_tokens`, `invert` without `int` mode, or `tf_idf`
    /// without matching weights.
    pub fn new(
        options: LookupOptions,
        vocabulary: Vec<Vec<u8>>,
        idf_weights: Option<Vec<f64>>,
    ) -> Result<Lookup> {
        let bad = |m: String| Err(DataError::InvalidArgument(m));
        if options.invert && options.output_mode != OutputMode::Int {
            return bad("invert = true needs output_mode = \"int\"".into());
        }
        if options.pad_to_max_tokens && options.max_tokens.is_none() {
            return bad("pad_to_max_tokens = true needs max_tokens".into());
        }
        let start = options.token_start();
        let mut specials: Vec<&[u8]> = Vec::new();
        if options.oov_start() == 1 {
            specials.push(options.mask_token.as_deref().unwrap_or_default());
        }
        specials.extend(std::iter::repeat_n(
            options.oov_token.as_slice(),
            options.num_oov_indices,
        ));
        let has_specials = vocabulary.len() >= start
            && vocabulary[..start]
                .iter()
                .map(Vec::as_slice)
                .eq(specials.iter().copied());
        let tokens: Vec<Vec<u8>> = match has_specials {
            true => vocabulary[start..].to_vec(),
            false => vocabulary.clone(),
        };
        if tokens.is_empty() {
            return bad("the vocabulary is empty; give at least one token".into());
        }
        let show = |t: &[u8]| String::from_utf8_lossy(t).into_owned();
        let mut index = HashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            if index.insert(t.clone(), start + i).is_some() {
                return bad(format!(
                    "the vocabulary repeats {:?}; list each token once",
                    show(t)
                ));
            }
            if options.mask_token.as_ref() == Some(t) {
                return bad(format!(
                    "the vocabulary holds the mask token {:?}; leave it out (it maps to 0)",
                    show(t)
                ));
            }
        }
        if let Some(max) = options.max_tokens
            && start + tokens.len() > max
        {
            return bad(format!(
                "the vocabulary has {} entries with the special ones, more than max_tokens = \
                 {max}",
                start + tokens.len()
            ));
        }
        let mut lookup = Lookup {
            options,
            tokens,
            index,
            idf: Vec::new(),
        };
        if lookup.options.output_mode == OutputMode::TfIdf {
            let Some(w) = idf_weights else {
                return bad("output_mode = \"tf_idf\" needs idf_weights (or adapt = true)".into());
            };
            if w.len() != vocabulary.len() {
                return bad(format!(
                    "idf_weights has {} entries but the vocabulary {}",
                    w.len(),
                    vocabulary.len()
                ));
            }
            let w: Vec<f32> = w.iter().map(|&v| v as f32).collect();
            let mut idf = Vec::new();
            if !has_specials {
                let mean = (w.iter().map(|&v| f64::from(v)).sum::<f64>() / w.len() as f64) as f32;
                idf.resize(start, mean);
            }
            idf.extend(w);
            idf.resize(lookup.depth(), 0.0);
            lookup.idf = idf;
        }
        Ok(lookup)
    }

    /// The options.
    pub fn options(&self) -> &LookupOptions {
        &self.options
    }

    /// The vocabulary, special tokens excluded.
    pub fn tokens(&self) -> &[Vec<u8>] {
        &self.tokens
    }

    /// `tf_idf`: the weight of each vocabulary token (special indices excluded).
    pub fn idf_weights(&self) -> Vec<f64> {
        let start = self.options.token_start();
        self.idf
            .iter()
            .skip(start)
            .take(self.tokens.len())
            .map(|&w| f64::from(w))
            .collect()
    }

    /// Size of the index space: special indices plus the vocabulary.
    pub fn vocabulary_size(&self) -> usize {
        self.options.token_start() + self.tokens.len()
    }

    /// Width of non-`int` outputs (`max_tokens` with `pad_to_max_tokens`).
    fn depth(&self) -> usize {
        match (self.options.pad_to_max_tokens, self.options.max_tokens) {
            (true, Some(m)) => m,
            _ => self.vocabulary_size(),
        }
    }

    /// The index of one token (`-1` for a mask outside `int` mode, which counts nowhere).
    fn index_of(&self, token: &[u8]) -> Result<i64> {
        let o = &self.options;
        if o.mask_token.as_deref() == Some(token) {
            return Ok(if o.output_mode == OutputMode::Int {
                0
            } else {
                -1
            });
        }
        if let Some(&i) = self.index.get(token) {
            return Ok(i as i64);
        }
        let n = o.num_oov_indices as i64;
        let oov = match (n, o.kind) {
            (0, _) => {
                return Err(DataError::InvalidArgument(format!(
                    "{:?} is not in the vocabulary and num_oov_indices = 0; set \
                     num_oov_indices = 1 to map unknown values to an OOV index",
                    String::from_utf8_lossy(token)
                )));
            }
            (1, _) => 0,
            (n, TokenKind::Integer) => parse_int(token).rem_euclid(n),
            (n, TokenKind::String) => (fingerprint64(token) % n as u64) as i64,
        };
        Ok(o.oov_start() as i64 + oov)
    }

    /// Looks up `tokens` (one example of `shape`) and encodes them by `output_mode`.
    ///
    /// # Errors
    /// As [`Lookup::apply`].
    pub fn encode_tokens(&self, tokens: &[Vec<u8>], shape: &[usize]) -> Result<Array> {
        let indices = tokens
            .iter()
            .map(|t| self.index_of(t))
            .collect::<Result<Vec<_>>>()?;
        encode(
            &indices,
            shape,
            self.options.output_mode,
            self.depth(),
            Some(&self.idf),
        )
    }

    /// Applies the lookup to one example.
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] for numbers given to a string lookup or strings to an
    /// integer one (and for `invert`, non-integer indices), or an unknown value with
    /// `num_oov_indices = 0`.
    pub fn apply(&self, x: &Array) -> Result<Array> {
        if self.options.invert {
            return self.invert(x);
        }
        let tokens: Vec<Vec<u8>> = match (self.options.kind, x.data()) {
            (TokenKind::String, Buffer::String(v)) => v.clone(),
            (TokenKind::String, _) => {
                return Err(DataError::InvalidArgument(format!(
                    "string_lookup needs string values, got {}; use integer_lookup for \
                     integers",
                    x.dtype()
                )));
            }
            (TokenKind::Integer, _) => integer_values(x, "integer_lookup")?
                .iter()
                .map(|i| i.to_string().into_bytes())
                .collect(),
        };
        self.encode_tokens(&tokens, x.shape())
    }

    /// `invert = true`: indices to tokens (the mask token at 0 in `int` mode with a mask,
    /// the OOV token for OOV and unknown indices).
    fn invert(&self, x: &Array) -> Result<Array> {
        let o = &self.options;
        let indices = integer_values(x, "an inverted lookup")?;
        let start = o.token_start() as i64;
        let tokens: Vec<Vec<u8>> = indices
            .iter()
            .map(|&i| {
                if o.oov_start() == 1 && i == 0 {
                    o.mask_token.clone().unwrap_or_default()
                } else if i >= start && ((i - start) as usize) < self.tokens.len() {
                    self.tokens[(i - start) as usize].clone()
                } else {
                    o.oov_token.clone()
                }
            })
            .collect();
        let data = match o.kind {
            TokenKind::String => Buffer::String(tokens),
            TokenKind::Integer => Buffer::I64(tokens.iter().map(|t| parse_int(t)).collect()),
        };
        Array::new(x.shape().to_vec(), data)
    }
}
