//! Callback state for BackupAndRestore checkpoints ([`crate::fit::Callback::state`]): JSON
//! objects tagged with the callback's Keras name, so that a checkpoint's state is never put
//! back into another kind of callback (the callbacks of a config were reordered).

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{KilnError, Result};

/// `state` as a JSON object with `"callback": name` added.
pub(crate) fn encode(name: &str, state: &impl Serialize) -> serde_json::Value {
    let mut v = serde_json::to_value(state).expect("callback state serializes");
    if let Some(map) = v.as_object_mut() {
        map.insert("callback".into(), name.into());
    }
    v
}

/// The state `encode(name, ..)` wrote.
///
/// # Errors
/// [`KilnError::Callback`] naming `name` when `value` is another callback's state or not a
/// state at all.
pub(crate) fn decode<T: DeserializeOwned>(name: &str, value: &serde_json::Value) -> Result<T> {
    let err = |what: String| KilnError::Callback {
        callback: name.to_string(),
        message: format!(
            "the checkpoint's state for this callback {what}; were the callbacks reordered or \
             changed since the checkpoint was written? Keep their order, or start over \
             (kiln train --no-resume)"
        ),
    };
    let tag = value.get("callback").and_then(|t| t.as_str());
    if tag != Some(name) {
        return Err(err(tag
            .map_or("is not a callback state".to_string(), |t| {
                format!("belongs to a {t}")
            })));
    }
    serde_json::from_value(value.clone()).map_err(|e| err(format!("cannot be read ({e})")))
}

/// Serde for `Option<f64>` that keeps NaN and ±inf (JSON numbers cannot: serde_json writes
/// them as `null`), as the strings `"nan"`, `"inf"`, `"-inf"`.
pub(crate) mod opt_float {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Number(f64),
        Text(String),
    }

    pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(x) if x.is_nan() => s.serialize_some("nan"),
            Some(x) if x.is_infinite() => s.serialize_some(if *x > 0.0 { "inf" } else { "-inf" }),
            Some(x) => s.serialize_some(x),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        Ok(match Option::<Repr>::deserialize(d)? {
            None => None,
            Some(Repr::Number(x)) => Some(x),
            Some(Repr::Text(t)) => Some(match t.as_str() {
                "nan" => f64::NAN,
                "inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                other => {
                    return Err(serde::de::Error::custom(format!(
                        "not a number: \"{other}\""
                    )));
                }
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Serialize, Deserialize)]
    struct S {
        #[serde(with = "opt_float")]
        best: Option<f64>,
        wait: usize,
    }

    #[test]
    fn non_finite_values_and_the_tag_survive() {
        for best in [
            None,
            Some(0.25),
            Some(f64::INFINITY),
            Some(f64::NEG_INFINITY),
        ] {
            let v = encode("EarlyStopping", &S { best, wait: 2 });
            let text = v.to_string();
            let back: S = decode("EarlyStopping", &serde_json::from_str(&text).unwrap()).unwrap();
            assert_eq!((back.best, back.wait), (best, 2), "{text}");
        }
        let v = encode(
            "EarlyStopping",
            &S {
                best: Some(f64::NAN),
                wait: 0,
            },
        );
        assert!(
            decode::<S>("EarlyStopping", &v)
                .unwrap()
                .best
                .unwrap()
                .is_nan()
        );
        let err = decode::<S>("ReduceLROnPlateau", &v)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "ReduceLROnPlateau: the checkpoint's state for this callback belongs to a \
                 EarlyStopping; were the callbacks reordered"
            ),
            "{err}"
        );
        assert!(decode::<S>("X", &serde_json::json!(3)).is_err());
    }
}
