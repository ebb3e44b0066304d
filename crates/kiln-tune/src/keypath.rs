//! Run-config key paths: `fit.batch_size`, `compile.optimizer.learning_rate`,
//! `model.layers[2].units` (dots between table keys, `[i]` for a 0-based array element), the
//! same spelling kiln's config errors use.

/// One step of a key path.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Splits `path` into steps.
///
/// # Errors
/// A message saying what is malformed (empty key, unclosed or non-numeric `[i]`).
fn parse(path: &str) -> Result<Vec<Step>, String> {
    let bad = |why: &str| {
        Err(format!(
            "\"{path}\" is not a key path ({why}); write dotted keys with [i] for array \
             elements, e.g. \"model.layers[2].units\""
        ))
    };
    let mut steps = Vec::new();
    for part in path.split('.') {
        let (name, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if name.is_empty() {
            return bad("an empty key");
        }
        steps.push(Step::Key(name.to_string()));
        while !rest.is_empty() {
            let Some(close) = rest.find(']') else {
                return bad("an unclosed [");
            };
            let Ok(i) = rest[1..close].trim().parse::<usize>() else {
                return bad("an index that is not a non-negative integer");
            };
            steps.push(Step::Index(i));
            rest = &rest[close + 1..];
            if !rest.is_empty() && !rest.starts_with('[') {
                return bad("text after ]");
            }
        }
    }
    Ok(steps)
}

/// The path of the first `n` steps, as written (`model.layers[2]`).
fn prefix(steps: &[Step]) -> String {
    let mut s = String::new();
    for step in steps {
        match step {
            Step::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Step::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// What a value is, in words, for messages.
fn describe(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("the string \"{s}\""),
        toml::Value::Integer(i) => format!("the integer {i}"),
        toml::Value::Float(f) => format!("the number {f}"),
        toml::Value::Boolean(b) => format!("{b}"),
        toml::Value::Datetime(d) => format!("the date {d}"),
        toml::Value::Array(a) => format!("an array of {} elements", a.len()),
        toml::Value::Table(_) => "a table".into(),
    }
}

/// How to turn a string-valued key into a table, for the keys whose string form is a
/// shorthand (`compile.optimizer = "adamw"`, `compile.loss = "..."`).
fn table_hint(at: &str, v: &toml::Value) -> String {
    let name = v.as_str().unwrap_or("...");
    match at {
        "compile.optimizer" => {
            let ty = match name.to_ascii_lowercase().as_str() {
                "adamw" => "AdamW".to_string(),
                "adam" => "Adam".to_string(),
                "sgd" => "SGD".to_string(),
                "rmsprop" => "RMSprop".to_string(),
                _ => name.to_string(),
            };
            format!(
                "write the optimizer as a table, e.g. in [overrides]: \"compile.optimizer\" = \
                 {{ type = \"{ty}\" }} (or compile.optimizer = {{ type = \"{ty}\" }} in the base \
                 config)"
            )
        }
        _ => format!(
            "write {at} as a table, e.g. in [overrides]: \"{at}\" = {{ type = \"{name}\" }}"
        ),
    }
}

/// Sets the value at `path` in `root`, creating missing tables on the way (not array
/// elements).
///
/// # Errors
/// A message naming the part of the path that cannot hold the key (a string, number or array
/// where a table is needed, an index past the end of an array) and how to fix it.
pub fn set(root: &mut toml::Table, path: &str, value: toml::Value) -> Result<(), String> {
    let steps = parse(path)?;
    let mut here = toml::Value::Table(std::mem::take(root));
    let result = set_in(&mut here, &steps, 0, value);
    if let toml::Value::Table(t) = here {
        *root = t;
    }
    result
}

fn set_in(
    here: &mut toml::Value,
    steps: &[Step],
    at: usize,
    value: toml::Value,
) -> Result<(), String> {
    let last = at + 1 == steps.len();
    match (&steps[at], here) {
        (Step::Key(k), toml::Value::Table(t)) => {
            if last {
                t.insert(k.clone(), value);
                return Ok(());
            }
            let next = t.entry(k.clone()).or_insert_with(|| match steps[at + 1] {
                Step::Key(_) => toml::Value::Table(toml::Table::new()),
                Step::Index(_) => toml::Value::Array(Vec::new()),
            });
            set_in(next, steps, at + 1, value)
        }
        (Step::Index(i), toml::Value::Array(a)) => {
            let len = a.len();
            let Some(slot) = a.get_mut(*i) else {
                return Err(format!(
                    "{} has {len} element{} (indices 0..{}), so [{i}] does not exist; count \
                     from 0",
                    prefix(&steps[..at]),
                    if len == 1 { "" } else { "s" },
                    len.saturating_sub(1)
                ));
            };
            if last {
                *slot = value;
                return Ok(());
            }
            set_in(slot, steps, at + 1, value)
        }
        (Step::Key(k), other) => {
            let parent = prefix(&steps[..at]);
            let mut msg = format!(
                "cannot set {}: {parent} is {}, not a table with a \"{k}\" key",
                prefix(steps),
                describe(other)
            );
            if other.is_str() {
                msg += &format!("; {}", table_hint(&parent, other));
            }
            Err(msg)
        }
        (Step::Index(i), other) => Err(format!(
            "cannot set {}: {} is {}, not an array with an element [{i}]",
            prefix(steps),
            prefix(&steps[..at]),
            describe(other)
        )),
    }
}

/// The value at `path` in `root`, if there is one.
pub fn get<'a>(root: &'a toml::Table, path: &str) -> Option<&'a toml::Value> {
    let steps = parse(path).ok()?;
    let mut here: Option<&toml::Value> = None;
    for (n, step) in steps.iter().enumerate() {
        here = match (step, here) {
            (Step::Key(k), None) if n == 0 => root.get(k),
            (Step::Key(k), Some(toml::Value::Table(t))) => t.get(k),
            (Step::Index(i), Some(toml::Value::Array(a))) => a.get(*i),
            _ => None,
        };
        here?;
    }
    here
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn sets_nested_keys_array_elements_and_creates_missing_tables() {
        let mut t = table(
            "[model]\nlayers = [{ type = \"Input\" }, { type = \"Dense\", units = 4 }]\n\
             [compile]\noptimizer = { type = \"AdamW\" }\n",
        );
        set(&mut t, "model.layers[1].units", 64.into()).unwrap();
        set(&mut t, "compile.optimizer.learning_rate", 0.01.into()).unwrap();
        set(&mut t, "fit.batch_size", 32.into()).unwrap();
        assert_eq!(
            get(&t, "model.layers[1].units"),
            Some(&toml::Value::Integer(64))
        );
        assert_eq!(
            get(&t, "compile.optimizer.learning_rate"),
            Some(&toml::Value::Float(0.01))
        );
        assert_eq!(get(&t, "fit.batch_size"), Some(&toml::Value::Integer(32)));
        // The other keys are untouched.
        assert_eq!(
            get(&t, "model.layers[1].type"),
            Some(&toml::Value::String("Dense".into()))
        );
        assert_eq!(
            get(&t, "compile.optimizer.type").unwrap().as_str(),
            Some("AdamW")
        );
    }

    #[test]
    fn a_key_under_the_optimizer_string_says_to_write_a_table() {
        let mut t = table("[compile]\noptimizer = \"adamw\"\n");
        let err = set(&mut t, "compile.optimizer.learning_rate", 0.01.into()).unwrap_err();
        assert!(
            err.contains("compile.optimizer is the string \"adamw\""),
            "{err}"
        );
        assert!(err.contains("{ type = \"AdamW\" }"), "{err}");
        // Nothing was changed.
        assert_eq!(
            get(&t, "compile.optimizer").unwrap().as_str(),
            Some("adamw")
        );
    }

    #[test]
    fn an_index_past_the_end_names_the_length() {
        let mut t = table("[model]\nlayers = [{ type = \"Input\" }, { type = \"Flatten\" }]\n");
        let err = set(&mut t, "model.layers[2].units", 8.into()).unwrap_err();
        assert!(
            err.contains("model.layers has 2 elements (indices 0..1)"),
            "{err}"
        );
        let err = set(&mut t, "model[0]", 8.into()).unwrap_err();
        assert!(err.contains("model is a table, not an array"), "{err}");
    }

    #[test]
    fn malformed_paths_are_refused() {
        let mut t = toml::Table::new();
        for bad in ["", "a..b", "a[x]", "a[1", "a[1]b"] {
            let err = set(&mut t, bad, 1.into()).unwrap_err();
            assert!(err.contains("is not a key path"), "{bad}: {err}");
        }
        assert!(get(&t, "a").is_none());
    }
}
