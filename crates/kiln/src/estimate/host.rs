//! What a CPU run holds besides the model: the dataset in memory and the input pipeline's
//! buffers, and the process's memory as Linux reports it (`/proc/meminfo`,
//! `/proc/self/status`).

use std::io::Read;
use std::path::Path;

use crate::config::RunConfig;

/// Bytes of bookkeeping per element in the shuffle buffer beyond its values (an `Element` map,
/// two `Array`s with their shapes, allocator rounding), measured with `bench/estimate.sh`.
pub const ELEMENT_OVERHEAD: u64 = 900;

/// The in-memory dataset of a `[data]` arrays config (IDX/NPY files read whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostData {
    /// Training examples (before `validation_split`).
    pub train_examples: u64,
    /// Test examples.
    pub test_examples: u64,
    /// Bytes of one example's features as stored (IDX `uint8`: 1 byte per value).
    pub example_bytes: u64,
    /// Values of one example's features (what the pipeline turns into float32).
    pub example_values: u64,
    /// Bytes of one label as stored.
    pub label_bytes: u64,
}

/// Host memory of the input side of `kiln train` with the `[data]` arrays form, in bytes:
/// the four arrays as read; a second copy of the training arrays when `validation_split > 0`
/// (`input::split_last` copies both parts); the shuffle buffer (`shuffle_buffer_size`, default
/// all training examples) holding examples with [`ELEMENT_OVERHEAD`] each; and the batches in
/// flight as float32 (prefetch buffer plus the parallel map's batches: 4 when autotuned).
pub fn input_bytes(d: &HostData, cfg: &RunConfig, batch: usize) -> u64 {
    let per = d.example_bytes + d.label_bytes;
    let arrays = d.train_examples * per + d.test_examples * per;
    let split = if cfg.fit.validation_split > 0.0 {
        d.train_examples * per
    } else {
        0
    };
    let train = ((d.train_examples as f64) * (1.0 - cfg.fit.validation_split)) as u64;
    let shuffle = if cfg.fit.shuffle {
        let buffer = cfg
            .data
            .shuffle_buffer_size
            .map_or(train, |b| (b as u64).min(train));
        buffer * (per + ELEMENT_OVERHEAD)
    } else {
        0
    };
    let prefetch = cfg.data.prefetch.map_or(4, |p| p as u64 + 2);
    let in_flight = prefetch * batch as u64 * (d.example_values * 4 + 8);
    arrays + split + shuffle + in_flight
}

/// The batch a run really uses: `input::pipeline` cuts batches of at most the training set's
/// size (after `validation_split`), when that size is known.
pub fn effective_batch(data: Option<&HostData>, cfg: &RunConfig, batch: usize) -> usize {
    match data {
        Some(d) => {
            let train = ((d.train_examples as f64) * (1.0 - cfg.fit.validation_split)) as usize;
            batch.min(train.max(1))
        }
        None => batch,
    }
}

/// Reads the dataset sizes of a `[data]` arrays config from the IDX or NPY headers (gzip
/// allowed), without reading the data. `None` for pipeline configs or when a file is missing
/// or unreadable (the estimate then covers the model only).
pub fn host_data(cfg: &RunConfig) -> Option<HostData> {
    if cfg.data.uses_pipelines() {
        return None;
    }
    let (train_n, train_vals, train_bytes) = header(&cfg.data.path(&cfg.data.train_images))?;
    let (test_n, _, _) = header(&cfg.data.path(&cfg.data.test_images))?;
    let (_, label_vals, label_bytes) = header(&cfg.data.path(&cfg.data.train_labels))?;
    Some(HostData {
        train_examples: train_n,
        test_examples: test_n,
        example_bytes: train_vals * train_bytes,
        example_values: train_vals,
        label_bytes: label_vals.max(1) * label_bytes,
    })
}

