//! The `map` ops named after Keras' lookup, text and categorical preprocessing layers:
//! `text_vectorization`, `string_lookup`, `integer_lookup`, `category_encoding`, `hashing`,
//! `discretization`. They run on the host, in the pipeline (Burn tensors hold numbers); the
//! vocabularies and bin boundaries that `adapt` computes are written into the resolved config
//! the run directory keeps, so `evaluate`, `predict` and `serve` apply the same ones.

use std::path::Path;

use kiln_data::preprocess::{
    Discretization, HashValue, Hashing, Lookup, LookupOptions, OutputMode, SplitMode, Standardize,
    TextVectorization, TokenKind, Tokenizer,
};
use kiln_data::{Dataset, Preprocess};
use serde::{Deserialize, Serialize};

use super::pipeline::OneOrMany;
use crate::error::{KilnError, Result};

fn one() -> usize {
    1
}
fn int_mode() -> String {
    "int".into()
}
fn default_standardize() -> String {
    "lower_and_strip_punctuation".into()
}
fn default_split() -> String {
    "whitespace".into()
}

/// `string_lookup` / `integer_lookup`: Keras' `StringLookup` / `IntegerLookup` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupConfig {
    /// Component (default: the pipeline's `x`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// The tokens (a list), or a text file with one token per line (relative to
    /// `data.data_dir`; read once by `adapt`, which records the list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocabulary: Option<toml::Value>,
    /// `tf_idf`: one weight per vocabulary token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idf_weights: Option<Vec<f64>>,
    /// Build the vocabulary from the training data (`layer.adapt(ds)`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adapt: bool,
    /// Largest vocabulary, special indices included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    /// Indices for out-of-vocabulary values (default 1).
    #[serde(default = "one")]
    pub num_oov_indices: usize,
    /// The value mapped to 0 in `int` mode (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask_token: Option<toml::Value>,
    /// What `invert` gives for OOV indices (default `"[UNK]"`, or `-1` for integers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oov_token: Option<toml::Value>,
    /// `"int"` (default), `"one_hot"`, `"multi_hot"`, `"count"` or `"tf_idf"`.
    #[serde(default = "int_mode")]
    pub output_mode: String,
    /// Indices back to tokens.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub invert: bool,
    /// Non-`int` outputs `max_tokens` wide.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pad_to_max_tokens: bool,
}

/// `text_vectorization`: Keras' `TextVectorization` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextVectorizationConfig {
    /// Component (default: the pipeline's `x`): one string per example.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// Largest vocabulary, padding and `[UNK]` included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    /// `"lower_and_strip_punctuation"` (default), `"lower"`, `"strip_punctuation"`, `"none"`.
    #[serde(default = "default_standardize")]
    pub standardize: String,
    /// `"whitespace"` (default), `"character"`, `"none"`.
    #[serde(default = "default_split")]
    pub split: String,
    /// `n` for all n-grams up to `n`, or a list of widths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ngrams: Option<OneOrMany<usize>>,
    /// `"int"` (default), `"multi_hot"`, `"count"`, `"tf_idf"`.
    #[serde(default = "int_mode")]
    pub output_mode: String,
    /// `int` mode: cut or pad (with 0, at the end) to this length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_sequence_length: Option<usize>,
    /// Non-`int` outputs `max_tokens` wide.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pad_to_max_tokens: bool,
    /// The tokens, or a file with one per line (see [`LookupConfig::vocabulary`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocabulary: Option<toml::Value>,
    /// `tf_idf`: one weight per vocabulary token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idf_weights: Option<Vec<f64>>,
    /// Build the vocabulary from the training data.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adapt: bool,
}

/// A config error at `key.field`.
fn bad<T>(key: &str, field: &str, message: impl Into<String>) -> Result<T> {
    Err(KilnError::config(format!("{key}.{field}"), message.into()))
}

