//! Known-answer tests for the preprocessing ops (Keras / TensorFlow semantics).

// Expected values are copied as Keras prints them (-1.4142135 = -sqrt(2) in float32).
#![allow(clippy::approx_constant)]
// TensorFlow's float32 results are copied with the digits Python prints.
#![allow(clippy::excessive_precision)]

use super::*;
use crate::element::{Array, Buffer, DType, Element};

fn f32s(a: &Array) -> Vec<f32> {
    match a.data() {
        Buffer::F32(v) => v.clone(),
        other => panic!("expected float32, got {}", other.dtype()),
    }
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{got:?} vs {want:?}"
        );
    }
}

fn arr(shape: &[usize], data: Buffer) -> Array {
    Array::new(shape.to_vec(), data).unwrap()
}

/// `[h, w, 1]` image with pixel `(y, x)` = `y * w + x`.
fn counting_image(h: usize, w: usize) -> Array {
    arr(&[h, w, 1], Buffer::U8((0..(h * w) as u8).collect()))
}

#[test]
fn rescale_is_keras_rescaling() {
    // Rescaling(1/255) on uint8 pixels.
    let x = arr(&[3], Buffer::U8(vec![0, 255, 51]));
    let y = rescale(&x, 1.0 / 255.0, 0.0).unwrap();
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(y.shape(), &[3]);
    close(&f32s(&y), &[0.0, 1.0, 0.2]);
    // Rescaling(1/127.5, offset=-1) maps [0, 255] to [-1, 1].
    let y = rescale(&arr(&[2], Buffer::U8(vec![0, 255])), 1.0 / 127.5, -1.0).unwrap();
    close(&f32s(&y), &[-1.0, 1.0]);
    assert!(rescale(&Array::string_scalar("a"), 1.0, 0.0).is_err());
}

#[test]
fn normalization_matches_the_keras_docstring_examples() {
    // Normalization(axis=None).adapt([1, 2, 3, 4, 5]); layer([1, 2, 3]).
    let ds = Dataset::from_elements(
        (1..=5)
            .map(|v| Element::new().with("x", Array::scalar(Buffer::F32(vec![v as f32])).unwrap()))
            .collect(),
    );
    let norm = Normalization::adapt(&ds, "x", vec![]).unwrap();
    assert_eq!((norm.mean(), norm.variance()), (&[3.0][..], &[2.0][..]));
    let y = norm
        .apply(&arr(&[3], Buffer::F32(vec![1.0, 2.0, 3.0])))
        .unwrap();
    close(&f32s(&y), &[-1.414_213_5, -0.707_106_77, 0.0]);

    // Normalization(axis=-1).adapt([[0,7,4],[2,9,6],[0,7,4],[2,9,6]]); layer([[0,7,4]]).
    let rows = [
        [0.0, 7.0, 4.0],
        [2.0, 9.0, 6.0],
        [0.0, 7.0, 4.0],
        [2.0, 9.0, 6.0],
    ];
    let ds = Dataset::from_elements(
        rows.iter()
            .map(|r| Element::new().with("x", arr(&[3], Buffer::F64(r.to_vec()))))
            .collect(),
    );
    let norm = Normalization::adapt(&ds, "x", vec![-1]).unwrap();
    assert_eq!(norm.mean(), &[1.0, 8.0, 5.0]);
    assert_eq!(norm.variance(), &[1.0, 1.0, 1.0]);
    let y = norm
        .apply(&arr(&[3], Buffer::F32(vec![0.0, 7.0, 4.0])))
        .unwrap();
    close(&f32s(&y), &[-1.0, -1.0, -1.0]);

    // Normalization(mean=3., variance=2.) on [[1.], [2.], [3.]] (one example at a time).
    let norm = Normalization::new(vec![-1], vec![3.0], vec![2.0]).unwrap();
    let ys: Vec<f32> = [1.0, 2.0, 3.0]
        .iter()
        .flat_map(|&v| f32s(&norm.apply(&arr(&[1], Buffer::F32(vec![v]))).unwrap()))
        .collect();
    close(&ys, &[-1.414_213_5, -0.707_106_77, 0.0]);
}

