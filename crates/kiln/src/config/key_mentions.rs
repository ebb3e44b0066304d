//! Every config key that an error message of kiln-data, the config or the pipeline builder
//! names must be a key the config accepts.
//!
//! The accepted keys come from the config types themselves: each table type is handed an
//! unknown key, and serde's "unknown field `…`, expected one of `…`" lists its fields (enum
//! values likewise from "unknown variant"). The mentions come from the string literals of the
//! scanned sources (comments and `#[cfg(test)]` items left out), read four ways:
//!
//! * an assignment, `name = …` (also dotted: `fit.steps_per_epoch = …`);
//! * `set name` where `name` has a `_` or `.`, or is followed by ` to`;
//! * a backticked name, `` `name` ``;
//! * any `snake_case` word: a key, a config value (`image_folder`, `one_hot`), or one of the
//!   [`NOT_KEYS`] below, each with the reason a config user never reads it as a setting.
//!
//! Format placeholders (`{key}`, `{:?}`) are blanked first, so `{key}.files` checks `files`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::callbacks::{
    CSVLoggerSpec, EarlyStoppingSpec, LearningRateSchedulerSpec, ModelCheckpointSpec,
    ReduceLROnPlateauSpec, TensorBoardSpec, TerminateOnNaNSpec,
};
use super::{
    BackupSpec, DataConfig, DistributeConfig, FeatureConfig, FitConfig, OpConfig, PipelineConfig,
    RawCompile, RawConfig, ShuffleConfig, Source, StrategyKind,
};

/// Sources whose string literals reach config users, relative to this crate.
const SCANNED: [&str; 3] = ["../kiln-data/src", "src/config", "src/pipeline.rs"];

/// `snake_case` words in those messages that are not config keys, and why that is right.
const NOT_KEYS: [(&str, &str); 20] = [
    (
        "make_csv_dataset",
        "a function name, the prefix of its argument errors",
    ),
    ("image_dataset_from_directory", "a function name (Keras')"),
    ("text_dataset_from_directory", "a function name (Keras')"),
    ("from_tensor_slices", "a function name"),
    ("parse_example", "a function name"),
    ("parse_single_example", "a TensorFlow function name"),
    (
        "record_defaults",
        "CsvDataset's argument: make_csv_dataset passes it consistently",
    ),
    (
        "exclude_cols",
        "CsvDataset's argument, not used by the config",
    ),
    (
        "cycle_length",
        "Dataset::interleave's argument, not used by the config",
    ),
    (
        "block_length",
        "Dataset::interleave's argument, not used by the config",
    ),
    (
        "num_shards",
        "Dataset::shard's argument, not used by the config",
    ),
    ("padded_batch", "a function name, not used by the config"),
    (
        "padded_shapes",
        "Dataset::padded_batch's argument, not used by the config",
    ),
    (
        "padding_values",
        "Dataset::padded_batch's argument, not used by the config",
    ),
    ("fortran_order", "a field of the .npy file header"),
    ("horizontal_and_vertical", "a value of random_flip's mode"),
    ("multi_worker_mirrored", "a value of distribute.strategy"),
    ("one_device", "a value of distribute.strategy"),
    (
        "num_rows_for_inference",
        "make_csv_dataset's argument; the config keeps its default",
    ),
    (
        "use_quote_delim",
        "CsvDataset's argument; the config keeps its default",
    ),
];

/// Keys whose table holds entries named by the user (`features.image`): the segment after
/// them is a name, not a key.
const NAMED_ENTRIES: [&str; 1] = ["features"];

const PROBE: &str = "kiln_probe_key";

/// The backticked names after "expected" in a serde error.
fn expected_names(message: &str) -> Vec<String> {
    let Some((_, list)) = message.split_once("expected") else {
        return Vec::new();
    };
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The fields of the table type `T`, found by giving it an unknown key after `context`.
fn fields<T: DeserializeOwned>(context: &str) -> Vec<String> {
    let text = format!("{context}\n{PROBE} = 0\n");
    let message = match toml::from_str::<T>(&text) {
        Ok(_) => panic!(
            "{} accepted the unknown key {PROBE}",
            std::any::type_name::<T>()
        ),
        Err(e) => e.message().to_string(),
    };
    assert!(
        message.contains(&format!("unknown field `{PROBE}`")),
        "{}: {message}",
        std::any::type_name::<T>()
    );
    expected_names(&message)
}

/// The values of the enum `T`, from an unknown one.
fn variants<T: DeserializeOwned>() -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Wrap<T> {
        #[allow(dead_code)]
        v: T,
    }
    let message = match toml::from_str::<Wrap<T>>(&format!("v = \"{PROBE}\"")) {
        Ok(_) => panic!("{} accepted {PROBE}", std::any::type_name::<T>()),
        Err(e) => e.message().to_string(),
    };
    assert!(message.contains("unknown variant"), "{message}");
    expected_names(&message)
}

