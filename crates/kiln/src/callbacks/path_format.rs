//! The subset of Python's `str.format` that Keras' `ModelCheckpoint(filepath=...)` templates
//! use (`"ckpt-{epoch:02d}-{val_loss:.2f}.safetensors"`), with Python's exact output
//! (format-spec mini-language: <https://docs.python.org/3/library/string.html#formatspec>).
//!
//! Supported: literal text with `{{` / `}}` escapes, and fields `{name}` / `{name:spec}` with
//! `spec = [0][width][.precision][type]`, `type` one of `d` (integers), `f`, `e` (numbers), or
//! none. Values are Python `int`s (`epoch`, `batch`) or `float`s (logs). Anything else
//! (fill and align characters, signs, grouping, `!r` conversions, attribute access) is refused
//! with a message, so a template never formats differently from Keras without saying so.

use super::python_float_repr;

/// A value for a `{name}` field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FormatValue {
    /// A Python `int` (`epoch`, `batch`).
    Int(i64),
    /// A Python `float` (a logs value).
    Float(f64),
}

/// The presentation type of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// No type: `str(value)`.
    Plain,
    /// `d`: a decimal integer.
    Decimal,
    /// `f`: fixed point, 6 digits after the point by default.
    Fixed,
    /// `e`: scientific, 6 digits after the point by default, exponent with a sign and at
    /// least two digits (`1.235e+04`).
    Exponent,
}

/// A parsed `[0][width][.precision][type]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spec {
    zero: bool,
    width: usize,
    precision: Option<usize>,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field {
        name: String,
        spec: Spec,
        /// The field as written (`{val_loss:.2f}`), for messages.
        source: String,
    },
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    template: String,
    pieces: Vec<Piece>,
}

const SUPPORTED: &str = "kiln supports Python's `{name}` and `{name:[0][width][.precision]type}` \
                         with type d, f or e (e.g. {epoch:02d}, {val_loss:.2f})";

impl PathTemplate {
    /// Parses `template`.
    ///
    /// # Errors
    /// A message naming the field and what is supported, for: a lone `{` or `}` (Python:
    /// "Single '}' encountered in format string"), an empty or positional field (`{}`, `{0}`),
    /// attribute or index access, a `!` conversion, or a spec outside the subset.
    pub fn parse(template: &str) -> std::result::Result<PathTemplate, String> {
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut chars = template.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    text.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    text.push('}');
                }
                '}' => {
                    return Err("single '}' in the template; write '}}' for a literal '}'".into());
                }
                '{' => {
                    let mut field = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some('{') => {
                                return Err(format!(
                                    "nested '{{' in field {{{field}...; {SUPPORTED}"
                                ));
                            }
                            Some(c) => field.push(c),
                            None => {
                                return Err(format!(
                                    "field {{{field} is not closed with '}}'; write '{{{{' for a \
                                     literal '{{'"
                                ));
                            }
                        }
                    }
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                    }
                    pieces.push(parse_field(&field)?);
                }
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Ok(PathTemplate {
            template: template.to_string(),
            pieces,
        })
    }

    /// The template as given.
    pub fn as_str(&self) -> &str {
        &self.template
    }

    /// The names of the fields, in order (with repeats).
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Field { name, .. } => Some(name.as_str()),
            Piece::Text(_) => None,
        })
    }

    /// The template with every field replaced by its value, as Python's
    /// `template.format(**values)` writes it.
    ///
    /// # Errors
    /// A message naming the field when `value` has nothing for its name, or when its type does
    /// not take the value (`d` with a float: Python's "Unknown format code 'd' for object of
    /// type 'float'").
    pub fn format(
        &self,
        value: impl Fn(&str) -> Option<FormatValue>,
    ) -> std::result::Result<String, String> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Field { name, spec, source } => {
                    let v = value(name)
                        .ok_or_else(|| format!("no value for {source}: \"{name}\" is unknown"))?;
                    out.push_str(&format_value(v, spec).map_err(|m| format!("{source}: {m}"))?);
                }
            }
        }
        Ok(out)
    }
}

/// The widest field a file name can hold: most file systems take 255 bytes per component.
const MAX_FIELD_CHARS: usize = 255;

