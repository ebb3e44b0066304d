//! `adapt` for the model's own `Normalization` layers (`adapt = true`): their mean and
//! variance come from `[data.train]`'s component that feeds their `Input`, after the map ops,
//! and are written into the layer's config in the resolved copy of the run's config.

use kiln_data::{Dataset, Normalization as Stats};

use super::{Parts, Split, build_with};
use crate::config::RunConfig;
use crate::error::{KilnError, Result};
use crate::model::layers::{Normalization, OneOrList};
use crate::model::{LayerKind, NodeRef};

/// `cfg` with every model `Normalization` that has `adapt = true` and no statistics yet
/// adapted to the training data.
///
/// # Errors
/// [`KilnError::Config`] naming the layer when it is not fed by an `Input`, the run has no
/// `[data.train]` pipeline, the training data is empty, or the data cannot be adapted.
pub(super) fn adapt_layers(cfg: &mut RunConfig) -> Result<()> {
    for i in 0..cfg.model.layers().len() {
        let Some(layer) = pending(cfg, i) else {
            continue;
        };
        let spec = &cfg.model.layers()[i];
        let key = format!(
            "model.layers[{}] ({})",
            i + cfg.model.inputs().len(),
            spec.name
        );
        let input = match spec.inputs.as_slice() {
            [NodeRef::Input(k)] => *k,
            _ => {
                return Err(KilnError::config(
                    format!("{key}.adapt"),
                    "adapt = true needs the layer's input to be a model Input (its statistics \
                     come from the training data's features); give `mean` and `variance` here",
                ));
            }
        };
        let stats = statistics(cfg, &layer, input).map_err(|e| match e {
            KilnError::Config { message, .. } => KilnError::config(format!("{key}.adapt"), message),
            other => other,
        })?;
        let adapted = Normalization {
            mean: Some(OneOrList::List(stats.mean().to_vec())),
            variance: Some(OneOrList::List(stats.variance().to_vec())),
            adapted: true,
            ..layer
        };
        cfg.model = cfg
            .model
            .clone()
            .with_layer_replaced(i, LayerKind::from(adapted))?;
    }
    Ok(())
}

/// Layer `i` when it is a `Normalization` waiting for adapt.
fn pending(cfg: &RunConfig, i: usize) -> Option<Normalization> {
    let spec = &cfg.model.layers()[i];
    let LayerKind::Declared(l) = &spec.kind else {
        return None;
    };
    if l.class_name() != "Normalization" || spec.shares.is_some() {
        return None;
    }
    let layer: Normalization = toml::Value::Table(l.config()).try_into().ok()?;
    (layer.adapt && !layer.adapted).then_some(layer)
}

/// The statistics of the training data's component for model Input `input`.
fn statistics(cfg: &RunConfig, layer: &Normalization, input: usize) -> Result<Stats> {
    let Some(train) = cfg
        .data
        .train
        .as_ref()
        .filter(|_| cfg.data.uses_pipelines())
    else {
        return Err(KilnError::config(
            "",
            "adapt = true computes the statistics over [data.train], which this run does not \
             describe as a pipeline; give `mean` and `variance`",
        ));
    };
    let component = match crate::batch::input_components(&cfg.model) {
        Some(names) => names[input].clone(),
        None => train.x_name().to_string(),
    };
    let parts = Parts {
        ops_only: Some(train.map.len()),
        ..Parts::default()
    };
    let ds: Dataset = build_with(cfg, Split::Train, parts)?;
    if ds.iter().next().is_none() {
        return Err(KilnError::config("", "adapt: the training data is empty"));
    }
    Stats::adapt(&ds, &component, layer.axis.to_vec())
        .map_err(|e| KilnError::config("", format!("adapt: {e}")))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use kiln_data::{Array, Buffer};

    use crate::config::RunConfig;
    use crate::model::LayerKind;

    /// `x.npy`: `n` examples `[2, 2]` (height 2, width 1, channels 2 as the model sees them)
    /// holding `4 i .. 4 i + 3`; `y.npy`: labels `i % 2`.
    fn write_npy(dir: &Path, n: usize) {
        let x = Array::new(vec![n, 2, 1, 2], Buffer::U8((0..4 * n as u8).collect())).unwrap();
        let y = Array::new(vec![n], Buffer::I64((0..n as i64).map(|i| i % 2).collect())).unwrap();
        kiln_data::npy::write_npy(&dir.join("x.npy"), &x).unwrap();
        kiln_data::npy::write_npy(&dir.join("y.npy"), &y).unwrap();
    }

    fn config(dir: &Path, extra: &str, layers: &str) -> RunConfig {
        let text = format!(
            "name = \"t\"\n[data]\ndata_dir = {:?}\n[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\n{extra}map = [{{ op = \"rescale\", scale = 2.0 }}]\n[model]\nlayers = [{{ type = \"Input\", shape = [2, 1, 2] }}, {layers}, {{ type = \"Flatten\" }}, {{ type = \"Dense\", units = 2 }}]\n[compile]\noptimizer = \"sgd\"\nloss = \"sparse_categorical_crossentropy\"\n",
            dir.display().to_string()
        );
        RunConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    /// The arguments of layer 0 in `cfg`.
    fn first_layer(cfg: &RunConfig) -> toml::Table {
        match &cfg.model.layers()[0].kind {
            LayerKind::Declared(l) => l.config(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_model_normalization_adapts_to_the_training_features_after_the_map_ops() {
        let dir = tempfile::tempdir().unwrap();
        write_npy(dir.path(), 3);
        let cfg = config(
            dir.path(),
            "",
            r#"{ type = "Normalization", adapt = true }"#,
        );
        let resolved = super::super::adapt(&cfg).unwrap();
        // Channel 0 after rescale: 2 * {0, 2, 4, 6, 8, 10} -> mean 10, variance 4 * 35 / 3;
        // channel 1: one more each -> mean 12.
        let t = first_layer(&resolved);
        let values = |k: &str| -> Vec<f64> {
            t[k].as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_float().unwrap())
                .collect()
        };
        assert_eq!(values("mean"), [10.0, 12.0]);
        let v = values("variance");
        assert!(v.iter().all(|v| (v - 140.0 / 3.0).abs() < 1e-9), "{v:?}");
        assert_eq!(t["adapt"].as_bool(), Some(true));
        assert_eq!(t["adapted"].as_bool(), Some(true));
        // The resolved config reads back with the statistics; adapting again keeps them.
        let again = RunConfig::from_toml_str(&resolved.to_toml()).unwrap();
        assert_eq!(again.model, resolved.model);
        assert_eq!(super::super::adapt(&again).unwrap().model, resolved.model);
    }

    #[test]
    fn adapt_errors_name_the_layer() {
        let dir = tempfile::tempdir().unwrap();
        write_npy(dir.path(), 3);
        let norm = r#"{ type = "Normalization", adapt = true, name = "norm" }"#;
        let empty = config(dir.path(), "take = 0\n", norm);
        let e = super::super::adapt(&empty).unwrap_err();
        assert!(e.is_usage());
        assert_eq!(
            e.to_string(),
            "model.layers[1] (norm).adapt: adapt: the training data is empty"
        );
        let fed = config(
            dir.path(),
            "",
            &format!(r#"{{ type = "Rescaling", scale = 1.0 }}, {norm}"#),
        );
        let e = super::super::adapt(&fed).unwrap_err().to_string();
        assert!(
            e.starts_with("model.layers[2] (norm).adapt: adapt = true needs the layer's input to be a model Input"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }
}