#[test]
fn normalization_per_channel_per_pixel_and_zero_variance() {
    // Two 1x2 images with 2 channels: channel 0 holds 0, 2, 4, 6 and channel 1 is constant 5.
    let images = [vec![0u8, 5, 2, 5], vec![4, 5, 6, 5]];
    let ds = Dataset::from_elements(
        images
            .iter()
            .map(|v| Element::new().with("image", arr(&[1, 2, 2], Buffer::U8(v.clone()))))
            .collect(),
    );
    let per_channel = Normalization::adapt(&ds, "image", vec![-1]).unwrap();
    assert_eq!(per_channel.mean(), &[3.0, 5.0]);
    assert_eq!(per_channel.variance(), &[5.0, 0.0]);
    // Channel 1 has variance 0: kiln divides by 1 (Keras by 1e-7), so 7 becomes 7 - 5 = 2.
    let y = per_channel
        .apply(&arr(&[1, 1, 2], Buffer::U8(vec![8, 7])))
        .unwrap();
    close(&f32s(&y), &[5.0 / 5f32.sqrt(), 2.0]);
    // Per pixel (axes 1 and 2 of [batch, 1, 2, 2] = the example's first two axes):
    // pixel 0 sees 0, 5, 4, 5 -> mean 3.5; pixel 1 sees 2, 5, 6, 5 -> mean 4.5.
    let per_pixel = Normalization::adapt(&ds, "image", vec![1, 2]).unwrap();
    assert_eq!(per_pixel.mean(), &[3.5, 4.5]);
    let v = per_pixel.variance();
    assert!(
        (v[0] - 4.25).abs() < 1e-12 && (v[1] - 2.25).abs() < 1e-12,
        "{v:?}"
    );
    // A tiny non-zero variance is floored at Keras' epsilon: (1 - 0) / 1e-7.
    let tiny = Normalization::new(vec![], vec![0.0], vec![1e-20]).unwrap();
    let y = tiny.apply(&arr(&[1], Buffer::F32(vec![1.0]))).unwrap();
    close(&f32s(&y), &[1e7]);
    // Given std instead of variance.
    let s = Normalization::from_std(vec![], vec![1.0], vec![2.0]).unwrap();
    assert_eq!(s.variance(), &[4.0]);
}

#[test]
fn normalization_errors_are_clear() {
    let e = Normalization::new(vec![0], vec![0.0], vec![1.0])
        .unwrap()
        .apply(&arr(&[2], Buffer::F32(vec![1.0, 2.0])))
        .unwrap_err()
        .to_string();
    assert!(e.contains("axis 0 is the batch axis"), "{e}");
    let e = Normalization::new(vec![-1], vec![0.0, 1.0, 2.0], vec![1.0])
        .unwrap()
        .apply(&arr(&[2], Buffer::F32(vec![1.0, 2.0])))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("mean has 3 values but examples of shape [2]"),
        "{e}"
    );
    assert!(Normalization::new(vec![], vec![0.0], vec![-1.0]).is_err());
    assert!(Normalization::new(vec![], vec![0.0, 1.0], vec![1.0, 2.0, 3.0]).is_err());
    let empty = Dataset::from_elements(vec![]);
    let e = Normalization::adapt(&empty, "x", vec![])
        .unwrap_err()
        .to_string();
    assert!(e.contains("no values"), "{e}");
    let strings = Dataset::from_elements(vec![Element::new().with("x", Array::string_scalar("a"))]);
    assert!(Normalization::adapt(&strings, "x", vec![]).is_err());
}

#[test]
fn one_hot_is_tf_one_hot_with_range_checks() {
    let y = one_hot(&arr(&[3], Buffer::I64(vec![1, 0, 2])), 3).unwrap();
    assert_eq!(y.shape(), &[3, 3]);
    assert_eq!(f32s(&y), vec![0., 1., 0., 1., 0., 0., 0., 0., 1.]);
    let y = one_hot(&Array::scalar(Buffer::U8(vec![2])).unwrap(), 4).unwrap();
    assert_eq!(y.shape(), &[4]);
    assert_eq!(f32s(&y), vec![0., 0., 1., 0.]);
    let e = one_hot(&arr(&[2], Buffer::I32(vec![0, 10])), 10)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("class index 10 at position 1 is outside [0, 10)"),
        "{e}"
    );
    assert!(one_hot(&arr(&[1], Buffer::I32(vec![-1])), 3).is_err());
    assert!(one_hot(&arr(&[1], Buffer::F32(vec![1.0])), 3).is_err());
    assert!(one_hot(&arr(&[1], Buffer::I32(vec![0])), 0).is_err());
}

