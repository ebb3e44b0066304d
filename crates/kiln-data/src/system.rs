//! What the machine gives this process: cores and available memory (the autotuning budgets' defaults, and the bound [`crate::alloc`] checks sizes against).

use std::path::Path;

/// RAM budget used when the available memory cannot be read (no `/proc/meminfo`, as on
/// macOS or Windows): 2 GiB.
pub(crate) const FALLBACK_RAM_BUDGET: u64 = 2 << 30;

/// Cores this process may run on ([`std::thread::available_parallelism`], which follows
/// affinity masks and cgroup CPU quotas); 1 when unknown.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The most worker threads one parallel `map` (or parse) starts: 8 per core, at least 64.
/// tf.data runs `num_parallel_calls` calls on a shared pool of about one thread per core;
/// kiln-data starts real threads, and far more than the cores only adds switching (or fails:
/// the system refuses threads past its limits).
pub fn max_parallel_calls() -> usize {
    (8 * cores()).max(64)
}

/// The default RAM budget in bytes: half of the memory available to this process — tf.data's
/// `AutotuneOptions.ram_budget` default (50 % of available RAM).
///
/// "Available" is `MemAvailable` of `/proc/meminfo` (the kernel's estimate of memory usable
/// without swapping), lowered to the room left under a cgroup v2 limit
/// (`/sys/fs/cgroup/memory.max` minus `memory.current`) when one is set. Without
/// `/proc/meminfo`, [`FALLBACK_RAM_BUDGET`].
pub(crate) fn default_ram_budget() -> u64 {
    available_memory().map_or(FALLBACK_RAM_BUDGET, |m| m / 2)
}

/// Bytes of memory this process can still get: `MemAvailable`, lowered to a cgroup v2
/// limit's headroom; `None` without `/proc/meminfo`.
pub fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| mem_available(&text))?;
    Some(match cgroup_room(Path::new("/sys/fs/cgroup")) {
        Some(c) => meminfo.min(c),
        None => meminfo,
    })
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes (the file states kB = 1024 bytes, see
/// `proc(5)`); `None` when the line is missing or malformed.
pub(crate) fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemAvailable:"))?;
    let mut fields = line.split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

/// Bytes left under a cgroup v2 memory limit, `None` when unlimited (`max`) or unreadable.
fn cgroup_room(dir: &Path) -> Option<u64> {
    let max = std::fs::read_to_string(dir.join("memory.max")).ok()?;
    let max: u64 = max.trim().parse().ok()?; // "max" (no limit) does not parse
    let current: u64 = std::fs::read_to_string(dir.join("memory.current"))
        .ok()
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(0);
    Some(max.saturating_sub(current))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mem_available_in_kib() {
        let text = "MemTotal:       24684092 kB\nMemFree:         1000 kB\n\
                    MemAvailable:   23265544 kB\nBuffers:  12 kB\n";
        assert_eq!(mem_available(text), Some(23_265_544 * 1024));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: lots kB\n"), None);
        assert_eq!(mem_available("MemAvailable: 7 MB\n"), None);
    }

    #[test]
    fn cgroup_limit_and_unlimited() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(cgroup_room(dir.path()), None);
        std::fs::write(dir.path().join("memory.max"), "max\n").unwrap();
        assert_eq!(cgroup_room(dir.path()), None);
        std::fs::write(dir.path().join("memory.max"), "1000\n").unwrap();
        std::fs::write(dir.path().join("memory.current"), "300\n").unwrap();
        assert_eq!(cgroup_room(dir.path()), Some(700));
    }

    #[test]
    fn defaults_are_positive() {
        assert!(cores() >= 1);
        assert!(default_ram_budget() > 0);
    }
}
