//! Writes the fixture of `crates/kiln/tests/checkpoint_compat.rs`: the network record of a
//! freshly initialized model with every built-in layer that has weights, as kiln writes it into
//! a checkpoint (`model.bpk`, a Burn record), and the same weights in Keras' names and layouts
//! (`weights.safetensors`). The files in `crates/kiln/tests/data/checkpoint_v1/` were written by
//! kiln at commit 4f0039d, before Dense, Conv2D, BatchNormalization, LayerNormalization,
//! MultiHeadAttention and TransformerEncoder moved onto the `Layer` trait; the test loads them
//! with today's kiln.
//!
//! ```text
//! cargo run --release --workspace --example checkpoint_fixture -- <out dir>
//! ```

use std::path::PathBuf;

use burn::module::Module;
use burn::prelude::Device;
use kiln::model::{ModelSpec, Network, weights};

/// The model: two inputs, every layer kind with weights.
pub const MODEL: &str = r#"
outputs = ["sum"]
layers = [
  { type = "Input", name = "image", shape = [8, 8, 1] },
  { type = "Input", name = "tokens", shape = [4, 8] },
  { type = "Conv2D", filters = 4, kernel_size = 3, activation = "relu", inputs = ["image"] },
  { type = "BatchNormalization" },
  { type = "MaxPooling2D" },
  { type = "Flatten" },
  { type = "Dense", units = 5, name = "image_head" },
  { type = "LayerNormalization", inputs = ["tokens"] },
  { type = "MultiHeadAttention", num_heads = 2, key_dim = 3 },
  { type = "TransformerEncoder", intermediate_dim = 6, num_heads = 2 },
  { type = "Flatten", name = "flatten_tokens" },
  { type = "Dense", units = 5, use_bias = false, name = "token_head" },
  { type = "Add", name = "sum", inputs = ["image_head", "token_head"] },
]
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: checkpoint_fixture <dir>")?,
    );
    std::fs::create_dir_all(&out)?;
    let spec = ModelSpec::from_toml(&toml::from_str(MODEL)?)?;
    let net = Network::init(&spec, 7, &Device::flex());
    let record = net.clone().into_record().into_bytes()?;
    std::fs::write(out.join("model.bpk"), record.to_vec())?;
    weights::save(&spec, &net, &out.join("weights.safetensors"))?;
    println!("wrote {}", out.display());
    Ok(())
}
