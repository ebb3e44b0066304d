//! Memory sizes as people write them: `"16GiB"`, `"8GB"`, `"512MiB"`.

use crate::error::{KilnError, Result};

/// Parses a size: a number (decimals allowed) and a unit `B`, `KB`/`MB`/`GB`/`TB` (powers of
/// 1000) or `KiB`/`MiB`/`GiB`/`TiB` (powers of 1024), case-insensitive, spaces allowed; a bare
/// number is bytes.
///
/// # Errors
/// [`KilnError::Config`] naming `key` when the text is not such a size.
pub fn parse_bytes(text: &str, key: &str) -> Result<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let bad = || {
        KilnError::config(
            key,
            format!("\"{text}\" is not a memory size; write e.g. \"16GiB\", \"8GB\" or \"512MiB\""),
        )
    };
    let value: f64 = number.parse().map_err(|_| bad())?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "tb" | "t" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes < 1.0 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// Formats bytes with binary units and 2 decimals (`"1.50 GiB"`).
pub fn format_bytes(bytes: u64) -> String {
    kiln_data::alloc::human(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_both_unit_systems() {
        assert_eq!(parse_bytes("16GiB", "k").unwrap(), 16 << 30);
        assert_eq!(parse_bytes("8 GB", "k").unwrap(), 8_000_000_000);
        assert_eq!(parse_bytes("1.5gib", "k").unwrap(), 3 << 29);
        assert_eq!(parse_bytes("512MiB", "k").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("4096", "k").unwrap(), 4096);
        let e = parse_bytes("lots", "fit.memory_budget")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("fit.memory_budget") && e.contains("16GiB"),
            "{e}"
        );
        assert!(parse_bytes("0GB", "k").is_err());
        assert_eq!(format_bytes(3 << 29), "1.50 GiB");
        assert_eq!(format_bytes(100), "100 B");
    }
}