/// `output_mode`, one of `allowed`.
pub(crate) fn output_mode(key: &str, name: &str, allowed: &[OutputMode]) -> Result<OutputMode> {
    let names: Vec<String> = allowed.iter().map(|m| format!("\"{m}\"")).collect();
    match name.parse::<OutputMode>() {
        Ok(m) if allowed.contains(&m) => Ok(m),
        _ => bad(
            key,
            "output_mode",
            format!(
                "unknown output_mode \"{name}\"; allowed: {}",
                names.join(", ")
            ),
        ),
    }
}

const ALL_MODES: [OutputMode; 5] = [
    OutputMode::Int,
    OutputMode::OneHot,
    OutputMode::MultiHot,
    OutputMode::Count,
    OutputMode::TfIdf,
];

/// The `category_encoding` op.
pub(crate) fn category_encoding(
    key: &str,
    component: String,
    num_tokens: usize,
    mode: &str,
) -> Result<Preprocess> {
    if num_tokens == 0 {
        return bad(
            key,
            "num_tokens",
            "must be at least 1 (the number of classes)",
        );
    }
    let output_mode = output_mode(key, mode, &ALL_MODES[1..4])?;
    Ok(Preprocess::CategoryEncoding {
        component,
        num_tokens,
        output_mode,
    })
}

/// The `hashing` op.
pub(crate) fn hashing(
    key: &str,
    component: String,
    num_bins: usize,
    mask_value: Option<&toml::Value>,
    salt: Option<&OneOrMany<u64>>,
    mode: &str,
) -> Result<Preprocess> {
    if num_bins == 0 {
        return bad(key, "num_bins", "must be at least 1");
    }
    let mask_value = match mask_value {
        None => None,
        Some(toml::Value::String(s)) => Some(HashValue::String(s.clone())),
        Some(toml::Value::Integer(i)) => Some(HashValue::Int(*i)),
        Some(other) => {
            return bad(
                key,
                "mask_value",
                format!("{other} is not a string or integer"),
            );
        }
    };
    let salt = match salt.map(OneOrMany::to_vec).as_deref() {
        None => None,
        Some([s]) => Some([*s, *s]),
        Some([a, b]) => Some([*a, *b]),
        Some(_) => return bad(key, "salt", "give one integer or a list of two"),
    };
    Ok(Preprocess::Hashing {
        component,
        hashing: Hashing {
            num_bins,
            mask_value,
            salt,
            output_mode: output_mode(key, mode, &ALL_MODES[..4])?,
        },
    })
}

/// Checks `discretization`'s arguments.
pub(crate) fn check_discretization(
    key: &str,
    bin_boundaries: Option<&[f64]>,
    num_bins: Option<usize>,
    epsilon: f64,
    adapt: bool,
    mode: &str,
) -> Result<()> {
    output_mode(key, mode, &ALL_MODES[..4])?;
    match (bin_boundaries, num_bins, adapt) {
        (Some(b), None, false) => {
            if b.iter().any(|v| !v.is_finite()) || b.windows(2).any(|w| w[0] >= w[1]) {
                return bad(
                    key,
                    "bin_boundaries",
                    "give finite numbers in increasing order",
                );
            }
        }
        (None, Some(n), true) => {
            if n < 1 {
                return bad(key, "num_bins", "must be at least 1");
            }
            if !(epsilon > 0.0 && epsilon <= 1.0) {
                return bad(key, "epsilon", "must be in (0, 1]");
            }
        }
        _ => {
            return bad(
                key,
                "bin_boundaries",
                "give bin_boundaries, or num_bins with adapt = true to compute them from the \
                 training data (not both)",
            );
        }
    }
    Ok(())
}

/// The `discretization` op with its boundaries.
pub(crate) fn discretization(
    key: &str,
    component: String,
    bin_boundaries: Option<&[f64]>,
    mode: &str,
) -> Result<Preprocess> {
    let Some(b) = bin_boundaries else {
        return bad(
            key,
            "adapt",
            "discretization has no bin_boundaries yet: run adapt first",
        );
    };
    Ok(Preprocess::Discretization {
        component,
        discretization: Discretization {
            bin_boundaries: b.to_vec(),
            output_mode: output_mode(key, mode, &ALL_MODES[..4])?,
        },
    })
}

