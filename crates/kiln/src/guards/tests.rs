use burn::prelude::Device;
use kiln_data::{Array, Buffer, Dataset, Element};

use super::*;
use crate::batch::{FEATURES, LABELS, to_device_guarded};
use crate::compile::{Compiled, LossKind, LossSpec, OptimizerSpec};
use crate::fit::Model;
use crate::model::{Activation, LayerKind, ModelSpec};

fn f32s(shape: &[usize], values: Vec<f32>) -> Array {
    Array::new(shape.to_vec(), Buffer::F32(values)).unwrap()
}

fn ints(values: Vec<i32>) -> Array {
    Array::new(vec![values.len()], Buffer::I32(values)).unwrap()
}

/// `n` examples of `shape`, values `0.1 * i` in order.
fn ramp(n: usize, shape: &[usize]) -> Array {
    let mut full = vec![n];
    full.extend_from_slice(shape);
    let len: usize = full.iter().product();
    f32s(&full, (0..len).map(|i| i as f32 * 0.1).collect())
}

fn set(a: &Array, flat: usize, v: f32) -> Array {
    let mut values = a.data().to_f32();
    values[flat] = v;
    f32s(a.shape(), values)
}

fn non_finite_error(e: KilnError) -> NonFiniteInput {
    match e {
        KilnError::NonFinite(n) => *n,
        other => panic!("expected NonFinite, got {other}"),
    }
}

#[test]
fn raise_names_the_epoch_index_the_pixel_and_the_value() {
    // Images of 2x3 pixels with 2 channels, 4 per batch. The NaN sits in the second batch,
    // row 2, pixel (row 1, col 2, channel 1): flat index (1 * 3 + 2) * 2 + 1 = 11.
    let mut guard = NumericsGuard::new(CheckNumerics::Raise, DataSplit::Train);
    guard.begin_epoch(1);
    let mut first = Element::new().with(FEATURES, ramp(4, &[2, 3, 2]));
    assert_eq!(guard.admit(&mut first).unwrap().unwrap().first, 0);
    let x = set(&ramp(4, &[2, 3, 2]), 2 * 12 + 11, f32::NAN);
    let mut second = Element::new()
        .with(FEATURES, x)
        .with(LABELS, ints(vec![0; 4]));
    let e = non_finite_error(guard.admit(&mut second).unwrap_err());
    assert_eq!(e.index(), 6);
    assert_eq!((e.origin.batch, e.row, e.flat_index), (1, 2, 11));
    assert_eq!(e.example_shape, vec![2, 3, 2]);
    assert!(e.value.is_nan());
    assert_eq!(
        e.to_string(),
        "check_numerics: example 6 of the train split in epoch 2 (batch 1, row 2) has NaN at \
         pixel [row 1, col 2, channel 1] (flat index 11) of its features (batch component \
         \"x\"). Clean the data (fix the source, or replace such values in a map op), or set \
         `check_numerics = \"skip\"` in [fit] to drop such examples (counted in the \
         `skipped_nonfinite` log)"
    );
}

#[test]
fn raise_reports_the_lowest_row_and_counts_the_rest() {
    // Vectors of 5 features: -Inf at row 1 feature 4 of x, Inf in the float labels of row 0,
    // NaN at row 3 feature 0.
    let x = set(&set(&ramp(4, &[5]), 5 + 4, f32::NEG_INFINITY), 15, f32::NAN);
    let y = set(&ramp(4, &[1]), 0, f32::INFINITY);
    let mut batch = Element::new().with(FEATURES, x).with(LABELS, y);
    let mut guard = NumericsGuard::new(CheckNumerics::Raise, DataSplit::Validation);
    let e = non_finite_error(guard.admit(&mut batch).unwrap_err());
    assert_eq!((e.row, e.component.as_str()), (0, LABELS));
    assert_eq!(e.value, f64::INFINITY);
    assert_eq!((e.values_in_batch, e.examples_in_batch), (3, 3));
    let text = e.to_string();
    assert!(
        text.starts_with(
            "check_numerics: example 0 of the validation split (batch 0, row 0) has inf at \
             feature 0 of its labels (batch component \"y\"); the batch holds 3 non-finite \
             values in 3 examples."
        ),
        "{text}"
    );
    assert_eq!(describe_position(&[5], 4), "feature 4");
    assert_eq!(
        describe_position(&[28, 28], 59),
        "position [2, 3] (flat index 59)"
    );
}

