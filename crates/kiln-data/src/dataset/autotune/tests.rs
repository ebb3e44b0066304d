//! Autotuning and statistics end to end. Timing-based: each test asserts ranges that hold on a
//! loaded two-core machine (sleeps only ever make the consumer wait longer), and hard bounds
//! (budgets) exactly.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{AutotuneOptions, StageStats};
use crate::dataset::testutil::{collect, range, scalar, values};
use crate::element::{Array, Buffer, Element};
use crate::error::Result;
use crate::{AUTOTUNE, Dataset, Parallelism};

fn budgets(cpu: usize, ram: Option<u64>) -> AutotuneOptions {
    AutotuneOptions {
        cpu_budget: Some(cpu),
        ram_budget: ram,
        ..AutotuneOptions::default()
    }
}

/// `x -> 3x` after sleeping 1.5–2.5 ms (pseudo-random, so results finish out of order).
fn slow_triple(e: Element) -> Result<Element> {
    let v = values(&e)[0];
    let micros = 1500 + (v as u64).wrapping_mul(2_654_435_761) % 1000;
    std::thread::sleep(Duration::from_micros(micros));
    Ok(scalar(3 * v))
}

/// Iterates to the end, returning the values and the final statistics.
fn run(ds: &Dataset) -> (Vec<i64>, super::PipelineStats) {
    let mut it = ds.iter();
    let out = it.by_ref().map(|r| values(&r.unwrap())[0]).collect();
    (out, it.stats())
}

fn stage<'a>(stats: &'a super::PipelineStats, name: &str) -> &'a StageStats {
    stats.stages.iter().find(|s| s.name == name).unwrap()
}

#[test]
fn slow_map_grows_its_workers_and_keeps_the_order() {
    let ds = range(200)
        .map(slow_triple, AUTOTUNE)
        .with_autotune(budgets(4, None));
    let start = Instant::now();
    let (out, stats) = run(&ds);
    let wall = start.elapsed();
    let expected = collect(&range(200).map(slow_triple, Parallelism::Sequential));
    assert_eq!(expected, (0..200).map(|v| 3 * v).collect::<Vec<_>>());
    assert_eq!(out, expected);
    let map = stage(&stats, "map");
    assert!(map.autotuned);
    assert!(
        (2..=4).contains(&map.parallelism) && map.peak_parallelism <= 4,
        "{map:?}"
    );
    assert_eq!(map.buffer, 2 * map.parallelism);
    // 200 elements of ≥ 1.5 ms on one worker would take ≥ 300 ms; more workers were used.
    assert!(map.busy >= Duration::from_millis(300), "{map:?}");
    assert!(map.busy > wall, "busy {:?} vs wall {wall:?}", map.busy);

    // The next epoch starts where this one ended.
    let mut it = ds.iter();
    it.next().unwrap().unwrap();
    assert!(it.stats().stages[0].parallelism >= 2, "{:?}", it.stats());
}

#[test]
fn cpu_budget_of_one_keeps_one_worker() {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (r, p) = (Arc::clone(&running), Arc::clone(&peak));
    let ds = range(60)
        .map(
            move |e| {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                let out = slow_triple(e);
                r.fetch_sub(1, Ordering::SeqCst);
                out
            },
            AUTOTUNE,
        )
        .with_autotune(budgets(1, None));
    let (out, stats) = run(&ds);
    assert_eq!(out, (0..60).map(|v| 3 * v).collect::<Vec<_>>());
    let map = stage(&stats, "map");
    assert_eq!((map.parallelism, map.peak_parallelism), (1, 1), "{map:?}");
    assert_eq!(peak.load(Ordering::SeqCst), 1, "concurrent calls of f");
    // The consumer was starved (it would have grown without the budget).
    assert!(map.waited > Duration::from_millis(40), "{map:?}");
}