/// A token given in the config: a string, or an integer for `integer_lookup`.
fn token(key: &str, field: &str, kind: TokenKind, v: &toml::Value) -> Result<Vec<u8>> {
    match (kind, v) {
        (TokenKind::String, toml::Value::String(s)) => Ok(s.as_bytes().to_vec()),
        (TokenKind::Integer, toml::Value::Integer(i)) => Ok(i.to_string().into_bytes()),
        (TokenKind::String, _) => bad(key, field, format!("{v} is not a string")),
        (TokenKind::Integer, _) => bad(key, field, format!("{v} is not an integer")),
    }
}

/// A recorded token as the config writes it.
fn token_value(kind: TokenKind, t: &[u8]) -> toml::Value {
    let s = String::from_utf8_lossy(t).into_owned();
    match kind {
        TokenKind::String => toml::Value::String(s),
        TokenKind::Integer => toml::Value::Integer(s.parse().unwrap_or(0)),
    }
}

/// The vocabulary list, `None` while it is a file path (or absent).
fn vocabulary_list(key: &str, kind: TokenKind, v: &toml::Value) -> Result<Option<Vec<Vec<u8>>>> {
    match v {
        toml::Value::String(_) => Ok(None),
        toml::Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, t)| token(key, &format!("vocabulary[{i}]"), kind, t))
            .collect::<Result<Vec<_>>>()
            .map(Some),
        other => bad(
            key,
            "vocabulary",
            format!("{other} is neither a list of tokens nor a file path"),
        ),
    }
}

/// Reads a vocabulary file (one token per line, trailing empty lines dropped, as Keras'
/// `load_assets`) into the list the config records.
///
/// # Errors
/// [`KilnError::Config`] at `key.vocabulary` when the file does not exist or is unreadable.
pub(crate) fn read_vocabulary(key: &str, path: &Path, kind: TokenKind) -> Result<toml::Value> {
    let text = std::fs::read(path).map_err(|e| {
        KilnError::config(
            format!("{key}.vocabulary"),
            format!(
                "cannot read the vocabulary file {}: {e} (relative paths are inside \
                 data.data_dir)",
                path.display()
            ),
        )
    })?;
    let mut lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let v = match kind {
            TokenKind::String => toml::Value::String(String::from_utf8_lossy(line).into_owned()),
            TokenKind::Integer => match std::str::from_utf8(line)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                Some(i) => toml::Value::Integer(i),
                None => {
                    return bad(
                        key,
                        "vocabulary",
                        format!("line {} of {} is not an integer", i + 1, path.display()),
                    );
                }
            },
        };
        out.push(v);
    }
    Ok(toml::Value::Array(out))
}

impl LookupConfig {
    /// The lookup's options; `kind` from the op name.
    pub(crate) fn options(&self, key: &str, kind: TokenKind) -> Result<LookupOptions> {
        let output_mode = output_mode(key, &self.output_mode, &ALL_MODES)?;
        if self.max_tokens.is_some_and(|m| m <= 1) {
            return bad(key, "max_tokens", "must be greater than 1");
        }
        let oov_token = match (&self.oov_token, kind) {
            (Some(v), _) => token(key, "oov_token", kind, v)?,
            (None, TokenKind::String) => b"[UNK]".to_vec(),
            (None, TokenKind::Integer) => b"-1".to_vec(),
        };
        Ok(LookupOptions {
            kind,
            max_tokens: self.max_tokens,
            num_oov_indices: self.num_oov_indices,
            mask_token: match &self.mask_token {
                Some(v) => Some(token(key, "mask_token", kind, v)?),
                None => None,
            },
            oov_token,
            output_mode,
            invert: self.invert,
            pad_to_max_tokens: self.pad_to_max_tokens,
        })
    }

    /// Checks the arguments.
    pub(crate) fn validate(&self, key: &str, kind: TokenKind) -> Result<()> {
        let options = self.options(key, kind)?;
        check_vocabulary(key, self.vocabulary.as_ref(), self.adapt, kind)?;
        if self.invert && options.output_mode != OutputMode::Int {
            return bad(key, "invert", "invert = true needs output_mode = \"int\"");
        }
        if self.pad_to_max_tokens && self.max_tokens.is_none() {
            return bad(key, "pad_to_max_tokens", "needs max_tokens");
        }
        Ok(())
    }