/// Parses the inside of `{...}`.
fn parse_field(field: &str) -> std::result::Result<Piece, String> {
    let source = format!("{{{field}}}");
    let (name, spec) = field.split_once(':').unwrap_or((field, ""));
    if name.contains('!') {
        return Err(format!(
            "{source}: '!' conversions are not supported; {SUPPORTED}"
        ));
    }
    let is_name = name
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    if !is_name {
        return Err(format!(
            "{source}: a field must be a name (epoch, batch or a logs key such as val_loss); \
             {SUPPORTED}"
        ));
    }
    let spec = parse_spec(spec).ok_or_else(|| format!("{source}: {SUPPORTED}"))?;
    if spec.width > MAX_FIELD_CHARS || spec.precision.is_some_and(|p| p > MAX_FIELD_CHARS) {
        return Err(format!(
            "{source}: a width or precision above {MAX_FIELD_CHARS} makes a file name longer \
             than file systems take (255 bytes); use a smaller one, e.g. {{{name}:.4f}}"
        ));
    }
    Ok(Piece::Field {
        name: name.to_string(),
        spec,
        source,
    })
}

/// Parses `[0][width][.precision][type]`; `None` outside the subset.
fn parse_spec(spec: &str) -> Option<Spec> {
    let (kind, rest) = match spec.chars().last() {
        Some('d') => (Kind::Decimal, &spec[..spec.len() - 1]),
        Some('f') => (Kind::Fixed, &spec[..spec.len() - 1]),
        Some('e') => (Kind::Exponent, &spec[..spec.len() - 1]),
        _ => (Kind::Plain, spec),
    };
    let (width, precision) = match rest.split_once('.') {
        Some((w, p)) if !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()) => {
            (w, Some(p.parse().ok()?))
        }
        Some(_) => return None,
        None => (rest, None),
    };
    if !width.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    // Python: "Precision not allowed in integer format specifier"; a precision without a type
    // is Python's general format, which kiln does not implement.
    if precision.is_some() && matches!(kind, Kind::Decimal | Kind::Plain) {
        return None;
    }
    let zero = width.len() > 1 && width.starts_with('0');
    Some(Spec {
        zero,
        width: if width.is_empty() {
            0
        } else {
            width.parse().ok()?
        },
        precision,
        kind,
    })
}