#[test]
fn stages_share_the_cpu_budget() {
    let ds = range(80)
        .map(slow_triple, AUTOTUNE)
        .map(slow_triple, AUTOTUNE)
        .with_autotune(budgets(3, None));
    let (out, stats) = run(&ds);
    assert_eq!(out, (0..80).map(|v| 9 * v).collect::<Vec<_>>());
    assert_eq!(stats.stages.len(), 2);
    let total: usize = stats.stages.iter().map(|s| s.parallelism).sum();
    assert!((2..=3).contains(&total), "{stats}");
}

#[test]
fn fast_producer_slow_consumer_stays_small() {
    let ds = range(30)
        .map(|e| Ok(scalar(values(&e)[0] + 1)), AUTOTUNE)
        .prefetch(AUTOTUNE);
    let mut it = ds.iter();
    let mut out = Vec::new();
    for item in it.by_ref() {
        out.push(values(&item.unwrap())[0]);
        std::thread::sleep(Duration::from_millis(10)); // the training step
    }
    assert_eq!(out, (1..=30).collect::<Vec<_>>());
    let stats = it.stats();
    let map = stage(&stats, "map");
    let prefetch = stage(&stats, "prefetch");
    // Idle workers are not added (their busy time is ~0), whatever the scheduler does.
    assert_eq!(map.peak_parallelism, 1, "{stats}");
    // The buffer starts at 1 and only doubles when the consumer starves; the producer has a
    // whole 10 ms step to refill it, so only a long scheduling hiccup on a loaded machine
    // can cause a doubling, and it never gets deep.
    assert!((1..=4).contains(&prefetch.peak_buffer), "{stats}");
    // The caller spent nearly all its time sleeping, not waiting.
    assert!(stats.input_bound_fraction() < 0.5, "{stats}");
}

/// `n` elements of 1 MiB; every 8th takes 30 ms to produce, the others almost no time.
fn bursty_big(n: i64) -> Dataset {
    range(n).map(
        |e| {
            let v = values(&e)[0];
            if v % 8 == 7 {
                std::thread::sleep(Duration::from_millis(30));
            }
            let pixels = Array::new(vec![1 << 20], Buffer::U8(vec![0; 1 << 20]))?;
            Ok(scalar(v).with("pixels", pixels))
        },
        Parallelism::Sequential,
    )
}

/// Consumes with a 2 ms step, checking the order.
fn consume_slowly(ds: &Dataset, n: i64) -> super::PipelineStats {
    let mut it = ds.iter();
    let mut count = 0;
    for (i, item) in it.by_ref().enumerate() {
        assert_eq!(values(&item.unwrap())[0], i as i64);
        std::thread::sleep(Duration::from_millis(2));
        count += 1;
    }
    assert_eq!(count, n);
    it.stats()
}

#[test]
fn ram_budget_bounds_the_prefetch_depth() {
    const MIB: u64 = 1 << 20;
    // Room for 3.5 elements: the depth may reach 3, never 4.
    let tight = bursty_big(128)
        .prefetch(AUTOTUNE)
        .with_autotune(budgets(2, Some(7 * MIB / 2)));
    let stats = consume_slowly(&tight, 128);
    let prefetch = stage(&stats, "prefetch");
    assert!(prefetch.bytes_per_element > MIB, "{prefetch:?}");
    assert!((2..=3).contains(&prefetch.peak_buffer), "{stats}");

    // The same pipeline with room to spare grows further: the budget was the limit.
    let roomy = bursty_big(128)
        .prefetch(AUTOTUNE)
        .with_autotune(budgets(2, Some(1 << 30)));
    let stats = consume_slowly(&roomy, 128);
    assert!(stage(&stats, "prefetch").peak_buffer >= 4, "{stats}");
}

