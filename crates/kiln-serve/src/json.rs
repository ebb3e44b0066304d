//! TF Serving's predict request and response bodies (REST API v1,
//! https://www.tensorflow.org/tfx/serving/api_rest#predict_api).
//!
//! Request: `{"signature_name": "serving_default", "instances": [...]}` (row format: one entry
//! per example, each the nested list of one example, or `{"<input name>": nested list}`), or
//! `{"inputs": ...}` (columnar format: the whole batch as one nested list, or
//! `{"<input name>": nested list}`). Exactly one of `instances` and `inputs`; other keys are
//! ignored. Numbers are read as float32 (the dtype of every kiln model's input).
//!
//! The nested lists are read straight into a flat buffer with their shape, without building a
//! JSON tree, and checked as they are read: ragged lists, strings, `null`, nesting deeper than
//! [`MAX_DEPTH`] and numbers outside float32's range are refused. As in TF Serving, the bare
//! tokens `NaN`, `Infinity` and `-Infinity` (also `Inf`, `-Inf`, `-NaN`) are read as the
//! non-finite float32 values, and written for them in responses. A key given twice is refused. serde_json's recursion limit
//! (128 levels) bounds the parser's stack, so 10^6 nested `[` are an error, not a crash.
//!
//! Responses: `{"predictions": [...]}` for the row format, `{"outputs": [...]}` for the columnar
//! format, one nested list per example.

use std::fmt;

use serde::Deserializer;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::error::ApiError;

/// Deepest nesting of lists accepted in a tensor (kiln's inputs have at most 4 axes with the
/// batch).
pub const MAX_DEPTH: usize = 32;

/// Which request format a client used; the response uses the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `instances` -> `predictions`.
    Row,
    /// `inputs` -> `outputs`.
    Columnar,
}

/// A parsed predict request.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictRequest {
    /// `signature_name`, when given.
    pub signature_name: Option<String>,
    /// Row or columnar.
    pub format: Format,
    /// `[batch, ...]` of the nested lists, row-major.
    pub shape: Vec<usize>,
    /// The values.
    pub data: Vec<f32>,
}

/// Collects a nested list: values in order, the length seen at each depth, the depth of the
/// numbers.
#[derive(Default)]
struct Builder {
    data: Vec<f32>,
    dims: Vec<Option<usize>>,
    leaf_depth: Option<usize>,
    /// The body had `NaN` / `Infinity` tokens, rewritten to the [`NON_FINITE`] numbers.
    tokens: bool,
}

/// What the non-finite tokens are rewritten to before serde_json reads the body, and what they
/// stand for: numbers outside float32's range, which are refused otherwise, so no float32
/// input can be mistaken for one. (In a body that has tokens, a client's own `7.7e307` or
/// `±8.8e307` would be read as the token too: TF Serving reads such out-of-range numbers as
/// infinities anyway.)
const NON_FINITE: [(&str, f64, f32); 3] = [
    ("7.7e307", 7.7e307, f32::NAN),
    ("8.8e307", 8.8e307, f32::INFINITY),
    ("-8.8e307", -8.8e307, f32::NEG_INFINITY),
];

impl Builder {
    fn leaf<E: de::Error>(&mut self, depth: usize, v: f64) -> Result<(), E> {
        match self.leaf_depth {
            None => self.leaf_depth = Some(depth),
            Some(d) if d != depth => {
                return Err(E::custom(format!(
                    "ragged nested list: a number at depth {depth} where others are at depth {d}; \
                     every example must have the same shape"
                )));
            }
            _ => {}
        }
        if self.tokens
            && let Some((_, _, f)) = NON_FINITE.iter().find(|(_, n, _)| *n == v)
        {
            self.data.push(*f);
            return Ok(());
        }
        let f = v as f32;
        if !f.is_finite() {
            return Err(E::custom(format!(
                "the number {v} is outside float32's range (the model's input dtype is DT_FLOAT)"
            )));
        }
        self.data.push(f);
        Ok(())
    }

    fn list<E: de::Error>(&mut self, depth: usize, len: usize) -> Result<(), E> {
        if self.dims.len() <= depth {
            self.dims.resize(depth + 1, None);
        }
        match self.dims[depth] {
            None => self.dims[depth] = Some(len),
            Some(l) if l != len => {
                return Err(E::custom(format!(
                    "ragged nested list: lists of lengths {l} and {len} at depth {depth}; every \
                     example must have the same shape"
                )));
            }
            _ => {}
        }
        if let Some(d) = self.leaf_depth
            && depth >= d
        {
            return Err(E::custom(format!(
                "ragged nested list: a list at depth {depth} where numbers are at depth {d}"
            )));
        }
        Ok(())
    }