/// `(examples, values per example, bytes per value)` from an IDX (`0x00 0x00 type rank`,
/// big-endian u32 dimensions) or NPY (`\x93NUMPY`, a Python-dict header) file's header.
fn header(path: &Path) -> Option<(u64, u64, u64)> {
    let file = std::fs::File::open(path).ok()?;
    let mut raw = std::io::BufReader::new(file);
    let mut magic = [0u8; 2];
    raw.read_exact(&mut magic).ok()?;
    let chained = std::io::Cursor::new(magic.to_vec()).chain(raw);
    let mut reader: Box<dyn Read> = if magic == [0x1f, 0x8b] {
        Box::new(flate2::read::GzDecoder::new(chained))
    } else {
        Box::new(chained)
    };
    let mut head = [0u8; 4];
    reader.read_exact(&mut head).ok()?;
    if head[0] == 0 && head[1] == 0 {
        let bytes = match head[2] {
            0x08 | 0x09 => 1,
            0x0B => 2,
            0x0C | 0x0D => 4,
            0x0E => 8,
            _ => return None,
        };
        let mut dims = Vec::new();
        for _ in 0..head[3] {
            let mut d = [0u8; 4];
            reader.read_exact(&mut d).ok()?;
            dims.push(u32::from_be_bytes(d) as u64);
        }
        let n = *dims.first()?;
        return Some((n, dims[1..].iter().product(), bytes));
    }
    if &head == b"\x93NUM" {
        let mut rest = [0u8; 6];
        reader.read_exact(&mut rest).ok()?;
        let len = u16::from_le_bytes([rest[4], rest[5]]) as usize;
        let mut text = vec![0u8; len];
        reader.read_exact(&mut text).ok()?;
        let text = String::from_utf8_lossy(&text);
        let descr = text.split("'descr':").nth(1)?;
        let bytes: u64 = descr
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(|c| c.is_ascii_digit())
            .collect::<String>()
            .parse()
            .ok()?;
        let shape = text.split("'shape':").nth(1)?;
        let inner = shape.split('(').nth(1)?.split(')').next()?;
        let dims: Vec<u64> = inner
            .split(',')
            .filter_map(|d| d.trim().parse().ok())
            .collect();
        let n = *dims.first()?;
        return Some((n, dims[1..].iter().product(), bytes));
    }
    None
}

fn proc_kib(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()
        .map(|kib| kib * 1024)
}

/// Memory available for new processes without swapping, in bytes (`MemAvailable` of
/// `/proc/meminfo`, Linux 3.14+); `None` elsewhere.
pub fn mem_available() -> Option<u64> {
    proc_kib("/proc/meminfo", "MemAvailable:")
}

/// This process's resident set size now, in bytes (`VmRSS` of `/proc/self/status`).
pub fn vm_rss() -> Option<u64> {
    proc_kib("/proc/self/status", "VmRSS:")
}

/// This process's peak resident set size, in bytes (`VmHWM` of `/proc/self/status`).
pub fn vm_hwm() -> Option<u64> {
    proc_kib("/proc/self/status", "VmHWM:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_of_idx_and_npy_files() {
        let dir = tempfile::tempdir().unwrap();
        let idx = dir.path().join("x.idx");
        let mut bytes = vec![0, 0, 0x08, 3];
        for d in [5u32, 28, 28] {
            bytes.extend(d.to_be_bytes());
        }
        bytes.extend(vec![0u8; 5 * 784]);
        std::fs::write(&idx, &bytes).unwrap();
        assert_eq!(header(&idx), Some((5, 784, 1)));
        let gz = dir.path().join("x.idx.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, &bytes).unwrap();
        std::fs::write(&gz, enc.finish().unwrap()).unwrap();
        assert_eq!(header(&gz), Some((5, 784, 1)));
        let npy = dir.path().join("x.npy");
        let arr = kiln_data::Array::new(vec![3, 4], kiln_data::Buffer::F32(vec![0.0; 12])).unwrap();
        kiln_data::npy::write_npy(&npy, &arr).unwrap();
        assert_eq!(header(&npy), Some((3, 4, 4)));
        assert!(mem_available().unwrap() > 0 && vm_hwm().unwrap() >= vm_rss().unwrap() / 2);
    }
}
