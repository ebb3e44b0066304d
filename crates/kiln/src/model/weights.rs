//! Weights files: safetensors (https://github.com/huggingface/safetensors) with one tensor per
//! layer weight, named and laid out as Keras names and lays them out:
//! `dense/kernel [in, units]`, `dense/bias [units]`, `conv2d/kernel [kh, kw, in, filters]`,
//! `batch_normalization/{gamma, beta, moving_mean, moving_variance} [channels]`,
//! `embedding/embeddings [input_dim, output_dim]`, `multi_head_attention/query/kernel
//! [features, heads, key_dim]` … `attention_output/bias [features]`, and keras_hub's sublayer
//! names inside a `TransformerEncoder` (`transformer_encoder/self_attention_layer/query/kernel`,
//! `…/feedforward_layer_norm/gamma`; see `network_ext::weight_names`).
//! Files are written to a temporary name and renamed, so a crash never leaves a torn file.

use std::collections::HashMap;
use std::path::Path;

use burn::prelude::*;
use safetensors::tensor::{Dtype, TensorView};

use super::network::Network;
use super::params::LayerParams;
use super::spec::ModelSpec;
use crate::error::{KilnError, Result};

/// Where weights come from: `get(name, keras_shape)` returns the values of tensor `name`
/// (Keras' name and layout, row-major float32) or an error when it is missing or mismatched.
pub type WeightSource<'a> = dyn Fn(&str, &[usize]) -> Result<Vec<f32>> + 'a;

pub use super::params::{hwio_to_oihw, oihw_to_hwio};

/// Every weight as `(name, Keras shape, values)`, in layer order.
pub fn keras_weights(spec: &ModelSpec, net: &Network) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut out = Vec::new();
    for (i, (layer, p)) in spec.layers().iter().zip(&net.layers).enumerate() {
        for (w, slot) in spec.own_weights(i) {
            let values = p
                .keras_flat(slot, &w)
                .into_data()
                .convert::<f32>()
                .try_to_vec::<f32>()
                .expect("float parameters convert to f32");
            out.push((format!("{}/{}", layer.name, w.name), w.shape, values));
        }
    }
    out
}

/// Saves the network's weights to `path` (safetensors, float32, Keras names and layouts).
///
/// # Errors
/// [`KilnError::Io`] when the file cannot be written.
pub fn save(spec: &ModelSpec, net: &Network, path: &Path) -> Result<()> {
    let weights = keras_weights(spec, net);
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = weights
        .into_iter()
        .map(|(n, s, v)| (n, s, v.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views = bytes
        .iter()
        .map(|(n, s, b)| {
            let view = TensorView::new(Dtype::F32, s.clone(), b).expect("shape matches data");
            (n.clone(), view)
        })
        .collect::<Vec<_>>();
    let meta = HashMap::from([("format".to_string(), "kiln-keras-layout".to_string())]);
    let data = safetensors::serialize(views, Some(meta)).map_err(|e| KilnError::Weights {
        path: path.into(),
        message: e.to_string(),
    })?;
    crate::files::write_atomic(path, &data)
}

/// Loads weights saved by [`save`] into a freshly initialized network for `spec`.
///
/// # Errors
/// [`KilnError::Weights`] naming the tensor when one is missing, has another shape or dtype, or
/// the file is not safetensors; [`KilnError::Io`] when it cannot be read.
pub fn load(spec: &ModelSpec, path: &Path, device: &Device) -> Result<Network> {
    let bytes = std::fs::read(path).map_err(|e| KilnError::Weights {
        path: path.into(),
        message: format!("cannot read the weights ({e}); train the run again with `kiln train`"),
    })?;
    let file = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| KilnError::Weights {
        path: path.into(),
        message: format!("not a readable safetensors file: {e}"),
    })?;
    let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
        let t = file.tensor(name).map_err(|_| KilnError::Weights {
            path: path.into(),
            message: format!("tensor `{name}` is missing; was this file saved for another model?"),
        })?;
        if t.dtype() != Dtype::F32 || t.shape() != shape {
            return Err(KilnError::Weights {
                path: path.into(),
                message: format!(
                    "tensor `{name}` is {:?} {:?}, the model needs F32 {shape:?}",
                    t.dtype(),
                    t.shape()
                ),
            });
        }
        Ok(t.data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    };
    load_with(spec, device, &get)
}

/// Builds a network for `spec` from weights in Keras' names and layouts, fetched by `get(name,
/// keras_shape)` (e.g. from a map of `keras_weights` output, or from another file format).
///
/// # Errors
/// Whatever `get` returns for a missing or mismatched tensor.
pub fn load_with(spec: &ModelSpec, device: &Device, get: &WeightSource) -> Result<Network> {
    let mut layers = Vec::with_capacity(spec.layers().len());
    for (i, layer) in spec.layers().iter().enumerate() {
        let mut p = LayerParams::empty();
        for (w, slot) in spec.own_weights(i) {
            let v = get(&format!("{}/{}", layer.name, w.name), &w.shape)?;
            p.put(slot, &w, v, layer.options.trains(&w), device);
        }
        layers.push(p);
    }
    Ok(Network { layers })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_kernel_layouts_round_trip_and_agree_elementwise() {
        let dims = [2, 3, 4, 5]; // kh, kw, in, out
        let hwio: Vec<f32> = (0..120).map(|v| v as f32).collect();
        let oihw = hwio_to_oihw(&hwio, dims);
        // Element (y=1, x=2, i=3, o=4) lives at ((1*3+2)*4+3)*5+4 = 119 in HWIO and at
        // ((4*4+3)*2+1)*3+2 = 119 -> index in OIHW computed by hand: ((o*in+i)*kh+y)*kw+x.
        assert_eq!(
            oihw[((4 * 4 + 3) * 2 + 1) * 3 + 2],
            hwio[((3 + 2) * 4 + 3) * 5 + 4]
        );
        assert_eq!(oihw_to_hwio(&oihw, [5, 4, 2, 3]), hwio);
    }
}