/// Every key of every config table, and the enum values.
fn schema() -> (BTreeSet<String>, BTreeSet<String>) {
    let ops = match toml::from_str::<OpConfig>(&format!("op = \"{PROBE}\"")) {
        Ok(_) => panic!("an unknown op was accepted"),
        Err(e) => expected_names(e.message()),
    };
    let mut keys: Vec<String> = ["op".to_string()].into();
    for op in &ops {
        keys.extend(fields::<OpConfig>(&format!("op = \"{op}\"")));
    }
    for list in [
        fields::<RawConfig>(""),
        fields::<RawCompile>(""),
        fields::<DataConfig>(""),
        fields::<PipelineConfig>(""),
        fields::<ShuffleConfig>(""),
        fields::<FeatureConfig>(""),
        fields::<FitConfig>(""),
        fields::<DistributeConfig>(""),
        fields::<BackupSpec>(""),
        fields::<EarlyStoppingSpec>(""),
        fields::<ReduceLROnPlateauSpec>(""),
        fields::<LearningRateSchedulerSpec>(""),
        fields::<CSVLoggerSpec>(""),
        fields::<TerminateOnNaNSpec>(""),
        fields::<TensorBoardSpec>(""),
        fields::<ModelCheckpointSpec>(""),
        fields::<crate::precision::LossScaleOptions>(""),
        // `[[callbacks]]` entries name their class with `type`.
        vec!["type".to_string()],
    ] {
        keys.extend(list);
    }
    for optimizer in [
        "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Lion",
    ] {
        let context = format!("type = \"{optimizer}\"");
        keys.extend(fields::<crate::compile::OptimizerSpec>(&context));
    }
    let mut values = ops;
    values.extend(variants::<Source>());
    values.extend(variants::<StrategyKind>());
    (keys.into_iter().collect(), values.into_iter().collect())
}

/// The `.rs` files under `path` (or `path` itself), test files left out.
fn rust_files(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(path).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if name.ends_with(".rs")
            && !["tests.rs", "key_mentions.rs"].contains(&name.as_str())
            && !name.ends_with("_tests.rs")
        {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// A Rust source split into what matters here: string literal contents (unescaped) with their
/// byte offset, and the places of `{`, `}`, `;` and `#[cfg(test)]` outside strings and
/// comments.
struct Lexed {
    strings: Vec<(usize, String)>,
    /// (offset, byte) of `{`, `}`, `;`; `b'#'` marks a `#[cfg(test)]`.
    marks: Vec<(usize, u8)>,
}

fn lex(src: &str) -> Lexed {
    let b = src.as_bytes();
    let mut out = Lexed {
        strings: Vec::new(),
        marks: Vec::new(),
    };
    let mut i = 0;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |j| j + 2);
        } else if rest.starts_with("#[") || rest.starts_with("#![") {
            // An attribute: its strings (`serde(default = "…")`) are no messages.
            if rest.starts_with("#[cfg(test)]") {
                out.marks.push((i, b'#'));
            }
            i += attribute_len(rest);
        } else if (rest.starts_with("r\"") || rest.starts_with("r#") || rest.starts_with("br"))
            && (i == 0 || !ident(b[i - 1]))
        {
            let start = i + rest.find(['"', '#']).unwrap();
            let hashes = src[start..].bytes().take_while(|&c| c == b'#').count();
            if b.get(start + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let body = start + hashes + 1;
            let end = body + src[body..].find(&close).unwrap();
            out.strings.push((body, src[body..end].to_string()));
            i = end + close.len();
        } else if b[i] == b'"' {
            let (text, end) = unescape(src, i + 1);
            out.strings.push((i, text));
            i = end;
        } else if b[i] == b'\'' {
            i += char_literal_len(rest).unwrap_or(1);
        } else {
            if matches!(b[i], b'{' | b'}' | b';') {
                out.marks.push((i, b[i]));
            }
            i += 1;
        }
    }
    out
}

/// The length of the attribute at the start of `s` (`#[…]`, brackets balanced, strings
/// skipped).
fn attribute_len(s: &str) -> usize {
    let mut depth = 0;
    let mut i = 0;
    let b = s.as_bytes();
    while i < b.len() {
        match b[i] {
            b'[' => depth += 1,
            b']' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            b'"' => i = unescape(s, i + 1).1 - 1,
            _ => {}
        }
        i += 1;
    }
    s.len()
}