#[test]
fn float64_beyond_float32_range_counts_as_infinite() {
    let x = Array::new(vec![2, 2], Buffer::F64(vec![1.0, 2.0, 3.0, 1e39])).unwrap();
    let mut batch = Element::new().with(FEATURES, x);
    let mut guard = NumericsGuard::new(CheckNumerics::Raise, DataSplit::Test);
    let e = non_finite_error(guard.admit(&mut batch).unwrap_err());
    assert_eq!((e.row, e.flat_index, e.value), (1, 1, 1e39));
    assert!(
        e.to_string()
            .contains("has 1000000000000000000000000000000000000000 (beyond float32's range")
    );
}

#[test]
fn skip_drops_exactly_the_rows_holding_nan_or_inf() {
    let x = set(&set(&ramp(5, &[3]), 3 + 1, f32::NAN), 9 + 2, f32::INFINITY);
    let mut batch = Element::new()
        .with(FEATURES, x.clone())
        .with(LABELS, ints(vec![10, 11, 12, 13, 14]));
    let mut guard = NumericsGuard::new(CheckNumerics::Skip, DataSplit::Train);
    guard.begin_epoch(0);
    let origin = guard.admit(&mut batch).unwrap().unwrap();
    assert_eq!(origin.kept, vec![0, 2, 4]);
    assert_eq!((origin.index(1), origin.original_row(2)), (2, 4));
    let kept_x: Vec<f32> = [0, 2, 4]
        .iter()
        .flat_map(|&r| x.row(r).data().to_f32())
        .collect();
    assert_eq!(batch.get(FEATURES).unwrap(), &f32s(&[3, 3], kept_x));
    assert_eq!(batch.get(LABELS).unwrap(), &ints(vec![10, 12, 14]));
    assert_eq!(guard.skipped(), 2);

    // A batch with nothing left is no step; the count goes on until the epoch ends.
    let mut all_bad = Element::new().with(FEATURES, f32s(&[2, 1], vec![f32::NAN, f32::NAN]));
    assert_eq!(guard.admit(&mut all_bad).unwrap(), None);
    let mut logs = Logs::default();
    guard.report(&mut logs);
    assert_eq!(logs.get(SKIPPED_KEY), Some(4.0));
    guard.begin_epoch(1);
    assert_eq!(guard.skipped(), 0);

    // Off passes everything; predict never drops (its outputs must line up with its inputs).
    for (mode, split) in [
        (CheckNumerics::Off, DataSplit::Train),
        (CheckNumerics::Skip, DataSplit::Predict),
    ] {
        let mut b = Element::new().with(FEATURES, x.clone());
        let mut g = NumericsGuard::new(mode, split);
        assert!(g.admit(&mut b).unwrap().unwrap().kept.is_empty());
        let bits =
            |a: &Array| -> Vec<u32> { a.data().to_f32().iter().map(|v| v.to_bits()).collect() };
        assert_eq!(bits(b.get(FEATURES).unwrap()), bits(&x));
        let mut logs = Logs::default();
        g.report(&mut logs);
        assert_eq!(logs.get(SKIPPED_KEY), None);
    }
}

fn classifier(classes: usize, loss: LossKind) -> (ModelSpec, Compiled) {
    let spec = ModelSpec::builder(&[3])
        .add(LayerKind::from(crate::model::layers::Dense {
            units: classes,
            activation: Activation::Linear,
            use_bias: true,
        }))
        .build()
        .unwrap();
    let compiled = Compiled::new(
        &spec,
        OptimizerSpec::Sgd {
            learning_rate: 0.01.into(),
            momentum: 0.0,
            nesterov: false,
        },
        LossSpec {
            kind: loss,
            from_logits: true,
        },
        &[],
    )
    .unwrap();
    (spec, compiled)
}

