//! probe (temporary)
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let n = LIVE.fetch_add(l.size() as isize, Ordering::Relaxed) + l.size() as isize;
        PEAK.fetch_max(n, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let d = new as isize - l.size() as isize;
        let n = LIVE.fetch_add(d, Ordering::Relaxed) + d;
        PEAK.fetch_max(n, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}
#[global_allocator]
static A: Counting = Counting;

use burn::prelude::*;
use kiln::model::{Act, ModelSpec, Network};

fn probe(name: &str, layers: &str, batch: usize) {
    let spec =
        ModelSpec::from_toml(&toml::from_str(&format!("layers = [{layers}]")).unwrap()).unwrap();
    let device = Device::flex().autodiff();
    let net = Network::init(&spec, 1, &device);
    let shape = spec.input_shape().to_vec();
    let mk = || -> Act {
        match shape.as_slice() {
            [f] => Act::Flat(Tensor::random(
                [batch, *f],
                burn::tensor::Distribution::Uniform(0.0, 3.0),
                &device,
            )),
            [s, f] => Act::Seq(Tensor::random(
                [batch, *s, *f],
                burn::tensor::Distribution::Normal(0.0, 1.0),
                &device,
            )),
            [h, w, c] => Act::Image(Tensor::random(
                [batch, *c, *h, *w],
                burn::tensor::Distribution::Normal(0.0, 1.0),
                &device,
            )),
            _ => unreachable!(),
        }
    };
    // warm up
    {
        let out = net.forward(&spec, mk(), true).output;
        let _ = out.sum().backward();
    }
    let x = mk();
    let l0 = LIVE.load(Ordering::SeqCst);
    PEAK.store(l0, Ordering::SeqCst);
    let out = net.forward(&spec, x, true).output;
    let l1 = LIVE.load(Ordering::SeqCst);
    let peak_fwd = PEAK.load(Ordering::SeqCst);
    let g = out.sum().backward();
    let peak_bwd = PEAK.load(Ordering::SeqCst);
    drop(g);
    let per = |v: isize| (v - l0) as f64 / batch as f64 / 4.0;
    println!(
        "{name:30} kept/ex {:>10.1} floats  fwdpeak {:>10.1}  bwdpeak {:>10.1}",
        per(l1),
        per(peak_fwd),
        per(peak_bwd)
    );
}

#[test]
fn probe_layers() {
    for b in [16, 64, 256] {
        probe(
            &format!("conv relu b{b}"),
            r#"{type="Input",shape=[8,8,4]},{type="Conv2D",filters=16,kernel_size=3,padding="same",activation="relu"}"#,
            b,
        );
        probe(
            &format!("conv relu+dense b{b}"),
            r#"{type="Input",shape=[8,8,4]},{type="Conv2D",filters=16,kernel_size=3,padding="same",activation="relu"},{type="Flatten"},{type="Dense",units=10}"#,
            b,
        );
    }
    let b = 64;
    probe(
        "relu then dense",
        r#"{type="Input",shape=[100]},{type="Dense",units=100},{type="Activation",activation="relu"},{type="Dense",units=10}"#,
        b,
    );
    probe(
        "gelu then dense",
        r#"{type="Input",shape=[100]},{type="Dense",units=100},{type="Activation",activation="gelu"},{type="Dense",units=10}"#,
        b,
    );
    probe(
        "tanh then dense",
        r#"{type="Input",shape=[100]},{type="Dense",units=100},{type="Activation",activation="tanh"},{type="Dense",units=10}"#,
        b,
    );
    probe(
        "bn then dense",
        r#"{type="Input",shape=[100]},{type="Dense",units=100},{type="BatchNormalization"},{type="Dense",units=10}"#,
        b,
    );
    probe(
        "dropout then dense",
        r#"{type="Input",shape=[100]},{type="Dense",units=100},{type="Dropout",rate=0.5},{type="Dense",units=10}"#,
        b,
    );
    probe(
        "ln then dense",
        r#"{type="Input",shape=[100]},{type="Dense",units=100},{type="LayerNormalization"},{type="Dense",units=10}"#,
        b,
    );
    probe(
        "dense relu then dense",
        r#"{type="Input",shape=[100]},{type="Dense",units=100,activation="relu"},{type="Dense",units=10}"#,
        b,
    );
    probe(
        "pool then dense",
        r#"{type="Input",shape=[8,8,16]},{type="Conv2D",filters=16,kernel_size=1},{type="MaxPooling2D"},{type="Flatten"},{type="Dense",units=10}"#,
        b,
    );
    probe(
        "avgpool then dense",
        r#"{type="Input",shape=[8,8,16]},{type="Conv2D",filters=16,kernel_size=1},{type="AveragePooling2D"},{type="Flatten"},{type="Dense",units=10}"#,
        b,
    );
    probe(
        "mha s16",
        r#"{type="Input",shape=[16,32]},{type="Dense",units=32},{type="MultiHeadAttention",num_heads=4,key_dim=8},{type="Cropping1D",cropping=[0,15]}"#,
        b,
    );
    probe(
        "mha s32",
        r#"{type="Input",shape=[32,32]},{type="Dense",units=32},{type="MultiHeadAttention",num_heads=4,key_dim=8},{type="Cropping1D",cropping=[0,31]}"#,
        b,
    );
    probe(
        "mha s32 h8",
        r#"{type="Input",shape=[32,32]},{type="Dense",units=32},{type="MultiHeadAttention",num_heads=8,key_dim=4},{type="Cropping1D",cropping=[0,31]}"#,
        b,
    );
    probe(
        "enc s16",
        r#"{type="Input",shape=[16,32]},{type="Dense",units=32},{type="TransformerEncoder",num_heads=4,intermediate_dim=128,activation="gelu"},{type="Cropping1D",cropping=[0,15]}"#,
        b,
    );
    probe(
        "enc s32",
        r#"{type="Input",shape=[32,32]},{type="Dense",units=32},{type="TransformerEncoder",num_heads=4,intermediate_dim=128,activation="gelu"},{type="Cropping1D",cropping=[0,31]}"#,
        b,
    );
    probe(
        "enc s32 relu",
        r#"{type="Input",shape=[32,32]},{type="Dense",units=32},{type="TransformerEncoder",num_heads=4,intermediate_dim=128},{type="Cropping1D",cropping=[0,31]}"#,
        b,
    );
    probe(
        "crop only",
        r#"{type="Input",shape=[32,32]},{type="Dense",units=32},{type="Cropping1D",cropping=[0,31]}"#,
        b,
    );
    probe(
        "emb+pos+add",
        r#"{type="Input",name="i",shape=[16]},{type="Embedding",name="e",input_dim=3,output_dim=32},{type="PositionEmbedding",name="p",sequence_length=20},{type="Add",inputs=["e","p"]},{type="Cropping1D",cropping=[0,15]}"#,
        b,
    );
}

#[test]
fn probe_step() {
    use kiln::compile::{Compiled, LossKind, LossSpec, OptimizerSpec};
    use kiln_data::{Array, Buffer, Dataset, Element};
    for (opt_name, opt) in [
        ("adam", OptimizerSpec::from_toml(&"adam".into()).unwrap()),
        ("sgd", OptimizerSpec::from_toml(&"sgd".into()).unwrap()),
    ] {
        let spec = ModelSpec::from_toml(&toml::from_str(r#"layers = [{type="Input",shape=[1000]},{type="Dense",units=1000,activation="relu"},{type="Dense",units=1000,activation="relu"},{type="Dense",units=1000,activation="relu"},{type="Dense",units=10}]"#).unwrap()).unwrap();
        let p = spec.param_count().0 as f64;
        let l0 = LIVE.load(Ordering::SeqCst);
        let compiled = Compiled::new(
            &spec,
            opt,
            LossSpec {
                kind: LossKind::SparseCategoricalCrossentropy,
                from_logits: true,
            },
            &[],
        )
        .unwrap();
        let mut model = kiln::Model::new("m", spec, compiled, 1, Device::flex());
        let n = 8;
        let x = Array::new(vec![n, 1000], Buffer::F32(vec![0.5; n * 1000])).unwrap();
        let y = Array::new(vec![n], Buffer::I32(vec![1; n])).unwrap();
        let ds = Dataset::from_tensor_slices(Element::new().with("x", x).with("y", y))
            .unwrap()
            .batch(4, false);
        let l1 = LIVE.load(Ordering::SeqCst);
        PEAK.store(l1, Ordering::SeqCst);
        model.fit(&ds, None, 2, &mut []).unwrap();
        let l2 = LIVE.load(Ordering::SeqCst);
        let peak = PEAK.load(Ordering::SeqCst);
        println!(
            "{opt_name}: params {p}: after init {:.2} B/param, after fit {:.2}, peak {:.2}",
            (l1 - l0) as f64 / p,
            (l2 - l0) as f64 / p,
            (peak - l0) as f64 / p
        );
    }
}
