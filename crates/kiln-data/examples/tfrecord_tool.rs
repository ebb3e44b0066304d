//! Reads and writes TFRecord files of `tf.train.Example`s as JSON, for the TensorFlow interop
//! test (`tests/interop/tfrecord_interop.py`).
//!
//! ```text
//! tfrecord_tool write <file> [--compression ""|GZIP|ZLIB]   < examples.json
//! tfrecord_tool read  <file> [--compression …]              > records.json
//! tfrecord_tool parse <file> [--compression …] --spec <spec.json> [--parallel N]
//!                    [--on-error stop|record]                > elements.json
//! ```
//!
//! JSON encoding of values (exact, so that the comparison can be bit for bit): byte strings
//! are lowercase hex strings, float32s are their IEEE bit patterns as integers, int64s are
//! integers.
//!
//! * An example is an object `{name: feature}`; a feature is `{"bytes_list": [hex, …]}`,
//!   `{"float_list": [bits, …]}`, `{"int64_list": [int, …]}`, or `{}` (no list set).
//!   `write` reads a list of examples; `read` prints `[{"raw": hex, "example": example}, …]`.
//! * A spec is `{name: {"kind": "fixed", "shape": [..], "dtype": "string"|"float32"|"int64",
//!   "default": [values]?} | {"kind": "var", "dtype": …}}`; `parse` prints one object per
//!   record, `{name: {"dtype": "uint8"|"float32"|"int64", "shape": [..], "values": …}}` with
//!   uint8 values as one hex string. With `--on-error record`, a record that fails to parse
//!   prints `{"error": message}` in its place and parsing goes on.
//!
//! Errors are printed to stderr and exit with status 1.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use kiln_data::tfrecord::{
    Example, ExampleSpec, Feature, FeatureDType, FeatureKind, FeatureSpec, FeatureValues, RECORD,
    TfRecordWriter,
};
use kiln_data::{Buffer, Compression, Dataset, Parallelism};
use serde_json::{Map, Value, json};

type Fallible<T> = Result<T, String>;

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tfrecord_tool: {message}");
            ExitCode::FAILURE
        }
    }
}

struct Args {
    command: String,
    file: PathBuf,
    compression: Compression,
    spec: Option<PathBuf>,
    parallel: usize,
    record_errors: bool,
}

fn parse_args(args: Vec<String>) -> Fallible<Args> {
    let usage = "usage: tfrecord_tool write|read|parse <file> [--compression \"\"|GZIP|ZLIB] \
                 [--spec spec.json] [--parallel N] [--on-error stop|record]";
    let mut it = args.into_iter();
    let command = it.next().ok_or(usage)?;
    let file = PathBuf::from(it.next().ok_or(usage)?);
    let mut parsed = Args {
        command,
        file,
        compression: Compression::None,
        spec: None,
        parallel: 0,
        record_errors: false,
    };
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value; {usage}"))?;
        match flag.as_str() {
            "--compression" => parsed.compression = value.parse().map_err(|e| format!("{e}"))?,
            "--spec" => parsed.spec = Some(PathBuf::from(value)),
            "--parallel" => {
                parsed.parallel = value.parse().map_err(|e| format!("--parallel: {e}"))?
            }
            "--on-error" => {
                parsed.record_errors = match value.as_str() {
                    "stop" => false,
                    "record" => true,
                    other => return Err(format!("--on-error {other:?}: stop or record")),
                }
            }
            other => return Err(format!("unknown flag {other}; {usage}")),
        }
    }
    Ok(parsed)
}

fn run(args: Vec<String>) -> Fallible<()> {
    let args = parse_args(args)?;
    match args.command.as_str() {
        "write" => write(&args),
        "read" => read(&args),
        "parse" => parse(&args),
        other => Err(format!("unknown command {other:?} (write, read or parse)")),
    }
}

fn write(args: &Args) -> Fallible<()> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| format!("reading stdin: {e}"))?;
    let examples: Value = serde_json::from_str(&text).map_err(|e| format!("stdin: {e}"))?;
    let examples = examples.as_array().ok_or("stdin must hold a JSON list")?;
    let mut writer =
        TfRecordWriter::create(&args.file, args.compression).map_err(|e| e.to_string())?;
    for (i, example) in examples.iter().enumerate() {
        let example = example_from_json(example).map_err(|e| format!("example {i}: {e}"))?;
        writer
            .write(&example.to_bytes())
            .map_err(|e| e.to_string())?;
    }
    writer.finish().map_err(|e| e.to_string())?;
    Ok(())
}

fn read(args: &Args) -> Fallible<()> {
    let mut out = Vec::new();
    for (i, element) in Dataset::tfrecord(vec![args.file.clone()], args.compression)
        .iter()
        .enumerate()
    {
        let element = element.map_err(|e| e.to_string())?;
        let Buffer::U8(raw) = element.require(RECORD).map_err(|e| e.to_string())?.data() else {
            return Err("record component is not uint8".into());
        };
        let example = Example::from_bytes(raw, i as u64).map_err(|e| e.to_string())?;
        out.push(json!({"raw": hex(raw), "example": example_to_json(&example)}));
    }
    println!("{}", Value::Array(out));
    Ok(())
}