#[test]
fn statistics_are_consistent() {
    let ds = range(100)
        .map(
            |e| {
                std::thread::sleep(Duration::from_micros(200));
                Ok(e)
            },
            AUTOTUNE,
        )
        .prefetch(AUTOTUNE);
    let (out, stats) = run(&ds);
    assert_eq!(out, (0..100).collect::<Vec<_>>());
    assert_eq!(stats.elements, 100);
    assert!(stats.waited <= stats.elapsed);
    let names: Vec<&str> = stats.stages.iter().map(|s| s.name).collect();
    assert_eq!(names, ["map", "prefetch"]);
    for s in &stats.stages {
        assert_eq!(s.elements, 100, "{s:?}");
        assert!(s.waited <= stats.elapsed, "{s:?}");
        assert_eq!(s.bytes_per_element, 8, "one i64");
        assert!(s.autotuned);
    }
    let map = stage(&stats, "map");
    // Sleeps last at least as long as asked; busy is summed over at most `peak` workers.
    assert!(map.busy >= Duration::from_millis(20), "{map:?}");
    assert!(
        map.busy <= stats.elapsed * map.peak_parallelism as u32,
        "{map:?}"
    );
    assert_eq!(stage(&stats, "prefetch").parallelism, 1);

    // Stopping early: the caller took 10; prefetch handed over 10; the map ran ahead by at
    // most the prefetch buffer plus the element the producer holds.
    let mut it = ds.iter();
    for _ in 0..10 {
        it.next().unwrap().unwrap();
    }
    let stats = it.stats();
    assert_eq!(stats.elements, 10);
    let prefetch = stage(&stats, "prefetch");
    assert_eq!(prefetch.elements, 10);
    let map = stage(&stats, "map").elements;
    assert!(
        (10..=10 + prefetch.peak_buffer as u64 + 1).contains(&map),
        "{stats}"
    );
}

#[test]
fn fixed_stages_report_their_settings_and_repeats_add_up() {
    let ds = range(10)
        .map(Ok, Parallelism::Fixed(2))
        .repeat(Some(3))
        .map(Ok, Parallelism::Sequential)
        .prefetch(5);
    let (out, stats) = run(&ds);
    assert_eq!(out.len(), 30);
    let s: Vec<(&str, bool, u64, usize)> = stats
        .stages
        .iter()
        .map(|s| (s.name, s.autotuned, s.elements, s.parallelism))
        .collect();
    // In start order: `repeat` starts its input at the first `next` (on the prefetch thread),
    // after the stages downstream of it were built.
    assert_eq!(
        s,
        [
            ("map", false, 30, 0),
            ("prefetch", false, 30, 1),
            ("map", false, 30, 2)
        ]
    );
    // Buffers: none inline, the prefetch's 5, and the parallel map's window of 2 jobs per
    // worker, of 1 to 64 elements each (the job size follows the measured cost).
    assert_eq!((stats.stages[0].buffer, stats.stages[1].buffer), (0, 5));
    let window = stats.stages[2].buffer;
    assert!(window % 4 == 0 && (4..=4 * 64).contains(&window), "{stats}");
    // A sequential map's consumer does the work itself.
    assert_eq!(stats.stages[0].busy, stats.stages[0].waited);
}

#[test]
fn options_and_autotuned_prefetch_do_not_change_the_dataset() {
    let base = range(7).batch(2, false);
    let tuned = base
        .clone()
        .prefetch(AUTOTUNE)
        .with_autotune(budgets(1, Some(1)));
    assert_eq!(tuned.fingerprint(), base.fingerprint());
    assert_eq!(tuned.cardinality(), base.cardinality());
    // A RAM budget below one element still leaves room for one.
    let (out, stats) = run(&tuned.unbatch());
    assert_eq!(out, (0..7).collect::<Vec<_>>());
    assert_eq!(stats.stages[0].peak_buffer, 1);
}

#[test]
fn disabled_autotune_uses_the_static_values() {
    let ds = range(20)
        .map(Ok, AUTOTUNE)
        .prefetch(AUTOTUNE)
        .with_autotune(AutotuneOptions {
            enabled: false,
            ..AutotuneOptions::default()
        });
    let (out, stats) = run(&ds);
    assert_eq!(out, (0..20).collect::<Vec<_>>());
    let map = stage(&stats, "map");
    assert!(!map.autotuned);
    assert_eq!(map.parallelism, AUTOTUNE.workers());
    let prefetch = stage(&stats, "prefetch");
    assert_eq!(
        (prefetch.autotuned, prefetch.buffer),
        (false, Parallelism::DEFAULT_PREFETCH)
    );
    // `prefetch(AUTOTUNE.prefetch_buffer())` is a fixed buffer of the same size.
    let (_, stats) = run(&range(3).prefetch(AUTOTUNE.prefetch_buffer()));
    assert_eq!(stats.stages[0].buffer, 2);
    assert!(!stats.stages[0].autotuned);
}