#[test]
fn cast_truncates_wraps_and_saturates_like_tf_cast() {
    let x = arr(&[4], Buffer::F32(vec![-2.7, 2.7, 300.0, f32::NAN]));
    assert_eq!(
        cast(&x, DType::I32).unwrap().data(),
        &Buffer::I32(vec![-2, 2, 300, 0])
    );
    let x = arr(&[2], Buffer::I64(vec![300, -1]));
    assert_eq!(
        cast(&x, DType::U8).unwrap().data(),
        &Buffer::U8(vec![44, 255])
    );
    let x = arr(&[2], Buffer::F32(vec![-1.0, 1e10]));
    assert_eq!(
        cast(&x, DType::U8).unwrap().data(),
        &Buffer::U8(vec![0, 255])
    );
    let x = arr(&[2], Buffer::U8(vec![1, 255]));
    assert_eq!(
        cast(&x, DType::F64).unwrap().data(),
        &Buffer::F64(vec![1.0, 255.0])
    );
    assert_eq!(cast(&x, DType::U8).unwrap(), x);
    assert!(cast(&Array::string_scalar("1"), DType::F32).is_err());
    assert!(cast(&x, DType::String).is_err());
    assert_eq!(
        cast(&Array::string_scalar("1"), DType::String).unwrap(),
        Array::string_scalar("1")
    );
}

#[test]
fn reshape_infers_one_size() {
    let x = arr(&[2, 3], Buffer::I32((0..6).collect()));
    assert_eq!(reshape(&x, &[-1]).unwrap().shape(), &[6]);
    assert_eq!(reshape(&x, &[3, -1]).unwrap().shape(), &[3, 2]);
    assert_eq!(reshape(&x, &[1, 6, 1]).unwrap().data(), x.data());
    assert_eq!(
        reshape(&arr(&[1], Buffer::I32(vec![7])), &[])
            .unwrap()
            .shape(),
        &[] as &[usize]
    );
    let e = reshape(&x, &[4, -1]).unwrap_err().to_string();
    assert!(e.contains("6 is not a multiple of 4"), "{e}");
    assert!(reshape(&x, &[-1, -1]).is_err());
    assert!(reshape(&x, &[5]).is_err());
    assert!(reshape(&x, &[-2, 3]).is_err());
}

#[test]
fn flip_and_crop_move_the_right_pixels() {
    // 2x3 image: rows [0 1 2], [3 4 5].
    let x = counting_image(2, 3);
    assert_eq!(
        flip(&x, true, false).unwrap().data(),
        &Buffer::U8(vec![2, 1, 0, 5, 4, 3])
    );
    assert_eq!(
        flip(&x, false, true).unwrap().data(),
        &Buffer::U8(vec![3, 4, 5, 0, 1, 2])
    );
    assert_eq!(
        flip(&x, true, true).unwrap().data(),
        &Buffer::U8(vec![5, 4, 3, 2, 1, 0])
    );
    assert_eq!(flip(&x, false, false).unwrap(), x);
    // Channels move together; a rank-2 image keeps its rank.
    let rgb = arr(&[1, 2, 2], Buffer::F32(vec![1.0, 2.0, 3.0, 4.0]));
    assert_eq!(
        flip(&rgb, true, false).unwrap().data(),
        &Buffer::F32(vec![3.0, 4.0, 1.0, 2.0])
    );
    let gray = arr(&[2, 2], Buffer::I64(vec![1, 2, 3, 4]));
    assert_eq!(flip(&gray, true, false).unwrap().shape(), &[2, 2]);

    // 4x4 image, 2x3 window at (1, 1): rows 5 6 7 / 9 10 11.
    let x = counting_image(4, 4);
    let c = crop(&x, 1, 1, 2, 3).unwrap();
    assert_eq!(c.shape(), &[2, 3, 1]);
    assert_eq!(c.data(), &Buffer::U8(vec![5, 6, 7, 9, 10, 11]));
    assert!(crop(&x, 3, 0, 2, 2).is_err());
    let e = flip(&arr(&[4], Buffer::U8(vec![0; 4])), true, false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("expected an image of shape [height, width, channels]"),
        "{e}"
    );
}

