//! Exports a freshly initialized model to ONNX and prints kiln's own forward pass on given
//! inputs, for `tests/interop/onnx_serving_interop.py` (which runs the `.onnx` file with
//! onnxruntime on the same inputs): the check for models `kiln predict` cannot run, such as
//! models with several inputs.
//!
//! ```text
//! onnx_forward <config.toml> <out.onnx> <input name>=<file.npy> [...]
//! ```
//!
//! The model is the config's `[model]` with the weights `seed` gives; one `name=file.npy` per
//! `Input` (float32 `[batch, ...Input shape]`). Prints `{"predictions": [[...], ...]}`, one row
//! per example (the output flattened), as `kiln predict` does.

use std::path::{Path, PathBuf};

use burn::prelude::Device;
use kiln::RunConfig;
use kiln::export::onnx;
use kiln::model::weights::keras_weights;
use kiln_data::{Dataset, Element};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, config, out, inputs @ ..] = args.as_slice() else {
        return Err("usage: onnx_forward <config.toml> <out.onnx> <input>=<file.npy> ...".into());
    };
    let cfg = RunConfig::load(Path::new(config))?;
    let model = kiln::Model::new(
        &cfg.name,
        cfg.model.clone(),
        cfg.compile.clone(),
        cfg.seed,
        Device::flex(),
    );
    let weights = keras_weights(model.spec(), model.network());
    std::fs::write(
        PathBuf::from(out),
        onnx::to_bytes(&cfg.name, model.spec(), &weights, 1)?,
    )?;
    let mut element = Element::new();
    let mut count = 0;
    for arg in inputs {
        let (name, file) = arg.split_once('=').ok_or("inputs are <name>=<file.npy>")?;
        let array = kiln_data::npy::read_npy(Path::new(file))?;
        count = array.shape()[0];
        // A model with one Input reads the features component.
        let component = if inputs.len() == 1 { "x" } else { name };
        element = element.with(component, array);
    }
    let ds = Dataset::from_tensor_slices(element)?.batch(count, false);
    let (values, _) = model.predict(&ds)?;
    let per = values.len() / count.max(1);
    let rows: Vec<&[f32]> = values.chunks(per.max(1)).collect();
    println!("{}", serde_json::json!({ "predictions": rows }));
    Ok(())
}