/// Inner dataset of `x`: four copies of `x`, each taking ~2 ms.
fn slow_inner(e: Element) -> Result<Dataset> {
    let x = values(&e)[0];
    Ok(Dataset::from_elements(vec![scalar(x); 4]).map(slow_triple, Parallelism::Sequential))
}

#[test]
fn interleave_autotunes_within_budget_and_keeps_the_order() {
    let expected = collect(&range(24).interleave(slow_inner, 4, 1, Parallelism::Sequential, true));
    let ds = range(24)
        .interleave(slow_inner, 4, 1, AUTOTUNE, true)
        .with_autotune(budgets(3, None));
    let (out, stats) = run(&ds);
    assert_eq!(out, expected);
    let inter = stage(&stats, "interleave");
    assert!(inter.autotuned);
    assert_eq!(inter.elements, 96);
    assert!((2..=3).contains(&inter.peak_parallelism), "{stats}");
    // Stages inside the inner datasets report into the same iteration.
    let inner_maps: u64 = stats
        .stages
        .iter()
        .filter(|s| s.name == "map")
        .map(|s| s.elements)
        .sum();
    assert_eq!(inner_maps, 96);

    let one = range(12)
        .interleave(slow_inner, 4, 1, AUTOTUNE, false)
        .with_autotune(budgets(1, None));
    let (out, stats) = run(&one);
    assert_eq!(out.len(), 48);
    assert_eq!(stage(&stats, "interleave").peak_parallelism, 1, "{stats}");
}

#[test]
fn stages_inside_wrapping_nodes_join_the_iteration() {
    use crate::tfrecord::{Example, ExampleSpec, Feature, FeatureDType, FeatureSpec, RECORD};
    // map_with_rng and parse_example wrap a whole Dataset; the stages inside them (and
    // upstream of them) belong to the outer iteration: listed in its statistics, and
    // limited by its budgets (one CPU slot: every autotuned map keeps its single worker).
    let records: Vec<Element> = (0..20)
        .map(|i| {
            let bytes = Example::new().with("v", Feature::int64(vec![i])).to_bytes();
            let n = bytes.len();
            Element::new().with(RECORD, Array::new(vec![n], Buffer::U8(bytes)).unwrap())
        })
        .collect();
    let spec = ExampleSpec::new().with("v", FeatureSpec::fixed_len(vec![], FeatureDType::Int64));
    let ds = Dataset::from_elements(records)
        .parse_example(spec, AUTOTUNE)
        .map(
            |mut e| {
                let v = e.remove("v").unwrap();
                Ok(Element::new().with("x", v))
            },
            Parallelism::Fixed(2),
        )
        .map_with_rng(7, |e, _rng| Ok(e), AUTOTUNE)
        .prefetch(AUTOTUNE)
        .with_autotune(budgets(1, None));
    let (out, stats) = run(&ds);
    assert_eq!(out, (0..20).collect::<Vec<_>>());
    let names: Vec<(&str, bool)> = stats.stages.iter().map(|s| (s.name, s.autotuned)).collect();
    assert_eq!(
        names,
        vec![
            ("map", true),
            ("map", false),
            ("map", true),
            ("prefetch", true)
        ],
        "{stats}"
    );
    for s in &stats.stages {
        assert_eq!(s.elements, 20, "{stats}");
        if s.autotuned && s.name == "map" {
            assert_eq!(s.peak_parallelism, 1, "{stats}");
        }
    }
    assert_eq!(stats.stages[1].parallelism, 2);
}
