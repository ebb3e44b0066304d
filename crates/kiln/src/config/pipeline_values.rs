//! Config strings as the tf.data values they name: `compression_type`, `color_mode`,
//! `column_defaults` entries and `features` (tf.train.Example) entries. Each returns the
//! reason a value is refused, for the caller to name its key.

use kiln_data::Compression;
use kiln_data::DType;
use kiln_data::sources::{ColorMode, RecordDefault};
use kiln_data::tfrecord::{ExampleSpec, FeatureDType, FeatureSpec, FeatureValues};

use super::FeatureConfig;

/// `compression_type` by tf.data's names.
pub(crate) fn compression(name: &str) -> std::result::Result<Compression, String> {
    name.parse::<Compression>().map_err(|_| {
        format!(
            "unknown compression_type \"{name}\"; allowed: \"\" (or \"NONE\"), \"GZIP\", \
             \"ZLIB\" (TensorFlow's names, upper case)"
        )
    })
}

/// Keras' `color_mode`.
pub(crate) fn color_mode(name: &str) -> std::result::Result<ColorMode, String> {
    match name {
        "grayscale" => Ok(ColorMode::Grayscale),
        "rgb" => Ok(ColorMode::Rgb),
        "rgba" => Ok(ColorMode::Rgba),
        other => Err(format!(
            "unknown color_mode \"{other}\"; allowed: \"grayscale\", \"rgb\", \"rgba\""
        )),
    }
}

/// One `column_defaults` entry: a dtype name for a required column, or a default value (an
/// integer is `int32` and a float `float32`, as TensorFlow types Python numbers).
pub(crate) fn record_default(v: &toml::Value) -> std::result::Result<RecordDefault, String> {
    Ok(match v {
        toml::Value::String(s) => match s.as_str() {
            "float32" => RecordDefault::Required(DType::F32),
            "float64" => RecordDefault::Required(DType::F64),
            "int32" => RecordDefault::Required(DType::I32),
            "int64" => RecordDefault::Required(DType::I64),
            "string" => RecordDefault::Required(DType::String),
            _ => RecordDefault::String(s.clone()),
        },
        toml::Value::Integer(i) => RecordDefault::Int32(
            i32::try_from(*i).map_err(|_| format!("{i} does not fit int32; write \"int64\""))?,
        ),
        toml::Value::Float(f) => RecordDefault::Float32(*f as f32),
        other => {
            return Err(format!(
                "{other} is not a column default: give a number, a string, or a dtype name \
                 (\"float32\", \"float64\", \"int32\", \"int64\", \"string\")"
            ));
        }
    })
}

/// The `tf.io.FixedLenFeature` / `VarLenFeature` a `features` entry describes.
pub(crate) fn feature_spec(f: &FeatureConfig) -> std::result::Result<FeatureSpec, String> {
    let dtype = match f.dtype.as_str() {
        "int64" => FeatureDType::Int64,
        "float32" => FeatureDType::Float32,
        "string" => FeatureDType::Bytes,
        other => {
            return Err(format!(
                "unknown dtype \"{other}\"; a tf.train.Example holds \"int64\", \"float32\" or \
                 \"string\" (cast later with a map op)"
            ));
        }
    };
    match f.kind.as_str() {
        "FixedLenFeature" => {
            let Some(default) = &f.default_value else {
                return Ok(FeatureSpec::fixed_len(f.shape.clone(), dtype));
            };
            let items = match default {
                toml::Value::Array(a) => a.clone(),
                one => vec![one.clone()],
            };
            let bad = || {
                format!(
                    "default_value {default} does not hold {} values",
                    dtype.name()
                )
            };
            let values = match dtype {
                FeatureDType::Int64 => FeatureValues::Int64(
                    items
                        .iter()
                        .map(|v| v.as_integer().ok_or_else(bad))
                        .collect::<std::result::Result<_, _>>()?,
                ),
                FeatureDType::Float32 => FeatureValues::Float32(
                    items
                        .iter()
                        .map(|v| {
                            v.as_float()
                                .or_else(|| v.as_integer().map(|i| i as f64))
                                .map(|x| x as f32)
                                .ok_or_else(bad)
                        })
                        .collect::<std::result::Result<_, _>>()?,
                ),
                FeatureDType::Bytes => FeatureValues::Bytes(
                    items
                        .iter()
                        .map(|v| v.as_str().map(|s| s.as_bytes().to_vec()).ok_or_else(bad))
                        .collect::<std::result::Result<_, _>>()?,
                ),
            };
            let spec = FeatureSpec::fixed_len_with_default(f.shape.clone(), values);
            ExampleSpec::new()
                .with("f", spec.clone())
                .check()
                .map_err(|e| e.to_string().replace("invalid argument: ", ""))?;
            Ok(spec)
        }
        "VarLenFeature" => {
            if !f.shape.is_empty() || f.default_value.is_some() {
                return Err("a VarLenFeature takes no shape and no default_value".into());
            }
            Ok(FeatureSpec::var_len(dtype))
        }
        other => Err(format!(
            "unknown feature type \"{other}\"; allowed: \"FixedLenFeature\", \"VarLenFeature\""
        )),
    }
}