#[test]
fn resize_matches_tf_image_resize_bilinear() {
    // tf.image.resize([[0, 1], [2, 3]] as [2, 2, 1], (4, 4)).
    let x = arr(&[2, 2, 1], Buffer::U8(vec![0, 1, 2, 3]));
    let y = resize_bilinear(&x, 4, 4).unwrap();
    assert_eq!(y.shape(), &[4, 4, 1]);
    close(
        &f32s(&y),
        &[
            0.0, 0.25, 0.75, 1.0, 0.5, 0.75, 1.25, 1.5, 1.5, 1.75, 2.25, 2.5, 2.0, 2.25, 2.75, 3.0,
        ],
    );
    // Downsampling 1x4 [0, 10, 20, 30] to 1x2 samples 0.5 and 2.5: [5, 25].
    let y = resize_bilinear(&arr(&[1, 4], Buffer::F32(vec![0., 10., 20., 30.])), 1, 2).unwrap();
    assert_eq!(y.shape(), &[1, 2]);
    close(&f32s(&y), &[5.0, 25.0]);
    // Channels are interpolated independently; same size is the identity.
    let rgb = arr(&[1, 2, 2], Buffer::F32(vec![0., 100., 10., 200.]));
    close(
        &f32s(&resize_bilinear(&rgb, 1, 2).unwrap()),
        &[0., 100., 10., 200.],
    );
    close(&f32s(&resize_bilinear(&rgb, 1, 1).unwrap()), &[5., 150.]);
    assert!(resize_bilinear(&x, 0, 4).is_err());
    assert!(resize_bilinear(&Array::string_scalar("img"), 2, 2).is_err());
}

#[test]
fn stack_packs_columns_as_float32() {
    let a = Array::scalar(Buffer::I32(vec![1])).unwrap();
    let b = Array::scalar(Buffer::F64(vec![2.5])).unwrap();
    let s = stack(&[&a, &b]).unwrap();
    assert_eq!(s.shape(), &[2]);
    assert_eq!(f32s(&s), vec![1.0, 2.5]);
    let a = arr(&[2], Buffer::U8(vec![1, 2]));
    let b = arr(&[2], Buffer::U8(vec![3, 4]));
    let s = stack(&[&a, &b]).unwrap();
    assert_eq!(
        (s.shape(), f32s(&s)),
        (&[2, 2][..], vec![1.0, 3.0, 2.0, 4.0])
    );
    assert!(stack(&[&a, &Array::scalar(Buffer::U8(vec![1])).unwrap()]).is_err());
    assert!(stack(&[]).is_err());
}

#[test]
fn preprocess_ops_name_the_op_and_component_in_errors() {
    let el = Element::new()
        .with("image", counting_image(2, 2))
        .with("name", Array::string_scalar("cat"));
    let op = Preprocess::Rescale {
        component: "name".into(),
        scale: 0.5,
        offset: 0.0,
    };
    let e = op.apply(el.clone(), None).unwrap_err().to_string();
    assert_eq!(
        e,
        "preprocessing op rescale on component \"name\": cannot rescale string values; parse \
         them to numbers first"
    );
    let op = Preprocess::OneHot {
        component: "label".into(),
        depth: 3,
    };
    assert!(matches!(
        op.apply(el.clone(), None),
        Err(DataError::MissingComponent { .. })
    ));
    let crop = Preprocess::RandomCrop {
        component: "image".into(),
        height: 3,
        width: 1,
    };
    let e = crop.apply(el.clone(), None).unwrap_err().to_string();
    assert!(
        e.contains("random_crop") && e.contains("smaller than the 3x1 crop"),
        "{e}"
    );
    // Inference: the central window, and no flip.
    let center = Preprocess::RandomCrop {
        component: "image".into(),
        height: 2,
        width: 2,
    };
    let big = Element::new().with("image", counting_image(4, 4));
    let out = center.apply(big.clone(), None).unwrap();
    assert_eq!(
        out.get("image").unwrap().data(),
        &Buffer::U8(vec![5, 6, 9, 10])
    );
    let flip = Preprocess::RandomFlip {
        component: "image".into(),
        mode: FlipMode::HorizontalAndVertical,
    };
    assert_eq!(flip.apply(big.clone(), None).unwrap(), big);
    assert!(flip.is_random() && !op.is_random());
    assert_eq!("vertical".parse::<FlipMode>().unwrap(), FlipMode::Vertical);
    assert!("sideways".parse::<FlipMode>().is_err());
}

