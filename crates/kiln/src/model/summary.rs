//! `model.summary()`: the table Keras 3 prints (layer, output shape, parameter count, totals).

use super::spec::{ModelSpec, keras_shape};

/// Formats `n` with thousands separators (`34,826`).
pub fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes in Keras' style (`136.04 KB`, 1 KB = 1024 B).
fn size(params: usize) -> String {
    let bytes = params as f64 * 4.0;
    let units = ["B", "KB", "MB", "GB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", units[u])
}

/// The summary of `spec` named `name`, as Keras 3's `model.summary()` lays it out. A shared
/// layer is one row (Keras' `model.layers` lists it once) with its last call's output shape.
pub fn summary(name: &str, spec: &ModelSpec) -> String {
    let n_layers = spec.layers().len();
    let rows: Vec<[String; 3]> = spec
        .layers()
        .iter()
        .enumerate()
        .filter(|(_, l)| l.shares.is_none())
        .map(|(i, l)| {
            let (t, n) = spec.layer_params(i);
            let last_call = (i..n_layers)
                .rfind(|&j| spec.param_owner(j) == i)
                .unwrap_or(i);
            [
                format!("{} ({})", l.name, l.kind.class_name()),
                keras_shape(spec.shape_after(last_call)),
                thousands(t + n),
            ]
        })
        .collect();
    let header = ["Layer (type)", "Output Shape", "Param #"];
    let mut w = [31usize, 22, 13];
    for r in &rows {
        for (k, cell) in r.iter().enumerate() {
            w[k] = w[k].max(cell.chars().count());
        }
    }
    let line = |l: &str, m: &str, r: &str, fill: &str| {
        format!(
            "{l}{}{m}{}{m}{}{r}\n",
            fill.repeat(w[0] + 2),
            fill.repeat(w[1] + 2),
            fill.repeat(w[2] + 2)
        )
    };
    let row = |c: [&str; 3], edge: &str| {
        format!(
            "{edge} {:<a$} {edge} {:<b$} {edge} {:>c$} {edge}\n",
            c[0],
            c[1],
            c[2],
            a = w[0],
            b = w[1],
            c = w[2]
        )
    };
    let mut out = format!("Model: \"{name}\"\n");
    out += &line("┏", "┳", "┓", "━");
    out += &row(header, "┃");
    out += &line("┡", "╇", "┩", "━");
    for (i, r) in rows.iter().enumerate() {
        if i > 0 {
            out += &line("├", "┼", "┤", "─");
        }
        out += &row([&r[0], &r[1], &r[2]], "│");
    }
    out += &line("└", "┴", "┘", "─");
    let (trainable, frozen) = spec.param_count();
    out += &format!(
        " Total params: {} ({})\n Trainable params: {} ({})\n Non-trainable params: {} ({})\n",
        thousands(trainable + frozen),
        size(trainable + frozen),
        thousands(trainable),
        size(trainable),
        thousands(frozen),
        size(frozen)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(25_636_712), "25,636,712");
    }

    #[test]
    fn sizes_match_keras() {
        // Keras prints 34,826 float32 params as "136.04 KB".
        assert_eq!(size(34_826), "136.04 KB");
        assert_eq!(size(0), "0.00 B");
    }
}