    /// The shape: the list lengths down to the numbers.
    fn shape(&self) -> Vec<usize> {
        let depth = self.leaf_depth.unwrap_or(self.dims.len());
        (0..depth)
            .map(|d| self.dims.get(d).copied().flatten().unwrap_or(0))
            .collect()
    }
}

/// Reads one nested list (or number) at `depth` into the builder. With `named`, an object
/// `{"<input>": nested list}` stands for the list (a row-format instance with named inputs).
struct Nested<'a> {
    b: &'a mut Builder,
    depth: usize,
    named: Option<&'a str>,
}

impl<'de> DeserializeSeed<'de> for Nested<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Nested<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number or a nested list of numbers")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.depth >= MAX_DEPTH {
            return Err(de::Error::custom(format!(
                "lists nested deeper than {MAX_DEPTH} levels"
            )));
        }
        let mut len = 0;
        while seq
            .next_element_seed(Nested {
                b: &mut *self.b,
                depth: self.depth + 1,
                named: None,
            })?
            .is_some()
        {
            len += 1;
        }
        self.b.list(self.depth, len)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.b.leaf(self.depth, v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.b.leaf(self.depth, v as f64)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.b.leaf(self.depth, v as f64)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        let shown: String = v.chars().take(20).collect();
        Err(E::custom(format!(
            "the string {shown:?} where a number was expected: the model's input is DT_FLOAT \
             (non-finite values are the bare tokens NaN, Infinity and -Infinity, not strings)"
        )))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(
            "a boolean where a number was expected: the model's input is DT_FLOAT",
        ))
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(
            "null where a number was expected: the model's input is DT_FLOAT",
        ))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some(input) = self.named else {
            return Err(de::Error::custom(
                "an object where a number or a list was expected (binary {\"b64\": ...} values are \
                 not supported: the model's input is DT_FLOAT)",
            ));
        };
        let mut found = false;
        while let Some(key) = map.next_key::<String>()? {
            if key != input {
                return Err(de::Error::custom(format!(
                    "unknown input {key:?}; the signature's input is {input:?}"
                )));
            }
            if found {
                return Err(de::Error::custom(format!("input {input:?} given twice")));
            }
            found = true;
            map.next_value_seed(Nested {
                b: &mut *self.b,
                depth: self.depth,
                named: None,
            })?;
        }
        if !found {
            return Err(de::Error::custom(format!(
                "an instance without the input {input:?}"
            )));
        }
        Ok(())
    }
}

/// `instances`: a list whose entries are examples (lists) or `{"<input>": list}` objects.
struct Instances<'a> {
    b: &'a mut Builder,
    input: &'a str,
}

impl<'de> DeserializeSeed<'de> for Instances<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Instances<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of instances")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut len = 0;
        while seq
            .next_element_seed(Nested {
                b: &mut *self.b,
                depth: 1,
                named: Some(self.input),
            })?
            .is_some()
        {
            len += 1;
        }
        self.b.list(0, len)
    }
}

/// `inputs`: the batch as one nested list, or `{"<input>": nested list}`.
struct Inputs<'a> {
    b: &'a mut Builder,
    input: &'a str,
}

impl<'de> DeserializeSeed<'de> for Inputs<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Inputs<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a nested list, or an object mapping the input name to one")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        Nested {
            b: self.b,
            depth: 0,
            named: None,
        }
        .visit_seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        Nested {
            b: self.b,
            depth: 0,
            named: Some(self.input),
        }
        .visit_map(map)
    }
}

/// The request object.
struct Request<'a> {
    input: &'a str,
    /// The body had non-finite tokens (see [`rewrite_non_finite`]).
    tokens: bool,
}

#[derive(Default)]
struct Raw {
    signature_name: Option<String>,
    format: Option<Format>,
    both: bool,
    b: Builder,
}