/// 200 elements `{"image": 1x2 [0, 1], "i": index}`.
fn flips_dataset() -> Dataset {
    Dataset::from_elements(
        (0..200)
            .map(|i| {
                Element::new()
                    .with("image", arr(&[1, 2], Buffer::U8(vec![0, 1])))
                    .with("i", Array::scalar(Buffer::I64(vec![i])).unwrap())
            })
            .collect(),
    )
}

/// For each element, whether its image was flipped.
fn flipped(ds: &Dataset) -> Vec<bool> {
    ds.iter()
        .map(|e| e.unwrap().get("image").unwrap().data() == &Buffer::U8(vec![1, 0]))
        .collect()
}

/// `preprocess_with(..., deterministic = false)`: each element draws from its own position's
/// generator, so element `i` is flipped exactly as in the ordered map, whatever order the
/// elements come out in.
#[test]
fn non_deterministic_random_ops_give_each_element_its_ordered_values() {
    let ops = vec![Preprocess::RandomFlip {
        component: "image".into(),
        mode: FlipMode::Horizontal,
    }];
    let ordered = flips_dataset().preprocess(ops.clone(), 7, Parallelism::Sequential);
    let expected = flipped(&ordered);
    let unordered = flips_dataset().preprocess_with(ops, 7, Parallelism::Fixed(3), false);
    let mut by_index: Vec<(i64, bool)> = unordered
        .iter()
        .map(|e| {
            let e = e.unwrap();
            (
                e.get("i").unwrap().data().to_i64()[0],
                e.get("image").unwrap().data() == &Buffer::U8(vec![1, 0]),
            )
        })
        .collect();
    by_index.sort_unstable();
    let got: Vec<bool> = by_index.iter().map(|&(_, f)| f).collect();
    assert_eq!(by_index.len(), 200);
    assert!(
        by_index
            .iter()
            .enumerate()
            .all(|(k, &(i, _))| i == k as i64)
    );
    assert_eq!(got, expected);
}

#[test]
fn random_ops_are_seeded_per_epoch_and_independent_of_threads() {
    let ops = vec![Preprocess::RandomFlip {
        component: "image".into(),
        mode: FlipMode::Horizontal,
    }];
    let ds = flips_dataset().preprocess(ops.clone(), 7, Parallelism::Sequential);
    let (epoch0, epoch1) = (flipped(&ds), flipped(&ds));
    // About half flip (a fixed draw for seed 7), and the epochs differ.
    let n0 = epoch0.iter().filter(|&&f| f).count();
    assert!((70..=130).contains(&n0), "{n0} of 200 flipped");
    assert_ne!(epoch0, epoch1);
    // Rebuilding with the same seed replays both epochs, whatever the parallelism.
    let again = flips_dataset().preprocess(ops.clone(), 7, Parallelism::Fixed(4));
    assert_eq!(flipped(&again), epoch0);
    assert_eq!(flipped(&again), epoch1);
    // Another seed, other flips; order and the other components are untouched.
    let other = flipped(&flips_dataset().preprocess(ops, 8, Parallelism::Sequential));
    assert_ne!(other, epoch0);
    let order: Vec<i64> = ds
        .iter()
        .map(|e| e.unwrap().get("i").unwrap().data().to_i64()[0])
        .collect();
    assert_eq!(order, (0..200).collect::<Vec<_>>());
    // repeat() starts new iterations: its second pass is a new epoch, too.
    let twice = flipped(
        &flips_dataset()
            .preprocess(
                vec![Preprocess::RandomFlip {
                    component: "image".into(),
                    mode: FlipMode::Horizontal,
                }],
                7,
                Parallelism::Sequential,
            )
            .repeat(Some(2)),
    );
    assert_eq!(twice.len(), 400);
    assert_eq!(&twice[..200], &epoch0[..]);
}

#[test]
fn random_crop_covers_every_offset() {
    // A 1x4 image cropped to 1x2: offsets 0, 1 and 2 each appear, windows are contiguous.
    let ds = Dataset::from_elements(
        (0..60)
            .map(|_| Element::new().with("image", arr(&[1, 4], Buffer::U8(vec![0, 1, 2, 3]))))
            .collect(),
    )
    .preprocess(
        vec![Preprocess::RandomCrop {
            component: "image".into(),
            height: 1,
            width: 2,
        }],
        1,
        Parallelism::Fixed(2),
    );
    let mut seen = [0; 3];
    for e in ds.iter() {
        let v = e.unwrap().get("image").unwrap().data().to_i64();
        assert_eq!(v[1], v[0] + 1, "{v:?}");
        seen[v[0] as usize] += 1;
    }
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
}