/// `format(value, spec)` in Python.
fn format_value(value: FormatValue, spec: &Spec) -> std::result::Result<String, String> {
    let body = match (value, spec.kind) {
        (FormatValue::Int(i), Kind::Plain | Kind::Decimal) => i.to_string(),
        (FormatValue::Float(_), Kind::Decimal) => {
            return Err(
                "Unknown format code 'd' for object of type 'float' (Python's \
                        message): logs values are floats; use .Nf"
                    .into(),
            );
        }
        (FormatValue::Float(x), Kind::Plain) => python_float_repr(x),
        (v, kind) => {
            let x = match v {
                FormatValue::Int(i) => i as f64,
                FormatValue::Float(x) => x,
            };
            let precision = spec.precision.unwrap_or(6);
            if !x.is_finite() {
                python_float_repr(x)
            } else if kind == Kind::Fixed {
                // Rust and Python both round the exact binary value, ties to even.
                format!("{x:.precision$}")
            } else {
                let s = format!("{x:.precision$e}");
                let (mantissa, exp) = s.split_once('e').expect("`{:e}` has an exponent");
                let exp: i32 = exp.parse().expect("integer exponent");
                let sign = if exp < 0 { '-' } else { '+' };
                format!("{mantissa}e{sign}{:02}", exp.abs())
            }
        }
    };
    let len = body.chars().count();
    if len >= spec.width {
        return Ok(body);
    }
    let pad = spec.width - len;
    Ok(if spec.zero {
        // Python pads with zeros after the sign ("-001.500", "000nan").
        let (sign, digits) = match body.strip_prefix('-') {
            Some(rest) => ("-", rest),
            None => ("", body.as_str()),
        };
        format!("{sign}{}{digits}", "0".repeat(pad))
    } else {
        // Numbers align right.
        format!("{}{body}", " ".repeat(pad))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(template: &str, value: FormatValue) -> String {
        let t = PathTemplate::parse(template).unwrap();
        t.format(|_| Some(value)).unwrap()
    }

    #[test]
    fn matches_python_str_format() {
        use FormatValue::{Float, Int};
        // Python 3's `template.format(name=value)`, printed by
        // tests/reference/keras_model_checkpoint_reference.py ("format:" lines).
        let cases = [
            ("{epoch}", Int(3), "3"),
            ("{epoch:02d}", Int(3), "03"),
            ("{epoch:03d}", Int(12), "012"),
            ("{epoch:02d}", Int(123), "123"),
            ("{epoch:4d}", Int(7), "   7"),
            ("{epoch:.2f}", Int(3), "3.00"),
            ("{loss}", Float(0.1), "0.1"),
            ("{loss}", Float(1e-05), "1e-05"),
            ("{loss}", Float(2.0), "2.0"),
            ("{loss:.2f}", Float(0.125), "0.12"),
            ("{loss:.2f}", Float(0.375), "0.38"),
            ("{loss:.1f}", Float(0.25), "0.2"),
            ("{loss:.0f}", Float(0.5), "0"),
            ("{loss:.0f}", Float(1.5), "2"),
            ("{loss:.4f}", Float(1.00005), "1.0001"),
            ("{loss:08.3f}", Float(-1.5), "-001.500"),
            ("{loss:.2f}", Float(f64::NAN), "nan"),
            ("{loss:6.1f}", Float(f64::INFINITY), "   inf"),
            ("{loss:06.1f}", Float(f64::NAN), "000nan"),
            ("{loss:.3e}", Float(12345.678), "1.235e+04"),
            ("{loss:e}", Float(0.000123), "1.230000e-04"),
            ("{loss:f}", Float(0.1), "0.100000"),
            ("{loss:10.4f}", Float(3.25159), "    3.2516"),
            ("{epoch:05d}", Int(-3), "-0003"),
            ("x{{epoch}}-{epoch}", Int(2), "x{epoch}-2"),
        ];
        for (template, value, want) in cases {
            assert_eq!(fmt(template, value), want, "{template} with {value:?}");
        }
    }

    #[test]
    fn fields_and_several_values() {
        let t = PathTemplate::parse("ckpt-{epoch:02d}-{val_loss:.2f}.safetensors").unwrap();
        assert_eq!(t.fields().collect::<Vec<_>>(), ["epoch", "val_loss"]);
        let got = t
            .format(|name| match name {
                "epoch" => Some(FormatValue::Int(3)),
                "val_loss" => Some(FormatValue::Float(0.456)),
                _ => None,
            })
            .unwrap();
        assert_eq!(got, "ckpt-03-0.46.safetensors");
        let err = t.format(|_| None).unwrap_err();
        assert!(
            err.contains("{epoch:02d}") && err.contains("unknown"),
            "{err}"
        );
    }

    #[test]
    fn widths_no_file_name_can_hold_are_refused() {
        for t in [
            "x{val_loss:.100000000f}",
            "x{epoch:99999999999d}",
            "x{epoch:0256d}",
        ] {
            let e = PathTemplate::parse(t).unwrap_err();
            assert!(e.contains("above 255"), "{t}: {e}");
        }
        assert!(PathTemplate::parse("x{epoch:0255d}").is_ok());
    }

    #[test]
    fn outside_the_subset_is_refused_with_the_field_named() {
        let float_d = PathTemplate::parse("{loss:02d}")
            .unwrap()
            .format(|_| Some(FormatValue::Float(0.5)))
            .unwrap_err();
        assert!(float_d.contains("Unknown format code 'd'"), "{float_d}");
        for bad in [
            "{loss:>8.2f}",
            "{loss:+.2f}",
            "{loss:,.2f}",
            "{loss:.3}",
            "{epoch:.2d}",
            "{loss!r}",
            "{}",
            "{0}",
            "{a.b}",
            "{x[0]}",
            "a}b",
            "{epoch",
            "{a{b}}",
        ] {
            assert!(PathTemplate::parse(bad).is_err(), "{bad} parsed");
        }
        let err = PathTemplate::parse("e{epoch:x}.safetensors").unwrap_err();
        assert!(
            err.starts_with("{epoch:x}:") && err.contains("{epoch:02d}"),
            "{err}"
        );
    }
}