    /// The lookup op (the vocabulary must be a list by now).
    pub(crate) fn to_preprocess(
        &self,
        key: &str,
        component: String,
        kind: TokenKind,
    ) -> Result<Preprocess> {
        let options = self.options(key, kind)?;
        let lookup = lookup(
            key,
            options,
            self.vocabulary.as_ref(),
            self.idf_weights.clone(),
        )?;
        Ok(Preprocess::Lookup { component, lookup })
    }

    /// Adapts over `component` of `ds`: the config with the vocabulary recorded.
    pub(crate) fn adapted(
        &self,
        key: &str,
        kind: TokenKind,
        ds: &Dataset,
        component: &str,
    ) -> Result<LookupConfig> {
        let options = self.options(key, kind)?;
        let documents = ds.iter().map(|e| {
            let e = e?;
            let x = e.require(component)?;
            Ok(match (kind, x.data().as_strings()) {
                (TokenKind::String, Some(v)) => v.to_vec(),
                (TokenKind::String, None) => {
                    return Err(kiln_data::DataError::InvalidArgument(format!(
                        "string_lookup needs string values, got {}; use integer_lookup",
                        x.dtype()
                    )));
                }
                (TokenKind::Integer, Some(_)) => {
                    return Err(kiln_data::DataError::InvalidArgument(
                        "integer_lookup needs integers, got strings; use string_lookup".into(),
                    ));
                }
                (TokenKind::Integer, None) => x
                    .data()
                    .try_to_i64()?
                    .iter()
                    .map(|i| i.to_string().into_bytes())
                    .collect(),
            })
        });
        let (vocab, idf) = options.adapt(documents).map_err(|e| adapt_error(key, e))?;
        Ok(LookupConfig {
            vocabulary: Some(toml::Value::Array(
                vocab.iter().map(|t| token_value(kind, t)).collect(),
            )),
            idf_weights: idf,
            adapt: false,
            ..self.clone()
        })
    }
}

/// `key.adapt: <the data error>`.
pub(crate) fn adapt_error(key: &str, e: kiln_data::DataError) -> KilnError {
    KilnError::config(
        format!("{key}.adapt"),
        e.to_string().replace("invalid argument: ", ""),
    )
}

/// `vocabulary` and `adapt`: exactly one.
fn check_vocabulary(
    key: &str,
    v: Option<&toml::Value>,
    adapt: bool,
    kind: TokenKind,
) -> Result<()> {
    match (v, adapt) {
        (Some(_), true) => bad(
            key,
            "adapt",
            "give either a vocabulary or adapt = true, not both",
        ),
        (None, false) => bad(
            key,
            "vocabulary",
            "give a vocabulary (a list, or a file with one token per line), or adapt = true to \
             build it from the training data",
        ),
        (Some(v), false) => vocabulary_list(key, kind, v).map(|_| ()),
        (None, true) => Ok(()),
    }
}

/// A [`Lookup`] from a recorded vocabulary list.
fn lookup(
    key: &str,
    options: LookupOptions,
    v: Option<&toml::Value>,
    idf: Option<Vec<f64>>,
) -> Result<Lookup> {
    let Some(tokens) = v
        .map(|v| vocabulary_list(key, options.kind, v))
        .transpose()?
        .flatten()
    else {
        return bad(
            key,
            "vocabulary",
            "the vocabulary is not built yet: adapt reads vocabulary files and adapts (kiln \
             train does it first)",
        );
    };
    Lookup::new(options, tokens, idf).map_err(|e| {
        KilnError::config(
            format!("{key}.vocabulary"),
            e.to_string().replace("invalid argument: ", ""),
        )
    })
}