#[test]
fn deterministic_ops_chain_in_order() {
    let ds = Dataset::from_elements(vec![
        Element::new()
            .with("image", counting_image(2, 2))
            .with("label", Array::scalar(Buffer::U8(vec![1])).unwrap()),
    ])
    .preprocess(
        vec![
            Preprocess::Rescale {
                component: "image".into(),
                scale: 0.5,
                offset: 0.0,
            },
            Preprocess::Normalize {
                component: "image".into(),
                normalization: Normalization::new(vec![], vec![1.0], vec![0.25]).unwrap(),
            },
            Preprocess::Reshape {
                component: "image".into(),
                shape: vec![-1],
            },
            Preprocess::OneHot {
                component: "label".into(),
                depth: 2,
            },
        ],
        0,
        Parallelism::Sequential,
    );
    let e = ds.iter().next().unwrap().unwrap();
    // (v / 2 - 1) / 0.5 for v = 0, 1, 2, 3.
    let image = e.get("image").unwrap();
    assert_eq!(image.shape(), &[4]);
    close(&f32s(image), &[-2.0, -1.0, 0.0, 1.0]);
    assert_eq!(f32s(e.get("label").unwrap()), vec![0.0, 1.0]);
}

#[test]
fn decode_raw_is_tf_io_decode_raw() {
    // Known answers from tests/reference/decode_raw_reference.py (TensorFlow 2.21).
    let b = Array::string_scalar(vec![1, 0, 0, 0, 0, 1, 0, 0, 255, 255, 255, 255]);
    let y = decode_raw(&b, DType::I32, true).unwrap();
    assert_eq!(
        (y.shape(), y.data()),
        (&[3][..], &Buffer::I32(vec![1, 256, -1]))
    );
    let y = decode_raw(&b, DType::I32, false).unwrap();
    assert_eq!(y.data(), &Buffer::I32(vec![16_777_216, 65_536, -1]));
    // A [2] string array gives [2, 1].
    let two = arr(
        &[2],
        Buffer::String(vec![vec![0, 0, 0x80, 0x3f], vec![0, 0, 0, 0xc0]]),
    );
    let y = decode_raw(&two, DType::F32, true).unwrap();
    assert_eq!(
        (y.shape(), y.data()),
        (&[2, 1][..], &Buffer::F32(vec![1.0, -2.0]))
    );
    let y = decode_raw(&Array::string_scalar(vec![7, 8, 9]), DType::U8, true).unwrap();
    assert_eq!(
        (y.shape(), y.data()),
        (&[3][..], &Buffer::U8(vec![7, 8, 9]))
    );
    // TensorFlow refuses a length that is not a multiple, and values of different lengths.
    let e = decode_raw(&Array::string_scalar(vec![7, 8, 9]), DType::I32, true).unwrap_err();
    assert!(
        e.to_string().contains("3 bytes, not a multiple of 4"),
        "{e}"
    );
    let uneven = arr(&[2], Buffer::String(vec![b"ab".to_vec(), b"abcd".to_vec()]));
    let e = decode_raw(&uneven, DType::U8, true).unwrap_err();
    assert!(
        e.to_string()
            .contains("value 1 has 4 bytes but value 0 has 2"),
        "{e}"
    );
    // A rank-1 uint8 array is one value's bytes (kiln's parse of a bytes feature).
    let y = decode_raw(&arr(&[4], Buffer::U8(vec![0, 1, 0, 0])), DType::I32, true).unwrap();
    assert_eq!((y.shape(), y.data()), (&[1][..], &Buffer::I32(vec![256])));
    assert!(decode_raw(&arr(&[1, 1], Buffer::U8(vec![1])), DType::U8, true).is_err());
    assert!(decode_raw(&arr(&[1], Buffer::F32(vec![1.0])), DType::U8, true).is_err());
    assert!(decode_raw(&b, DType::String, true).is_err());
    // Through Preprocess, with the op and component in the error.
    let op = Preprocess::DecodeRaw {
        component: "image".into(),
        out_type: DType::U8,
        little_endian: true,
    };
    let e = Element::new().with("image", Array::string_scalar(vec![1, 2, 3, 4]));
    let out = op.apply(e, None).unwrap();
    assert_eq!(
        out.get("image").unwrap().data(),
        &Buffer::U8(vec![1, 2, 3, 4])
    );
    let e = Element::new().with("image", arr(&[1], Buffer::F32(vec![1.0])));
    let err = op.apply(e, None).unwrap_err().to_string();
    assert!(err.contains("decode_raw") && err.contains("image"), "{err}");
}