impl<'de> DeserializeSeed<'de> for Request<'_> {
    type Value = Raw;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Request<'_> {
    type Value = Raw;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object with \"instances\" or \"inputs\"")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        let mut raw = Raw::default();
        raw.b.tokens = self.tokens;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "signature_name" => {
                    if raw.signature_name.is_some() {
                        return Err(de::Error::custom("\"signature_name\" given twice"));
                    }
                    raw.signature_name = Some(map.next_value()?)
                }
                "instances" | "inputs" => {
                    let format = if key == "instances" {
                        Format::Row
                    } else {
                        Format::Columnar
                    };
                    match raw.format {
                        Some(f) if f == format => {
                            return Err(de::Error::custom(format!(
                                "the key \"{key}\" is given twice; send it once"
                            )));
                        }
                        Some(_) => {
                            // Reported as TF Serving does, after the parse.
                            raw.both = true;
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                        None => raw.format = Some(format),
                    }
                    if format == Format::Row {
                        map.next_value_seed(Instances {
                            b: &mut raw.b,
                            input: self.input,
                        })?;
                    } else {
                        map.next_value_seed(Inputs {
                            b: &mut raw.b,
                            input: self.input,
                        })?;
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(raw)
    }
}

/// Rewrites the bare tokens that TF Serving's JSON reader accepts for non-finite numbers
/// (RapidJSON with `kParseNanAndInfFlag`: `NaN`, `Inf`, `Infinity`, each with an optional `-`),
/// where they stand outside strings, into the [`NON_FINITE`] numbers serde_json can read.
/// `None` when the body has none (the common case: nothing is copied).
fn rewrite_non_finite(body: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let (mut i, mut copied, mut in_string) = (0, 0, false);
    while i < body.len() {
        let c = body[i];
        if in_string {
            match c {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
        } else if c == b'"' {
            in_string = true;
            i += 1;
        } else if let Some((len, number)) = non_finite_token(&body[i..]) {
            let o = out.get_or_insert_with(|| Vec::with_capacity(body.len() + 64));
            o.extend_from_slice(&body[copied..i]);
            o.extend_from_slice(number.as_bytes());
            i += len;
            copied = i;
        } else {
            i += 1;
        }
    }
    out.map(|mut o| {
        o.extend_from_slice(&body[copied..]);
        o
    })
}

/// The length of the non-finite token that `s` starts with, and the number it becomes.
fn non_finite_token(s: &[u8]) -> Option<(usize, &'static str)> {
    let (sign, rest) = match s.strip_prefix(b"-") {
        Some(rest) => (1, rest),
        None => (0, s),
    };
    let (len, which) = if rest.starts_with(b"NaN") {
        (3, 0)
    } else if rest.starts_with(b"Infinity") {
        (8, 1 + sign)
    } else if rest.starts_with(b"Inf") {
        (3, 1 + sign)
    } else {
        return None;
    };
    if rest
        .get(len)
        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
    {
        return None;
    }
    Some((sign + len, NON_FINITE[which].0))
}

/// Parses a predict body for a model whose single input is `input` with examples of
/// `example_shape`.
///
/// # Errors
/// 400 ([`ApiError::bad_request`]) for malformed JSON, both or neither of `instances` /
/// `inputs`, non-numbers, ragged lists, no examples, or examples of another shape (the
/// message gives the expected shape).
pub fn parse_predict(
    body: &[u8],
    input: &str,
    example_shape: &[usize],
) -> Result<PredictRequest, ApiError> {
    let rewritten = rewrite_non_finite(body);
    let mut de = serde_json::Deserializer::from_slice(rewritten.as_deref().unwrap_or(body));
    let raw = Request {
        input,
        tokens: rewritten.is_some(),
    }
    .deserialize(&mut de)
    .and_then(|raw| de.end().map(|_| raw))
    .map_err(|e| {
        let kind = if e.is_syntax() || e.is_eof() {
            "malformed JSON"
        } else {
            "invalid request"
        };
        ApiError::bad_request(format!("{kind}: {e}"))
    })?;
    if raw.both {
        return Err(ApiError::bad_request(
            "Only one of 'instances' and 'inputs' can be specified, not both",
        ));
    }
    let Some(format) = raw.format else {
        return Err(ApiError::bad_request("Missing 'inputs' or 'instances' key"));
    };
    let shape = raw.b.shape();
    let field = match format {
        Format::Row => "instances",
        Format::Columnar => "inputs",
    };
    let expected = || {
        let dims: Vec<String> = example_shape.iter().map(|d| d.to_string()).collect();
        format!("[-1, {}]", dims.join(", "))
    };
    if shape.first().copied().unwrap_or(0) == 0 {
        return Err(ApiError::bad_request(format!(
            "'{field}' holds no examples; the input {input:?} expects a tensor of shape {}",
            expected()
        )));
    }
    if shape[1..] != *example_shape {
        return Err(ApiError::bad_request(format!(
            "'{field}' has shape {shape:?} but the input {input:?} expects shape {} (a batch of \
             examples of shape {example_shape:?}; images as [height, width, channels])",
            expected()
        )));
    }
    Ok(PredictRequest {
        signature_name: raw.signature_name,
        format,
        shape,
        data: raw.b.data,
    })
}

/// The response body: `{"predictions": [row, ...]}` or `{"outputs": [row, ...]}`, a row of
/// `units` numbers per example (float32 written with the fewest digits that read back to the
/// same float32; NaN and the infinities as the bare tokens `NaN`, `Infinity` and `-Infinity`,
/// as TF Serving writes them).
pub fn predict_response(format: Format, outputs: &[f32], units: usize) -> Vec<u8> {
    let key = match format {
        Format::Row => "predictions",
        Format::Columnar => "outputs",
    };
    let mut out = Vec::with_capacity(outputs.len() * 12 + 32);
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":[");
    for (i, row) in outputs.chunks(units.max(1)).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'[');
        for (j, v) in row.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            write_f32(&mut out, *v);
        }
        out.push(b']');
    }
    out.extend_from_slice(b"]}");
    out
}

