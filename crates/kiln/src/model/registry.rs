//! The registry of layer types: Keras class names (and aliases) to [`Registration`]s. The
//! built-in declared layers are listed here, one line each; a program adds its own with
//! [`register`] before reading configs. It sits above `layer` (the trait) and `layers` (the
//! built-in types), and below `spec`, which asks it for a `type` name.

use std::collections::BTreeMap;
use std::sync::RwLock;

use super::layer::{LayerConfig, Registration};

/// The Keras class names that are not [`Layer`] declarations: only `Input`, which computes
/// nothing (see [`known_layer_types`] for every name a config may use).
///
/// [`Layer`]: super::Layer
/// [`known_layer_types`]: super::known_layer_types
pub const LAYER_TYPES: &[&str] = &["Input"];

/// The layer types built into kiln, declared through [`super::Layer`]: one line per type.
fn builtin() -> Vec<Registration> {
    use super::layers::*;
    vec![
        Dense::registration(),
        Conv2D::registration(),
        MaxPooling2D::registration(),
        AveragePooling2D::registration(),
        Flatten::registration(),
        Dropout::registration(),
        BatchNormalization::registration(),
        ActivationLayer::registration(),
        LayerNormalization::registration(),
        MultiHeadAttention::registration(),
        TransformerEncoder::registration(),
        Add::registration(),
        Average::registration(),
        Concatenate::registration(),
        Cropping1D::registration(),
        Cropping2D::registration(),
        Embedding::registration(),
        GlobalAveragePooling1D::registration(),
        GlobalAveragePooling2D::registration(),
        GlobalMaxPooling1D::registration(),
        GlobalMaxPooling2D::registration(),
        Maximum::registration(),
        Minimum::registration(),
        Multiply::registration(),
        Permute::registration(),
        PositionEmbedding::registration(),
        RepeatVector::registration(),
        Reshape::registration(),
        Subtract::registration(),
        UpSampling1D::registration(),
        UpSampling2D::registration(),
        ZeroPadding1D::registration(),
        ZeroPadding2D::registration(),
    ]
}

/// Whether `name` is a built-in layer type (class name or alias).
pub fn is_builtin(name: &str) -> bool {
    builtin()
        .iter()
        .any(|b| b.class_name == name || b.aliases.contains(&name))
}

static REGISTERED: RwLock<BTreeMap<String, Registration>> = RwLock::new(BTreeMap::new());

fn registered() -> std::sync::RwLockReadGuard<'static, BTreeMap<String, Registration>> {
    REGISTERED.read().unwrap_or_else(|e| e.into_inner())
}

/// Registers a user's layer type `L` for TOML configs (by `L::CLASS_NAME` and its aliases),
/// for every config read afterwards in this process.
///
/// # Errors
/// [`crate::KilnError::Config`] when the name (or an alias) is already taken by a built-in
/// layer or an earlier registration.
pub fn register<L: LayerConfig>() -> crate::Result<()> {
    register_entry(L::registration())
}

/// [`register`] for a hand-made [`Registration`].
///
/// # Errors
/// As [`register`].
pub fn register_entry(entry: Registration) -> crate::Result<()> {
    let mut map = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    for name in std::iter::once(entry.class_name).chain(entry.aliases.iter().copied()) {
        let taken = LAYER_TYPES.contains(&name) || is_builtin(name) || map.contains_key(name);
        if taken {
            return Err(crate::KilnError::config(
                "layer registration",
                format!(
                    "a layer type named \"{name}\" is already registered; give {} another name",
                    entry.class_name
                ),
            ));
        }
    }
    for name in std::iter::once(entry.class_name).chain(entry.aliases.iter().copied()) {
        map.insert(name.to_string(), entry);
    }
    Ok(())
}

/// The registration for the TOML `type` name `name` (a class name or an alias).
pub fn lookup(name: &str) -> Option<Registration> {
    builtin()
        .into_iter()
        .find(|b| b.class_name == name || b.aliases.contains(&name))
        .or_else(|| registered().get(name).copied())
}

/// The class names of the layers built into kiln: [`LAYER_TYPES`], then the declared ones.
pub fn builtin_names() -> Vec<&'static str> {
    let declared = builtin().into_iter().map(|b| b.class_name);
    LAYER_TYPES.iter().copied().chain(declared).collect()
}

/// Every declared class name (built in, then registered), for error messages.
pub fn declared_names() -> Vec<String> {
    let mut names: Vec<String> = builtin().iter().map(|b| b.class_name.to_string()).collect();
    names.extend(
        registered()
            .values()
            .map(|r| r.class_name.to_string())
            .filter(|n| !names.contains(n))
            .collect::<Vec<_>>(),
    );
    names.dedup();
    names
}