/// The length of the char literal at the start of `s` (`'x'`, `'\n'`, `'\u{..}'`), or
/// `None` for a lifetime.
fn char_literal_len(s: &str) -> Option<usize> {
    let mut chars = s.char_indices().skip(1);
    let (_, c) = chars.next()?;
    let end = if c == '\\' {
        s[2..].find('\'')? + 2
    } else {
        let (j, next) = chars.next()?;
        if next != '\'' {
            return None;
        }
        j
    };
    Some(end + 1)
}

/// The contents of the string literal whose body starts at `from`, and the offset after its
/// closing quote. Escapes are resolved; a `\` at the end of a line swallows the newline and
/// the next line's indentation, as Rust does.
fn unescape(src: &str, from: usize) -> (String, usize) {
    let mut out = String::new();
    let mut chars = src[from..].char_indices().peekable();
    while let Some((j, c)) = chars.next() {
        match c {
            '"' => return (out, from + j + 1),
            '\\' => match chars.next() {
                Some((_, '\n')) => {
                    while chars.peek().is_some_and(|(_, c)| c.is_whitespace()) {
                        chars.next();
                    }
                }
                Some((_, 'n')) => out.push('\n'),
                Some((_, 't')) => out.push('\t'),
                Some((_, e)) => out.push(e),
                None => break,
            },
            c => out.push(c),
        }
    }
    (out, src.len())
}