fn parse(args: &Args) -> Fallible<()> {
    let spec_path = args.spec.as_ref().ok_or("parse needs --spec spec.json")?;
    let text =
        std::fs::read_to_string(spec_path).map_err(|e| format!("{}: {e}", spec_path.display()))?;
    let spec = spec_from_json(&serde_json::from_str(&text).map_err(|e| format!("spec: {e}"))?)?;
    let parallelism = match args.parallel {
        0 => Parallelism::Sequential,
        n => Parallelism::Fixed(n),
    };
    let ds = Dataset::tfrecord(vec![args.file.clone()], args.compression)
        .parse_example(spec, parallelism);
    let mut out = Vec::new();
    for element in ds.iter() {
        let element = match element {
            Ok(element) => element,
            Err(err) if args.record_errors => {
                out.push(json!({"error": err.to_string()}));
                continue;
            }
            Err(err) => return Err(err.to_string()),
        };
        let mut object = Map::new();
        for (name, array) in element.iter() {
            let values = match array.data() {
                Buffer::U8(v) => json!(hex(v)),
                Buffer::F32(v) => json!(v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()),
                Buffer::I64(v) => json!(v),
                other => return Err(format!("unexpected dtype {}", other.dtype())),
            };
            object.insert(
                name.to_string(),
                json!({"dtype": array.dtype().name(), "shape": array.shape(), "values": values}),
            );
        }
        out.push(Value::Object(object));
    }
    println!("{}", Value::Array(out));
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Fallible<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return Err(format!("odd-length hex string {text:?}"));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|e| format!("hex {text:?}: {e}")))
        .collect()
}

fn list(value: &Value) -> Fallible<&Vec<Value>> {
    value
        .as_array()
        .ok_or_else(|| format!("expected a list, found {value}"))
}

fn values_from_json(list_name: &str, values: &Value) -> Fallible<FeatureValues> {
    let values = list(values)?;
    Ok(match list_name {
        "bytes_list" | "string" => FeatureValues::Bytes(
            values
                .iter()
                .map(|v| unhex(v.as_str().ok_or("bytes must be hex strings")?))
                .collect::<Fallible<_>>()?,
        ),
        "float_list" | "float32" => FeatureValues::Float32(
            values
                .iter()
                .map(|v| {
                    let bits = v.as_u64().ok_or("floats must be u32 bit patterns")?;
                    Ok(f32::from_bits(
                        u32::try_from(bits).map_err(|e| e.to_string())?,
                    ))
                })
                .collect::<Fallible<_>>()?,
        ),
        "int64_list" | "int64" => FeatureValues::Int64(
            values
                .iter()
                .map(|v| v.as_i64().ok_or_else(|| format!("not an int64: {v}")))
                .collect::<Fallible<_>>()?,
        ),
        other => return Err(format!("unknown list or dtype {other:?}")),
    })
}

fn example_from_json(value: &Value) -> Fallible<Example> {
    let features = value
        .as_object()
        .ok_or("an example must be a JSON object")?;
    let mut example = Example::new();
    for (name, feature) in features {
        let feature = feature
            .as_object()
            .ok_or("a feature must be a JSON object")?;
        let feature = match feature.iter().next() {
            None => Feature { kind: None },
            Some((list_name, values)) => match values_from_json(list_name, values)? {
                FeatureValues::Bytes(v) => Feature::bytes(v),
                FeatureValues::Float32(v) => Feature::float32(v),
                FeatureValues::Int64(v) => Feature::int64(v),
            },
        };
        example = example.with(name.clone(), feature);
    }
    Ok(example)
}

fn example_to_json(example: &Example) -> Value {
    let mut object = Map::new();
    for (name, feature) in example.features.iter().flat_map(|f| f.feature.iter()) {
        let value = match &feature.kind {
            None => json!({}),
            Some(FeatureKind::BytesList(l)) => {
                json!({"bytes_list": l.value.iter().map(|b| hex(b)).collect::<Vec<_>>()})
            }
            Some(FeatureKind::FloatList(l)) => {
                json!({"float_list": l.value.iter().map(|x| x.to_bits()).collect::<Vec<_>>()})
            }
            Some(FeatureKind::Int64List(l)) => json!({"int64_list": l.value}),
        };
        object.insert(name.clone(), value);
    }
    Value::Object(object)
}

fn spec_from_json(value: &Value) -> Fallible<ExampleSpec> {
    let features = value.as_object().ok_or("the spec must be a JSON object")?;
    let mut spec = ExampleSpec::new();
    for (name, feature) in features {
        let field = |key: &str| {
            feature
                .get(key)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("feature {name:?}: {key:?} missing"))
        };
        let dtype = match field("dtype")? {
            "string" => FeatureDType::Bytes,
            "float32" => FeatureDType::Float32,
            "int64" => FeatureDType::Int64,
            other => return Err(format!("feature {name:?}: unknown dtype {other:?}")),
        };
        let feature_spec = match field("kind")? {
            "fixed" => {
                let shape = list(feature.get("shape").ok_or("fixed features need a shape")?)?
                    .iter()
                    .map(|d| d.as_u64().map(|d| d as usize).ok_or("bad dimension"))
                    .collect::<Result<Vec<_>, _>>()?;
                let default_value = match feature.get("default") {
                    None | Some(Value::Null) => None,
                    Some(values) => Some(values_from_json(dtype.name(), values)?),
                };
                FeatureSpec::FixedLen {
                    shape,
                    dtype,
                    default_value,
                }
            }
            "var" => FeatureSpec::var_len(dtype),
            other => return Err(format!("feature {name:?}: unknown kind {other:?}")),
        };
        spec = spec.with(name.clone(), feature_spec);
    }
    Ok(spec)
}