/// One float32: the shortest digits that read back to it, or a non-finite token.
fn write_f32(out: &mut Vec<u8>, v: f32) {
    if v.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"Infinity" } else { b"-Infinity" });
    } else {
        serde_json::to_writer(&mut *out, &v).expect("writing to a Vec cannot fail");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<PredictRequest, ApiError> {
        parse_predict(body.as_bytes(), "input_layer", &[2, 2])
    }

    #[test]
    fn row_and_columnar_formats_give_the_same_tensor() {
        let row = parse(r#"{"instances": [[[1, 2], [3, 4]], [[5, 6], [7, 8.5]]]}"#).unwrap();
        assert_eq!(row.format, Format::Row);
        assert_eq!(row.shape, [2, 2, 2]);
        assert_eq!(row.data, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.5]);
        let named = parse(
            r#"{"signature_name": "serving_default", "instances": [{"input_layer": [[1, 2], [3, 4]]},
                {"input_layer": [[5, 6], [7, 8.5]]}]}"#,
        )
        .unwrap();
        assert_eq!(named.data, row.data);
        assert_eq!(named.signature_name.as_deref(), Some("serving_default"));
        let col =
            parse(r#"{"inputs": [[[1, 2], [3, 4]], [[5, 6], [7, 8.5]]], "x": {"y": 1}}"#).unwrap();
        assert_eq!((col.format, &col.data), (Format::Columnar, &row.data));
        let col_named =
            parse(r#"{"inputs": {"input_layer": [[[1, 2], [3, 4]], [[5, 6], [7, 8.5]]]}}"#)
                .unwrap();
        assert_eq!(col_named.data, row.data);
    }

    #[test]
    fn bad_bodies_are_400_with_a_reason() {
        let cases = [
            (r#"{"instances": [[[1, 2], [3, 4]]"#, "malformed JSON"),
            (r#"{"instances": [[[1, 2], [3, NaNa]]]}"#, "malformed JSON"),
            (r#"{"instances": [[[1, 2], [3, "NaN"]]]}"#, "not strings"),
            (r#"{"instances": [[[1, 2], [3, 7.7e307]]]}"#, "float32"),
            (
                r#"{"instances": [[[1, 2], [3, 4]]], "instances": [[[1, 2], [3, 4]]]}"#,
                "the key \"instances\" is given twice",
            ),
            (
                r#"{"inputs": [[[1, 2], [3, 4]]], "inputs": [[[1, 2], [3, 4]]]}"#,
                "the key \"inputs\" is given twice",
            ),
            (r#"{"instances": [[[1, 2], [3, "4"]]]}"#, "DT_FLOAT"),
            (r#"{"instances": [[[1, 2], [3]]]}"#, "ragged"),
            (r#"{"instances": [[[1, 2], 3]]}"#, "ragged"),
            (r#"{"instances": [[[1, 2], [3, 1e40]]]}"#, "float32"),
            (
                r#"{"instances": [[1, 2, 3, 4]]}"#,
                "expects shape [-1, 2, 2]",
            ),
            (r#"{"instances": []}"#, "no examples"),
            (
                r#"{"instances": [[[1, 2], [3, 4]]], "inputs": [1]}"#,
                "Only one of",
            ),
            (
                r#"{"signature_name": "serving_default"}"#,
                "Missing 'inputs' or 'instances'",
            ),
            (r#"[1, 2]"#, "invalid request"),
            (
                r#"{"instances": [{"other": [[1, 2], [3, 4]]}]}"#,
                "unknown input",
            ),
            (r#"{"instances": [[[1, 2], [3, null]]]}"#, "null"),
            (
                r#"{"instances": [[[1, 2], [3, 4]]]} trailing"#,
                "malformed JSON",
            ),
        ];
        for (body, want) in cases {
            let e = parse(body).unwrap_err();
            assert_eq!(e.status, 400, "{body}");
            assert!(e.message.contains(want), "{body}: {}", e.message);
        }
    }

    #[test]
    fn non_finite_tokens_are_read_outside_strings_only() {
        // Without tokens in the body, the stand-in numbers are a user's, out of range.
        let r = parse(r#"{"instances": [[[1, 2], [8.8e307, 0]]]}"#);
        assert!(r.unwrap_err().message.contains("float32"));
        let r = parse(
            r#"{"x": "NaN \" Infinity", "instances": [[[NaN, -NaN], [Infinity, -Infinity]],
                [[Inf, -Inf], [1, 0]]]}"#,
        )
        .unwrap();
        assert!(r.data[0].is_nan() && r.data[1].is_nan());
        assert_eq!(
            r.data[2..],
            [
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::INFINITY,
                f32::NEG_INFINITY,
                1.0,
                0.0
            ]
        );
        assert_eq!(rewrite_non_finite(br#"{"a": "NaN"}"#), None);
        assert_eq!(
            rewrite_non_finite(br#"[NaN,Infinity]"#).unwrap(),
            b"[7.7e307,8.8e307]"
        );
    }

    /// Mutations of valid row, columnar, named and b64 bodies (and ones with non-finite
    /// tokens, escapes and ignored keys): every case is parsed or refused with a 400, never a
    /// panic or a hang; what is accepted has as many values as its shape says.
    #[test]
    fn fuzz_rest_body() {
        let seeds: Vec<Vec<u8>> = [
            r#"{"instances": [[[1, 2], [3, 4]], [[5, 6], [7, 8.5]]]}"#,
            r#"{"signature_name": "serving_default", "instances": [{"input_layer": [[1, 2], [3, 4]]}]}"#,
            r#"{"inputs": [[[1, 2], [3, 4]], [[5, 6], [7, 8.5]]], "x": {"y": [1, "z\"]"]}}"#,
            r#"{"inputs": {"input_layer": [[[1e-3, -2E+2], [3, 4]]]}}"#,
            r#"{"instances": [{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}]}"#,
            r#"{"inputs": {"input_layer": {"b64": "AAAA"}}}"#,
            r#"{"instances": [[[NaN, -Infinity], [Infinity, -Inf]]], "x": "NaN"}"#,
            "{\"instances\":\n\t[[[0,0],[0,0]]]\r}",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let report = kiln_fuzz::fuzz(
            "rest_body",
            seeds,
            kiln_fuzz::Limits::new(20_000),
            |bytes| {
                let r = parse_predict(bytes, "input_layer", &[2, 2]);
                match &r {
                    Ok(p) => assert_eq!(p.data.len(), p.shape.iter().product::<usize>()),
                    Err(e) => assert_eq!(e.status, 400, "{}", e.message),
                }
                r
            },
        );
        assert!(report.accepted > 0 && report.refused > 0, "{report:?}");
    }

    #[test]
    fn a_million_nested_lists_are_an_error_not_a_stack_overflow() {
        let body = format!(
            "{{\"instances\": {}{}}}",
            "[".repeat(1_000_000),
            "]".repeat(1_000_000)
        );
        let e = parse(&body).unwrap_err();
        assert_eq!(e.status, 400);
        // Also inside an ignored key (serde_json skips it without recursing).
        let body = format!(
            "{{\"x\": {}{}}}",
            "[".repeat(1_000_000),
            "]".repeat(1_000_000)
        );
        assert!(parse(&body).unwrap_err().message.contains("Missing"));
    }

    #[test]
    fn responses_round_trip_float32_exactly() {
        let outputs = [0.1f32, 1.0 / 3.0, -2.5e-8, f32::NAN];
        let body = predict_response(Format::Row, &outputs, 2);
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "{\"predictions\":[[0.1,0.33333334],[-2.5e-8,NaN]]}"
        );
        let body = predict_response(Format::Row, &[f32::INFINITY, f32::NEG_INFINITY], 2);
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "{\"predictions\":[[Infinity,-Infinity]]}"
        );
        let body = predict_response(Format::Columnar, &outputs[..2], 2);
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "{\"outputs\":[[0.1,0.33333334]]}"
        );
    }
}