/// The per-pixel definition of bilinear resizing that `resize_bilinear` computes separably:
/// each output value from its four neighbours (`taps` as in image.rs).
fn resize_by_pixel(x: &Array, height: usize, width: usize) -> Vec<f32> {
    let (h, w, c) = match *x.shape() {
        [h, w] => (h, w, 1),
        [h, w, c] => (h, w, c),
        _ => unreachable!(),
    };
    let taps = |out: usize, input: usize| -> Vec<(usize, usize, f32)> {
        let scale = input as f64 / out as f64;
        (0..out)
            .map(|o| {
                let x = ((o as f64 + 0.5) * scale - 0.5).max(0.0);
                let lo = (x.floor() as usize).min(input - 1);
                (lo, (lo + 1).min(input - 1), (x - x.floor()) as f32)
            })
            .collect()
    };
    let src = x.data().to_f32();
    let mut out = Vec::new();
    for &(y0, y1, dy) in &taps(height, h) {
        for &(x0, x1, dx) in &taps(width, w) {
            for ch in 0..c {
                let at = |y: usize, xx: usize| src[(y * w + xx) * c + ch];
                let top = at(y0, x0) + (at(y0, x1) - at(y0, x0)) * dx;
                let bottom = at(y1, x0) + (at(y1, x1) - at(y1, x0)) * dx;
                out.push(top + (bottom - top) * dy);
            }
        }
    }
    out
}

#[test]
fn resize_matches_tf_on_a_multichannel_pattern() {
    // tests/reference/resize_reference.py: pixel (y, x, ch) = (7y + 13x + 29ch) % 256 of a
    // 3x5x2 uint8 image, tf.image.resize to 4x7 and 2x3 (TensorFlow 2.21).
    let (h, w, c) = (3, 5, 2);
    let px: Vec<u8> = (0..h * w * c)
        .map(|i| ((7 * (i / (w * c)) + 13 * (i / c % w) + 29 * (i % c)) % 256) as u8)
        .collect();
    let x = arr(&[h, w, c], Buffer::U8(px));
    let up = [
        0.0,
        29.0,
        7.428_570_7,
        36.428_57,
        16.714_287,
        45.714_287,
        26.0,
        55.0,
        35.285_717,
        64.285_713,
        44.571_43,
        73.571_426,
        52.0,
        81.0,
        4.375,
        33.375,
        11.803_571,
        40.803_57,
        21.089_287,
        50.089_287,
        30.375,
        59.375,
        39.660_717,
        68.660_713,
        48.946_43,
        77.946_426,
        56.375,
        85.375,
        9.625,
        38.625,
        17.053_57,
        46.053_57,
        26.339_287,
        55.339_287,
        35.625,
        64.625,
        44.910_717,
        73.910_713,
        54.196_43,
        83.196_426,
        61.625,
        90.625,
        14.0,
        43.0,
        21.428_57,
        50.428_57,
        30.714_287,
        59.714_287,
        40.0,
        69.0,
        49.285_717,
        78.285_713,
        58.571_43,
        87.571_426,
        66.0,
        95.0,
    ];
    close(&f32s(&resize_bilinear(&x, 4, 7).unwrap()), &up);
    let down = [
        6.083_333, 35.083_332, 27.75, 56.75, 49.416_664, 78.416_664, 16.583_332, 45.583_332, 38.25,
        67.25, 59.916_664, 88.916_664,
    ];
    close(&f32s(&resize_bilinear(&x, 2, 3).unwrap()), &down);
}

