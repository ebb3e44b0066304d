//! The random layers draw from the device's seeded generator: the same seed gives the same
//! masks and noise (kiln seeds it from the run's seed at every step), another seed other ones.
//! A test binary of its own, so that no test running alongside draws from the generator
//! between the seeding and the draw.

use burn::prelude::*;
use kiln::model::layers::{GaussianDropout, GaussianNoise, SpatialDropout1D, SpatialDropout2D};
use kiln::model::{Act, LayerKind, ModelSpec, Network};

/// The training output of a one-layer model on ones of `shape`, after seeding the device.
fn draw(layer: LayerKind, shape: &[usize], seed: u64) -> Vec<f32> {
    let spec = ModelSpec::builder(shape).add(layer).build().unwrap();
    let device = Device::flex();
    let net = Network::init(&spec, 0, &device);
    let x = match shape {
        [s, f] => Act::Seq(Tensor::ones([8, *s, *f], &device)),
        [h, w, c] => Act::Image(Tensor::ones([8, *c, *h, *w], &device)),
        _ => Act::Flat(Tensor::ones([8, shape[0]], &device)),
    };
    device.seed(seed);
    let out = net.forward(&spec, x, true).output;
    out.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .unwrap()
}

#[test]
fn the_same_seed_draws_the_same_masks_and_noise() {
    let layers: Vec<(LayerKind, Vec<usize>)> = vec![
        (
            SpatialDropout1D {
                rate: 0.5,
                seed: None,
            }
            .into(),
            vec![4, 6],
        ),
        (
            SpatialDropout2D {
                rate: 0.5,
                seed: Some(1),
            }
            .into(),
            vec![3, 2, 6],
        ),
        (
            GaussianNoise {
                stddev: 0.3,
                seed: None,
            }
            .into(),
            vec![12],
        ),
        (
            GaussianDropout {
                rate: 0.4,
                seed: None,
            }
            .into(),
            vec![12],
        ),
    ];
    for (layer, shape) in layers {
        let first = draw(layer.clone(), &shape, 7);
        assert_eq!(first, draw(layer.clone(), &shape, 7), "{layer:?}");
        assert_ne!(first, draw(layer.clone(), &shape, 8), "{layer:?}");
        assert!(first.iter().any(|&v| v != 1.0), "{layer:?} changed nothing");
    }
}
