//! Times `Servable::predict` at several batch sizes on an exported model:
//! `forward_timing VERSION_DIR [batch sizes]` (per-example milliseconds; what request batching
//! can save per request).

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .expect("usage: forward_timing VERSION_DIR [1,8,64]");
    let sizes: Vec<usize> = args
        .next()
        .unwrap_or_else(|| "1,8,64".into())
        .split(',')
        .map(|s| s.parse().expect("batch sizes"))
        .collect();
    let device = kiln::device::resolve(kiln::DeviceKind::Cpu).expect("cpu");
    let s = kiln::export::Servable::load(std::path::Path::new(&dir), device).expect("loads");
    let per: usize = s.input_shape().iter().product();
    for n in sizes {
        let x: Vec<f32> = (0..n * per).map(|i| (i % 255) as f32 / 255.0).collect();
        for _ in 0..5 {
            s.predict(x.clone(), n).unwrap();
        }
        let reps = (2000 / n).max(20);
        let t = std::time::Instant::now();
        for _ in 0..reps {
            s.predict(x.clone(), n).unwrap();
        }
        let ms = t.elapsed().as_secs_f64() * 1e3 / reps as f64;
        println!(
            "batch {n}: {ms:.3} ms per batch, {:.4} ms per example",
            ms / n as f64
        );
    }
}