#[test]
fn separable_resize_equals_the_per_pixel_definition_exactly() {
    // Up, down, mixed and identity sizes, for uint8, float32 and int64 inputs, rank 2 and 3.
    let pattern = |n: usize| {
        (0..n)
            .map(|i| ((i * 37 + 11) % 251) as u8)
            .collect::<Vec<u8>>()
    };
    let images = [
        arr(&[32, 32, 3], Buffer::U8(pattern(32 * 32 * 3))),
        arr(&[7, 5], Buffer::U8(pattern(35))),
        arr(
            &[9, 4, 2],
            Buffer::F32(pattern(72).iter().map(|&v| f32::from(v) / 7.0).collect()),
        ),
        arr(
            &[6, 6, 1],
            Buffer::I64(pattern(36).iter().map(|&v| i64::from(v) - 100).collect()),
        ),
    ];
    for x in &images {
        for (oh, ow) in [
            (64, 64),
            (3, 2),
            (11, 3),
            (1, 1),
            (x.shape()[0], x.shape()[1]),
        ] {
            let got = resize_bilinear(x, oh, ow).unwrap();
            let mut shape = x.shape().to_vec();
            (shape[0], shape[1]) = (oh, ow);
            assert_eq!(got.shape(), &shape[..]);
            let want = resize_by_pixel(x, oh, ow);
            // Bit for bit: the same float operations in the same order.
            assert_eq!(f32s(&got), want, "{:?} -> {oh}x{ow}", x.shape());
        }
    }
}

#[test]
fn ops_that_reuse_the_buffer_give_what_the_ops_give() {
    // Preprocess::apply moves the component into reshape, decode_raw, same-dtype cast and
    // flip (no copy); the results equal the borrowing functions', and the component keeps
    // its place among the others.
    let image = arr(&[3, 4, 2], Buffer::F32((0..24).map(|v| v as f32).collect()));
    let element = || {
        Element::new()
            .with("a", Array::scalar(Buffer::I64(vec![1])).unwrap())
            .with("image", image.clone())
            .with("z", Array::scalar(Buffer::I64(vec![2])).unwrap())
    };
    let c = || "image".to_string();
    let apply = |op: Preprocess, rng: Option<&mut StdRng>| {
        let out = op.apply(element(), rng).unwrap();
        assert_eq!(out.names().collect::<Vec<_>>(), ["a", "image", "z"]);
        out.get("image").unwrap().clone()
    };
    let shape = vec![4, -1, 3];
    let op = Preprocess::Reshape {
        component: c(),
        shape: shape.clone(),
    };
    assert_eq!(apply(op, None), reshape(&image, &shape).unwrap());
    let op = Preprocess::Cast {
        component: c(),
        dtype: DType::F32,
    };
    assert_eq!(apply(op, None), image);
    // Every flip: the in-place swap equals flip's gather, for odd and even sizes.
    for (h, w) in [(3, 4), (4, 5), (1, 1)] {
        let x = arr(&[h, w, 2], Buffer::U8((0..(h * w * 2) as u8).collect()));
        for (horizontal, vertical) in [(true, false), (false, true), (true, true), (false, false)] {
            assert_eq!(
                image::flip_owned(x.clone(), horizontal, vertical).unwrap(),
                flip(&x, horizontal, vertical).unwrap(),
                "{h}x{w} h={horizontal} v={vertical}"
            );
        }
    }
    let mut rng = <StdRng as rand::SeedableRng>::seed_from_u64(5);
    let op = Preprocess::RandomFlip {
        component: c(),
        mode: FlipMode::HorizontalAndVertical,
    };
    let flipped = apply(op, Some(&mut rng));
    let candidates: Vec<Array> = [(false, false), (true, false), (false, true), (true, true)]
        .iter()
        .map(|&(hz, vt)| flip(&image, hz, vt).unwrap())
        .collect();
    assert!(candidates.contains(&flipped));
    // decode_raw of one value's bytes to uint8 is those bytes; to int32 it decodes.
    let bytes = arr(&[8], Buffer::U8(vec![1, 0, 0, 0, 2, 0, 0, 0]));
    let e = Element::new().with("image", bytes.clone());
    let op = Preprocess::DecodeRaw {
        component: c(),
        out_type: DType::U8,
        little_endian: true,
    };
    assert_eq!(
        op.apply(e.clone(), None).unwrap().get("image"),
        Some(&bytes)
    );
    let op = Preprocess::DecodeRaw {
        component: c(),
        out_type: DType::I32,
        little_endian: true,
    };
    assert_eq!(
        op.apply(e, None).unwrap().get("image").unwrap().data(),
        &Buffer::I32(vec![1, 2])
    );
    // A missing component is still the MissingComponent error.
    let op = Preprocess::Reshape {
        component: "nope".into(),
        shape: vec![-1],
    };
    assert!(matches!(
        op.apply(element(), None),
        Err(DataError::MissingComponent { .. })
    ));
}
