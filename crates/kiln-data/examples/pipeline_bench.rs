//! The three bench/data.sh pipelines built with kiln-data directly, as
//! crates/kiln/src/pipeline.rs builds them from bench/configs/data-*.toml: for profiling
//! kiln-data (`perf record`) without building kiln and Burn. Prints examples/s and the
//! per-stage statistics of every epoch.
//!
//!   cargo run --release -p kiln-data --example pipeline_bench -- fmnist|tfrecord|jpeg [epochs]
//!
//! The TFRecord file and the JPEG folder are those `bench/peers/tf_data_bench.py prepare`
//! writes into `${KILN_CACHE_DIR:-$HOME/.cache/kiln}/bench-data`. Unlike the `kiln` binary it
//! uses the system allocator (the CLI uses mimalloc), so absolute rates differ.

use std::path::PathBuf;
use std::time::Instant;

use kiln_data::preprocess::FlipMode;
use kiln_data::sources::{ColorMode, ImageFolderOptions};
use kiln_data::tfrecord::{ExampleSpec, FeatureDType, FeatureSpec};
use kiln_data::{
    AUTOTUNE, BufferSize, Compression, DType, Dataset, Element, Parallelism, Preprocess,
};

fn select(x: &'static str, y: &'static str) -> impl Fn(Element) -> kiln_data::Result<Element> {
    move |mut e| {
        let xs = e.remove(x).unwrap();
        let ys = e.remove(y).unwrap();
        Ok(Element::new().with("x", xs).with("y", ys))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map(String::as_str).unwrap_or("fmnist");
    let epochs: usize = args.get(2).map_or(3, |s| s.parse().unwrap());
    let cache = std::env::var("KILN_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/kiln"))
        .join("bench-data");
    let ds = match which {
        "fmnist" => {
            let dir = PathBuf::from("/usr/share/datasets/fashion-mnist");
            let x = kiln_data::idx::read_idx(&dir.join("train-images-idx3-ubyte.gz")).unwrap();
            let y = kiln_data::idx::read_idx(&dir.join("train-labels-idx1-ubyte.gz")).unwrap();
            Dataset::from_tensor_slices(Element::new().with("image", x).with("label", y))
                .unwrap()
                .preprocess(
                    vec![Preprocess::Rescale {
                        component: "image".into(),
                        scale: 1.0 / 255.0,
                        offset: 0.0,
                    }],
                    42,
                    AUTOTUNE,
                )
                .shuffle(10000, Some(42), true)
                .map(select("image", "label"), Parallelism::Sequential)
        }
        "tfrecord" => {
            let spec = ExampleSpec::new()
                .with("image", FeatureSpec::fixed_len(vec![], FeatureDType::Bytes))
                .with("label", FeatureSpec::fixed_len(vec![], FeatureDType::Int64));
            let c = || "image".to_string();
            Dataset::tfrecord(vec![cache.join("images-100k.tfrecord")], Compression::None)
                .parse_example(spec, AUTOTUNE)
                .preprocess(
                    vec![
                        Preprocess::DecodeRaw {
                            component: c(),
                            out_type: DType::U8,
                            little_endian: true,
                        },
                        Preprocess::Reshape {
                            component: c(),
                            shape: vec![32, 32, 3],
                        },
                        Preprocess::Cast {
                            component: c(),
                            dtype: DType::F32,
                        },
                    ],
                    42,
                    AUTOTUNE,
                )
                .preprocess(
                    vec![Preprocess::RandomFlip {
                        component: c(),
                        mode: FlipMode::Horizontal,
                    }],
                    42,
                    AUTOTUNE,
                )
                .map(select("image", "label"), Parallelism::Sequential)
        }
        _ => {
            let options = ImageFolderOptions {
                color_mode: ColorMode::Rgb,
                shuffle: false,
                num_parallel_calls: AUTOTUNE,
                ..ImageFolderOptions::default()
            };
            Dataset::image_dataset_from_directory(cache.join("jpeg-20k"), options)
                .unwrap()
                .preprocess(
                    vec![Preprocess::Resize {
                        component: "image".into(),
                        height: 64,
                        width: 64,
                    }],
                    42,
                    AUTOTUNE,
                )
                .map(select("image", "label"), Parallelism::Sequential)
        }
    };
    let ds = ds.batch(128, false).prefetch(BufferSize::Autotune);
    for epoch in 0..epochs {
        let start = Instant::now();
        let mut it = ds.iter();
        let mut n = 0;
        for b in it.by_ref() {
            n += b.unwrap().get("x").unwrap().shape()[0];
        }
        let s = start.elapsed().as_secs_f64();
        println!(
            "{which} epoch {epoch}: {n} examples, {:.0}/s\n{}",
            n as f64 / s,
            it.stats()
        );
    }
}
