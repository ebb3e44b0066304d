//! [`TextVectorization`]: Keras' `TextVectorization` layer — standardize, split, n-grams,
//! then a string lookup.

use std::str::FromStr;

use super::categorical::OutputMode;
use super::lookup::Lookup;
use crate::dataset::Dataset;
use crate::element::{Array, Buffer};
use crate::error::{DataError, Result};

/// Keras' `standardize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standardize {
    /// ASCII lower case, then strip punctuation (the default).
    LowerAndStripPunctuation,
    /// ASCII lower case (`tf.strings.lower`).
    Lower,
    /// Remove ASCII punctuation (`string.punctuation`).
    StripPunctuation,
}

/// Keras' `split`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitMode {
    /// On runs of ASCII whitespace (`tf.strings.split`; the default).
    Whitespace,
    /// Into Unicode characters (`tf.strings.unicode_split`).
    Character,
}

impl FromStr for Standardize {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Standardize> {
        Ok(match s {
            "lower_and_strip_punctuation" => Standardize::LowerAndStripPunctuation,
            "lower" => Standardize::Lower,
            "strip_punctuation" => Standardize::StripPunctuation,
            other => {
                return Err(DataError::InvalidArgument(format!(
                    "unknown standardize \"{other}\"; allowed: \"lower_and_strip_punctuation\", \
                     \"lower\", \"strip_punctuation\", \"none\""
                )));
            }
        })
    }
}

impl FromStr for SplitMode {
    type Err = DataError;

    fn from_str(s: &str) -> Result<SplitMode> {
        Ok(match s {
            "whitespace" => SplitMode::Whitespace,
            "character" => SplitMode::Character,
            other => {
                return Err(DataError::InvalidArgument(format!(
                    "unknown split \"{other}\"; allowed: \"whitespace\", \"character\", \"none\""
                )));
            }
        })
    }
}

/// Keras' punctuation class: `[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~\']`.
fn is_punctuation(b: u8) -> bool {
    b.is_ascii_punctuation()
}

/// The whitespace `tf.strings.split` splits on.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// How text becomes tokens: Keras' `standardize`, `split` and `ngrams`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tokenizer {
    /// `None`: keep the text as it is.
    pub standardize: Option<Standardize>,
    /// `None`: each value is one token.
    pub split: Option<SplitMode>,
    /// N-gram widths, joined by a space (Keras' `ngrams = n` is `1..=n`); empty: none.
    pub ngrams: Vec<usize>,
}

impl Tokenizer {
    fn standardized(&self, text: &[u8]) -> Vec<u8> {
        let lower = matches!(
            self.standardize,
            Some(Standardize::Lower | Standardize::LowerAndStripPunctuation)
        );
        let strip = matches!(
            self.standardize,
            Some(Standardize::StripPunctuation | Standardize::LowerAndStripPunctuation)
        );
        text.iter()
            .filter(|&&b| !(strip && is_punctuation(b)))
            .map(|&b| if lower { b.to_ascii_lowercase() } else { b })
            .collect()
    }

    /// The tokens of one example's values (a scalar string, or several with `split = None`).
    pub fn tokens(&self, values: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let mut words: Vec<Vec<u8>> = Vec::new();
        for v in values {
            let text = self.standardized(v);
            match self.split {
                None => words.push(text),
                Some(SplitMode::Whitespace) => words.extend(
                    text.split(|&b| is_space(b))
                        .filter(|w| !w.is_empty())
                        .map(<[u8]>::to_vec),
                ),
                Some(SplitMode::Character) => words.extend(
                    String::from_utf8_lossy(&text)
                        .chars()
                        .map(|c| c.to_string().into_bytes()),
                ),
            }
        }
        if self.ngrams.is_empty() {
            return words;
        }
        let mut out = Vec::new();
        for &n in &self.ngrams {
            for gram in words.windows(n.max(1)) {
                out.push(gram.join(&b' '));
            }
        }
        out
    }

    /// The tokens of one example of `x`.
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] for numbers, or several strings in one example with a
    /// `split` (Keras wants one string per example, shape `[]` or `[1]`).
    pub fn example_tokens(&self, x: &Array) -> Result<Vec<Vec<u8>>> {
        let Buffer::String(values) = x.data() else {
            return Err(DataError::InvalidArgument(format!(
                "text_vectorization needs string values, got {}; numbers need no \
                 vectorizing (integer_lookup, category_encoding or discretization fit them)",
                x.dtype()
            )));
        };
        if self.split.is_some() && values.len() != 1 {
            return Err(DataError::InvalidArgument(format!(
                "with a split, each example is one string (shape [] or [1]), not shape {:?}",
                x.shape()
            )));
        }
        Ok(self.tokens(values))
    }

    /// The token lists of component `component`, one document per element of `dataset`.
    pub fn documents<'a>(
        &'a self,
        dataset: &'a Dataset,
        component: &'a str,
    ) -> impl Iterator<Item = Result<Vec<Vec<u8>>>> + 'a {
        dataset.iter().map(move |e| {
            let e = e?;
            self.example_tokens(e.require(component)?)
        })
    }
}

/// `keras.layers.TextVectorization`: [`Tokenizer`] then a string [`Lookup`] (mask `""`,
/// OOV `"[UNK]"`). In `int` mode the indices are cut or padded with 0 at the end to
/// `output_sequence_length`; the other modes give one vector per example.
#[derive(Debug, Clone, PartialEq)]
pub struct TextVectorization {
    /// How text becomes tokens.
    pub tokenizer: Tokenizer,
    /// `int` mode: the length of every output.
    pub output_sequence_length: Option<usize>,
    /// The vocabulary and `output_mode`.
    pub lookup: Lookup,
}

impl TextVectorization {
    /// Vectorizes one example (a string).
    ///
    /// # Errors
    /// As [`Tokenizer::example_tokens`].
    pub fn apply(&self, x: &Array) -> Result<Array> {
        let tokens = self.tokenizer.example_tokens(x)?;
        let out = self.lookup.encode_tokens(&tokens, &[tokens.len()])?;
        match (
            self.lookup.options().output_mode,
            self.output_sequence_length,
        ) {
            (OutputMode::Int, Some(len)) => {
                let mut ids = out.data().to_i64();
                ids.resize(len, 0);
                Array::new(vec![len], Buffer::I64(ids))
            }
            _ => Ok(out),
        }
    }
}