/// Byte ranges of the items marked `#[cfg(test)]`: up to their `;`, or their `{ … }` block.
fn test_items(marks: &[(usize, u8)]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (k, &(start, m)) in marks.iter().enumerate() {
        if m != b'#' {
            continue;
        }
        let mut depth = 0;
        for &(at, c) in &marks[k + 1..] {
            match c {
                b';' if depth == 0 => {
                    out.push((start, at));
                    break;
                }
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        out.push((start, at));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// The string literals of `src` outside comments and test items.
fn message_strings(src: &str) -> Vec<String> {
    let lexed = lex(src);
    let tests = test_items(&lexed.marks);
    lexed
        .strings
        .into_iter()
        .filter(|(at, _)| !tests.iter().any(|(a, b)| a <= at && at <= b))
        .map(|(_, s)| s)
        .collect()
}

/// `text` with format placeholders (`{}`, `{name}`, `{0:?}`, `{:.2}`) replaced by `§`.
fn blank_placeholders(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("{{") {
            out.push_str("{{");
            rest = after;
            continue;
        }
        let end = tail.find('}');
        let inner = end.map(|e| &tail[1..e]);
        match (end, inner) {
            (Some(e), Some(inner))
                if !inner.contains(char::is_whitespace) && !inner.contains('{') =>
            {
                out.push('§');
                rest = &tail[e + 1..];
            }
            _ => {
                out.push('{');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A name as config messages write keys: lower-case `snake_case` segments joined by `.`,
/// each optionally indexed (`map[2]`); the segments without their indices.
fn key_path(token: &str) -> Option<Vec<&str>> {
    let token = token.strip_prefix("§.").unwrap_or(token);
    let mut segments = Vec::new();
    for part in token.split('.') {
        let name = part.split('[').next().unwrap_or(part);
        let rest = &part[name.len()..];
        let ok_name = name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        let ok_index = rest.is_empty()
            || (rest.starts_with('[') && rest.ends_with(']') && !rest[1..].contains('['));
        if !ok_name || !ok_index {
            return None;
        }
        segments.push(name);
    }
    Some(segments)
}

/// One mention found in a message: the rule that found it and the name.
#[derive(Debug, PartialEq)]
struct Mention {
    rule: &'static str,
    name: String,
}

/// The key mentions of one message.
fn mentions(message: &str) -> Vec<Mention> {
    let text = blank_placeholders(message);
    let is_token = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']' | '§');
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let c = text[i..].chars().next().unwrap();
        if !is_token(c) {
            i += c.len_utf8();
            continue;
        }
        let end = text[i..]
            .find(|c: char| !is_token(c))
            .map_or(text.len(), |j| i + j);
        let raw = text[i..end].trim_end_matches('.');
        let before = &text[..i];
        let after = &text[i + raw.len()..];
        let prev = before.chars().next_back();
        i = end;
        if matches!(prev, Some('/' | '-' | ':' | '\\' | '\'' | '"')) || after.starts_with('(') {
            continue; // paths, URLs, flags, quoted values, calls
        }
        let Some(_) = key_path(raw) else { continue };
        let dotted = raw.contains('.');
        let rule = if after.starts_with(" = ") {
            Some("assignment")
        } else if before.ends_with("set ")
            && (raw.contains('_') || dotted || after.starts_with(" to "))
        {
            Some("set")
        } else if prev == Some('`') && after.starts_with('`') {
            Some("backticks")
        } else if raw.contains('_') && message.contains(char::is_whitespace) {
            // (A literal without spaces is a name — a component, a default function, a
            // fingerprint kind — not a message.)
            Some("snake_case")
        } else {
            None
        };
        if let Some(rule) = rule {
            out.push(Mention {
                rule,
                name: raw.strip_prefix("§.").unwrap_or(raw).to_string(),
            });
        }
    }
    out
}

/// Whether `mention` names only keys (or, for a `snake_case` word, a key, a value or one of
/// [`NOT_KEYS`]).
fn known(mention: &Mention, keys: &BTreeSet<String>, values: &BTreeSet<String>) -> bool {
    let segments = key_path(&mention.name).expect("mentions are key paths");
    let mut free = false;
    segments.iter().all(|s| {
        let ok = free
            || keys.contains(*s)
            || (mention.rule == "snake_case"
                && (!s.contains('_')
                    || values.contains(*s)
                    || NOT_KEYS.iter().any(|(n, _)| n == s)));
        free = NAMED_ENTRIES.contains(s);
        ok
    })
}

#[test]
fn the_scanner_finds_mentions_by_each_rule() {
    let found = |m: &str| -> Vec<(&'static str, String)> {
        mentions(m).into_iter().map(|m| (m.rule, m.name)).collect()
    };
    assert_eq!(
        found("{e}; set ignore_errors = true, or set `header` and {key}.column_names = [...]"),
        vec![
            ("assignment", "ignore_errors".to_string()),
            ("backticks", "header".to_string()),
            ("assignment", "column_names".to_string()),
        ]
    );
    assert_eq!(
        found("set depth to 10; set it; see s3://b/a_b.csv, tf.io.parse_single_example()"),
        vec![("set", "depth".to_string())]
    );
    assert_eq!(
        found("the select_columns of data.train.map[2].out_type"),
        vec![
            ("snake_case", "select_columns".to_string()),
            ("snake_case", "data.train.map[2].out_type".to_string()),
        ]
    );
    let src = "fn f() { g(\"a \\\"q\\\" \\\n     b\", 'x', '{'); } // \"comment\"\n\
               #[cfg(test)]\nmod tests { fn t() { h(\"in a test\"); } }\n\
               #[cfg(test)]\nmod other;\n#[serde(default = \"d\")]\nfn k<'a>() { m(r#\"raw \"x\"\"#); }";
    assert_eq!(message_strings(src), vec!["a \"q\" b", "raw \"x\""]);
    assert_eq!(
        blank_placeholders("{key}.{which} {:?} {{x}} { op = 1 }"),
        "§.§ § {{x}} { op = 1 }"
    );
}

#[test]
fn error_messages_name_only_keys_the_config_accepts() {
    let (keys, values) = schema();
    // The probes found the tables: a few keys of each kind.
    for key in [
        "ignore_errors",
        "column_names",
        "include_hidden",
        "buffer_size",
        "steps_per_epoch",
        "scale",
        "patience",
        "strategy",
    ] {
        assert!(keys.contains(key), "{key} not in {keys:?}");
    }
    assert!(
        values.contains("image_folder") && values.contains("one_hot"),
        "{values:?}"
    );
    // What the check refuses: make_csv_dataset's names where the config has others.
    let mention = |rule, name: &str| Mention {
        rule,
        name: name.to_string(),
    };
    assert!(!known(&mention("set", "select_columns"), &keys, &values));
    assert!(!known(
        &mention("snake_case", "select_columns"),
        &keys,
        &values
    ));
    let unknown_path = mention("assignment", "data.train.num_rows_for_inference");
    assert!(!known(&unknown_path, &keys, &values));
    assert!(known(
        &mention("assignment", "data.train.ignore_errors"),
        &keys,
        &values
    ));
    assert!(known(
        &mention("backticks", "features.image.dtype"),
        &keys,
        &values
    ));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut unknown = Vec::new();
    let mut checked = 0;
    for dir in SCANNED {
        for file in rust_files(&root.join(dir)) {
            let src = std::fs::read_to_string(&file).unwrap();
            for message in message_strings(&src) {
                for m in mentions(&message) {
                    checked += 1;
                    if !known(&m, &keys, &values) {
                        let file = file.strip_prefix(root).unwrap_or(&file).display();
                        unknown.push(format!("{file}: {} ({}) in {message:?}", m.name, m.rule));
                    }
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} mentions found: is the scanner broken?"
    );
    assert!(
        unknown.is_empty(),
        "messages name settings the config does not have:\n{}",
        unknown.join("\n")
    );
}