impl TextVectorizationConfig {
    /// Standardize, split and n-grams.
    pub(crate) fn tokenizer(&self, key: &str) -> Result<Tokenizer> {
        let standardize = match self.standardize.as_str() {
            "none" => None,
            s => Some(s.parse::<Standardize>().map_err(|e| {
                KilnError::config(
                    format!("{key}.standardize"),
                    e.to_string().replace("invalid argument: ", ""),
                )
            })?),
        };
        let split = match self.split.as_str() {
            "none" => None,
            s => Some(s.parse::<SplitMode>().map_err(|e| {
                KilnError::config(
                    format!("{key}.split"),
                    e.to_string().replace("invalid argument: ", ""),
                )
            })?),
        };
        let ngrams = match &self.ngrams {
            None => Vec::new(),
            Some(OneOrMany::One(0)) => {
                return bad(
                    key,
                    "ngrams",
                    "0 makes no tokens; give 1 or more (n-grams up to that width), a list of \
                     widths, or leave it out (Keras' None: single tokens)",
                );
            }
            Some(OneOrMany::One(n)) => (1..=*n).collect(),
            Some(OneOrMany::Many(v)) if v.is_empty() => {
                return bad(
                    key,
                    "ngrams",
                    "an empty list makes no tokens; list the widths (e.g. [1, 2]) or leave it \
                     out (Keras' None: single tokens)",
                );
            }
            Some(OneOrMany::Many(v)) => v.clone(),
        };
        if ngrams.contains(&0) {
            return bad(key, "ngrams", "n-gram widths are at least 1");
        }
        Ok(Tokenizer {
            standardize,
            split,
            ngrams,
        })
    }

    /// The inner string lookup's options (mask `""`, OOV `"[UNK]"`, as Keras).
    pub(crate) fn options(&self, key: &str) -> Result<LookupOptions> {
        let output_mode = output_mode(key, &self.output_mode, &ALL_MODES)?;
        if self.max_tokens.is_some_and(|m| m <= 1) {
            return bad(key, "max_tokens", "must be greater than 1");
        }
        Ok(LookupOptions {
            kind: TokenKind::String,
            max_tokens: self.max_tokens,
            num_oov_indices: 1,
            mask_token: Some(Vec::new()),
            oov_token: b"[UNK]".to_vec(),
            output_mode,
            invert: false,
            pad_to_max_tokens: self.pad_to_max_tokens,
        })
    }

    /// Checks the arguments.
    pub(crate) fn validate(&self, key: &str) -> Result<()> {
        self.tokenizer(key)?;
        let options = self.options(key)?;
        check_vocabulary(key, self.vocabulary.as_ref(), self.adapt, TokenKind::String)?;
        if self.output_sequence_length.is_some() && options.output_mode != OutputMode::Int {
            return bad(
                key,
                "output_sequence_length",
                "applies to output_mode = \"int\" only",
            );
        }
        if self.output_sequence_length == Some(0) {
            return bad(key, "output_sequence_length", "must be at least 1");
        }
        if self.pad_to_max_tokens && self.max_tokens.is_none() {
            return bad(key, "pad_to_max_tokens", "needs max_tokens");
        }
        Ok(())
    }

    /// The op (the vocabulary must be a list by now).
    pub(crate) fn to_preprocess(&self, key: &str, component: String) -> Result<Preprocess> {
        let lookup = lookup(
            key,
            self.options(key)?,
            self.vocabulary.as_ref(),
            self.idf_weights.clone(),
        )?;
        Ok(Preprocess::TextVectorization {
            component,
            text: TextVectorization {
                tokenizer: self.tokenizer(key)?,
                output_sequence_length: self.output_sequence_length,
                lookup,
            },
        })
    }

    /// Adapts over `component` of `ds`: the config with the vocabulary recorded.
    pub(crate) fn adapted(
        &self,
        key: &str,
        ds: &Dataset,
        component: &str,
    ) -> Result<TextVectorizationConfig> {
        let tokenizer = self.tokenizer(key)?;
        let (vocab, idf) = self
            .options(key)?
            .adapt(tokenizer.documents(ds, component))
            .map_err(|e| adapt_error(key, e))?;
        Ok(TextVectorizationConfig {
            vocabulary: Some(toml::Value::Array(
                vocab
                    .iter()
                    .map(|t| token_value(TokenKind::String, t))
                    .collect(),
            )),
            idf_weights: idf,
            adapt: false,
            ..self.clone()
        })
    }
}