#[test]
fn labels_outside_the_classes_name_the_example_value_and_class_count() {
    let (spec, compiled) = classifier(10, LossKind::SparseCategoricalCrossentropy);
    let device = Device::flex();
    let mut guard = NumericsGuard::new(CheckNumerics::Skip, DataSplit::Train);
    guard.begin_epoch(0);
    let mut convert = |x: Array, y: Vec<i32>| {
        let mut el = Element::new().with(FEATURES, x).with(LABELS, ints(y));
        to_device_guarded(&mut el, &spec, &compiled, &device, &mut guard)
    };
    assert_eq!(
        convert(ramp(4, &[3]), vec![0, 9, 3, 4])
            .unwrap()
            .unwrap()
            .size,
        4
    );
    // Row 1 is dropped for its NaN; the label 10 of row 3 is still named by its place in the
    // epoch: 4 + 3.
    let x = set(&ramp(4, &[3]), 3, f32::NAN);
    let e = convert(x, vec![0, 1, 2, 10]).unwrap_err().to_string();
    assert_eq!(
        e,
        "label 10 of example 7 of the train split in epoch 1 (batch 1, row 3) is outside \
         [0, 10): the model has 10 output units (10 classes); fix the labels, or set the last \
         layer's `units` to the number of classes"
    );
    let e = convert(ramp(2, &[3]), vec![-1, 0]).unwrap_err().to_string();
    assert!(
        e.starts_with("label -1 of example 8 of the train split"),
        "{e}"
    );

    // The same check guards integer labels of categorical_crossentropy (one-hot encoded).
    let (spec, compiled) = classifier(3, LossKind::CategoricalCrossentropy);
    let mut el = Element::new()
        .with(FEATURES, ramp(2, &[3]))
        .with(LABELS, ints(vec![2, 3]));
    let e = crate::batch::to_device(&el, &spec, &compiled, &device)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("label 3 of example 1 of the batch is outside [0, 3)"),
        "{e}"
    );
    let mut g = NumericsGuard::new(CheckNumerics::Raise, DataSplit::Test);
    let e = to_device_guarded(&mut el, &spec, &compiled, &device, &mut g)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("label 3 of example 1 of the test split (batch 0, row 1)"),
        "{e}"
    );
}

/// 12 examples of 3 features (NaN at example 5, feature 2) with labels `i % 2`, batches of 4,
/// in order.
fn nan_dataset() -> Dataset {
    let x = set(&ramp(12, &[3]), 5 * 3 + 2, f32::NAN);
    let y = ints((0..12).map(|i| i % 2).collect());
    Dataset::from_tensor_slices(Element::new().with(FEATURES, x).with(LABELS, y))
        .unwrap()
        .batch(4, false)
}

#[test]
fn fit_raises_or_skips_as_configured() {
    let (spec, compiled) = classifier(2, LossKind::SparseCategoricalCrossentropy);
    let data = nan_dataset();
    let mut model = Model::new("m", spec.clone(), compiled.clone(), 1, Device::flex());
    let e = model.fit(&data, None, 1, &mut []).unwrap_err().to_string();
    assert!(
        e.starts_with(
            "check_numerics: example 5 of the train split in epoch 1 (batch 1, row 1) has NaN \
             at feature 2 of its features"
        ),
        "{e}"
    );
    let e = model.evaluate(&data).unwrap_err().to_string();
    assert!(
        e.contains("example 5 of the test split (batch 1, row 1)"),
        "{e}"
    );

    let mut model = Model::new("m", spec, compiled, 1, Device::flex());
    model.set_check_numerics(CheckNumerics::Skip);
    let history = model.fit(&data, Some(&data), 2, &mut []).unwrap();
    assert_eq!(history.history[SKIPPED_KEY], vec![1.0, 1.0]);
    assert_eq!(history.history["val_skipped_nonfinite"], vec![1.0, 1.0]);
    assert!(history.last("loss").unwrap().is_finite());
    assert!(history.last("val_loss").unwrap().is_finite());
    // predict keeps the example: 12 rows, the sixth not finite.
    let (out, units) = model.predict(&data).unwrap();
    assert_eq!((out.len(), units), (24, 2));
    assert!(out[10].is_nan() && out[0].is_finite() && out[12].is_finite());

    model.set_check_numerics(CheckNumerics::Off);
    let logs = model.evaluate(&data).unwrap();
    assert!(logs.get("loss").unwrap().is_nan());
    assert_eq!(logs.get(SKIPPED_KEY), None);
}

#[test]
fn check_numerics_reads_from_fit_config() {
    use crate::config::FitConfig;
    let cfg: FitConfig = toml::from_str("check_numerics = \"skip\"").unwrap();
    assert_eq!(cfg.check_numerics, CheckNumerics::Skip);
    assert_eq!(FitConfig::default().check_numerics, CheckNumerics::Raise);
    let e = toml::from_str::<FitConfig>("check_numerics = \"warn\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("raise") && e.contains("skip") && e.contains("off"),
        "{e}"
    );
}
