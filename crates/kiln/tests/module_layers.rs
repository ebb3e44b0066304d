//! The crate's modules stand in layers (the list in `src/lib.rs`, "## Layers"): a module uses
//! only modules of the layers above its own. This test reads that list and every non-test
//! source file, and fails on each `crate::` path that points sideways or up, naming the file,
//! the line and the two modules.
//!
//! What counts: `crate::name` anywhere in code (not in comments), and the first names inside
//! `use crate::{...}` groups; a name re-exported at the crate root (`crate::KilnError`) counts
//! as its module. Test code (`*tests.rs` files, `tests/` folders and the `#[cfg(test)] mod`
//! that ends a file) may use any module.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `module -> layer number` from lib.rs' "## Layers" list.
fn layers(lib: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for line in lib.lines() {
        let Some(item) = line.strip_prefix("//! ") else {
            continue;
        };
        let Some((number, rest)) = item.split_once(". ") else {
            continue;
        };
        let Ok(layer) = number.parse::<usize>() else {
            continue;
        };
        let names = rest.split(':').next().unwrap_or("");
        for name in names.split('`').skip(1).step_by(2) {
            out.insert(name.to_string(), layer);
        }
    }
    out
}

/// `Name -> module` for the crate root's `pub use module::{Name, ...}` lines.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in lib.lines() {
        let Some(rest) = line.strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, names)) = rest.split_once("::") else {
            continue;
        };
        for name in names.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !name.is_empty() {
                out.insert(name.to_string(), module.to_string());
            }
        }
    }
    out
}

/// The modules lib.rs declares (`pub mod x;` / `mod x;`).
fn declared(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|l| {
            let l = l.trim_start_matches("pub ");
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect()
}

/// `line` without its `//` comment (a `//` inside a string literal is kept).
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let (mut in_string, mut i) = (false, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'\'' if !in_string && bytes.get(i + 2) == Some(&b'\'') => i += 2,
            b'"' => in_string = !in_string,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
        i += 1;
    }
    line
}

/// The source without the test module that ends it (`#[cfg(test)]` then `mod x {`).
fn without_test_module(src: &str) -> String {
    let lines: Vec<&str> = src.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines[i + 1..]
                    .iter()
                    .find(|l| !l.trim_start().starts_with("#["))
                    .is_some_and(|l| l.trim_start().starts_with("mod ") && l.ends_with('{'))
        })
        .unwrap_or(lines.len());
    lines[..end].join("\n")
}

/// Every `(line number, name)` that a `crate::` path of `code` starts with.
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, raw) in code.lines().enumerate() {
        let line = strip_comment(raw);
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let preceded = rest[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
            rest = &rest[at + "crate::".len()..];
            if preceded {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                out.extend(group_heads(group, code, n).into_iter().map(|h| (n + 1, h)));
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.push((n + 1, name));
            }
        }
    }
    out
}

/// The first names of each entry of a `use crate::{...}` group that starts at `group` (on
/// line `n` of `code`; the group may span lines).
fn group_heads(group: &str, code: &str, n: usize) -> Vec<String> {
    let tail: String = std::iter::once(group.to_string())
        .chain(
            code.lines()
                .skip(n + 1)
                .map(|l| strip_comment(l).to_string()),
        )
        .collect::<Vec<_>>()
        .join(" ");
    let (mut depth, mut heads, mut expecting) = (1, Vec::new(), true);
    let mut word = String::new();
    for c in tail.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        if expecting && depth == 1 && !word.is_empty() {
            heads.push(std::mem::take(&mut word));
            expecting = false;
        }
        word.clear();
        match c {
            '{' => depth += 1,
            '}' if depth == 1 => break,
            '}' => depth -= 1,
            ',' if depth == 1 => expecting = true,
            _ => {}
        }
    }
    heads
}

fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.ends_with("tests.rs") || path.components().any(|c| c.as_os_str() == "tests")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("src entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !is_test_file(&path) {
            out.push(path);
        }
    }
}

/// One line per `crate::` path that breaks the layers: `file:line: a (layer i) uses b (layer j)`.
fn violations(src: &Path) -> Vec<String> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let (layer, roots) = (layers(&lib), root_reexports(&lib));
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut out = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let top = rel.components().next().expect("a path").as_os_str();
        let top = top.to_string_lossy().trim_end_matches(".rs").to_string();
        let Some(&own) = layer.get(&top) else {
            continue; // lib.rs itself
        };
        let code = without_test_module(&std::fs::read_to_string(&file).expect("source"));
        for (line, name) in crate_paths(&code) {
            let target = roots.get(&name).cloned().unwrap_or(name);
            match layer.get(&target) {
                Some(&j) if target != top && j >= own => out.push(format!(
                    "{}:{line}: {top} (layer {own}) uses {target} (layer {j})",
                    rel.display()
                )),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn every_module_uses_only_the_layers_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "{} imports break the layers listed in src/lib.rs (move the type down, or the \
         module up, and update the list):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn every_declared_module_has_a_layer() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("lib.rs");
    let layer = layers(&lib);
    let missing: Vec<String> = declared(&lib)
        .into_iter()
        .filter(|m| !layer.contains_key(m))
        .collect();
    assert!(missing.is_empty(), "modules without a layer: {missing:?}");
    assert!(layer.len() >= 20, "the list was not read: {layer:?}");
}

#[test]
fn the_checker_sees_paths_groups_and_reexports_but_not_comments_or_tests() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path();
    std::fs::write(
        src.join("lib.rs"),
        "//! 1. `low`: bottom.\n//! 2. `mid`, `side`: middle.\n//! 3. `top`: top.\n\
         pub mod low;\npub mod mid;\npub mod side;\npub mod top;\npub use top::Thing;\n",
    )
    .unwrap();
    let files = [
        (
            "low.rs",
            "use crate::top::X; // up\nconst S: &str = \"a//b\"; fn f() { crate::mid::g() }\n",
        ),
        (
            "mid.rs",
            "// crate::top::Y in a comment\nuse crate::{\n    low::A,\n    side::B,\n};\nfn g() -> crate::Thing {}\n",
        ),
        (
            "side.rs",
            "use crate::low::A;\n#[cfg(test)]\nmod tests {\n    use crate::top::T;\n}\n",
        ),
        ("top.rs", "use crate::{low::A, mid::{B, C}};\n"),
        ("top_tests.rs", "use crate::top::Z;\n"),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text).unwrap();
    }
    let mut found = violations(src);
    found.sort();
    assert_eq!(
        found,
        [
            "low.rs:1: low (layer 1) uses top (layer 3)",
            "low.rs:2: low (layer 1) uses mid (layer 2)",
            "mid.rs:2: mid (layer 2) uses side (layer 2)",
            "mid.rs:6: mid (layer 2) uses top (layer 3)",
        ]
    );
}
