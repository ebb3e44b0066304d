//! Known answers for the text and categorical ops, recorded once with Keras 3.15 /
//! TensorFlow 2.21 by tests/reference/text_preprocessing_reference.py.

use std::f32::consts::LN_2;

use super::*;
use crate::element::{Array, Buffer, Element};

const CORPUS: [&str; 4] = [
    "The cat sat on the mat.",
    "The dog ate my homework!",
    "A cat, a dog; and THE bird?",
    "dog dog cat",
];
const QUERY: [&str; 2] = ["the cat ate a fish", "Bird, bird... BIRD!"];

fn strings(values: &[&str]) -> Array {
    let v = values.iter().map(|s| s.as_bytes().to_vec()).collect();
    Array::new(vec![values.len()], Buffer::String(v)).unwrap()
}

fn ints(values: &[i64]) -> Array {
    Array::new(vec![values.len()], Buffer::I64(values.to_vec())).unwrap()
}

fn bytes(values: &[&str]) -> Vec<Vec<u8>> {
    values.iter().map(|s| s.as_bytes().to_vec()).collect()
}

fn close(got: &Array, want: &[f32]) {
    let got = got.data().to_f32();
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "{got:?} vs {want:?}");
    }
}

/// A dataset with one component `"x"` holding each value of `x` as an example.
fn dataset(x: Array) -> crate::Dataset {
    crate::Dataset::from_tensor_slices(Element::new().with("x", x)).unwrap()
}

fn string_options(mode: OutputMode) -> LookupOptions {
    LookupOptions {
        kind: TokenKind::String,
        max_tokens: None,
        num_oov_indices: 1,
        mask_token: None,
        oov_token: b"[UNK]".to_vec(),
        output_mode: mode,
        invert: false,
        pad_to_max_tokens: false,
    }
}

/// TextVectorization adapted on CORPUS.
fn vectorizer(
    mode: OutputMode,
    max_tokens: Option<usize>,
    ngrams: usize,
    length: Option<usize>,
) -> TextVectorization {
    let tokenizer = Tokenizer {
        standardize: Some(Standardize::LowerAndStripPunctuation),
        split: Some(SplitMode::Whitespace),
        ngrams: if ngrams > 1 {
            (1..=ngrams).collect()
        } else {
            vec![]
        },
    };
    let options = LookupOptions {
        max_tokens,
        mask_token: Some(Vec::new()),
        ..string_options(mode)
    };
    let ds = dataset(strings(&CORPUS));
    let (vocab, idf) = options.adapt(tokenizer.documents(&ds, "x")).unwrap();
    TextVectorization {
        tokenizer,
        output_sequence_length: length,
        lookup: Lookup::new(options, vocab, idf).unwrap(),
    }
}

fn vectorize(tv: &TextVectorization) -> Vec<Array> {
    QUERY
        .iter()
        .map(|q| tv.apply(&Array::string_scalar(q.as_bytes())).unwrap())
        .collect()
}

#[test]
fn text_vectorization_int_adapts_and_pads_as_keras() {
    let tv = vectorizer(OutputMode::Int, None, 1, Some(6));
    let want = bytes(&[
        "the", "dog", "cat", "a", "sat", "on", "my", "mat", "homework", "bird", "ate", "and",
    ]);
    assert_eq!(tv.lookup.tokens(), want);
    let out = vectorize(&tv);
    assert_eq!(out[0].data(), &Buffer::I64(vec![2, 4, 12, 5, 1, 0]));
    assert_eq!(out[1].data(), &Buffer::I64(vec![11, 11, 11, 0, 0, 0]));
    assert_eq!(out[0].shape(), &[6]);
}

#[test]
fn text_vectorization_bigrams_keep_ties_in_keras_order() {
    let tv = vectorizer(OutputMode::Int, Some(12), 2, Some(8));
    let want = bytes(&[
        "the", "dog", "cat", "a", "the mat", "the dog", "the cat", "the bird", "sat on", "sat",
    ]);
    assert_eq!(tv.lookup.tokens(), want);
    let out = vectorize(&tv);
    assert_eq!(out[0].data(), &Buffer::I64(vec![2, 4, 1, 5, 1, 8, 1, 1]));
    assert_eq!(out[1].data(), &Buffer::I64(vec![1, 1, 1, 1, 1, 0, 0, 0]));
}

#[test]
fn text_vectorization_multi_hot_count_tf_idf() {
    let tv = vectorizer(OutputMode::MultiHot, Some(10), 1, None);
    let out = vectorize(&tv);
    close(&out[0], &[1., 1., 0., 1., 1., 0., 0., 0., 0., 0.]);
    close(&out[1], &[1., 0., 0., 0., 0., 0., 0., 0., 0., 0.]);
    let tv = vectorizer(OutputMode::Count, Some(10), 1, None);
    let out = vectorize(&tv);
    close(&out[0], &[2., 1., 0., 1., 1., 0., 0., 0., 0., 0.]);
    close(&out[1], &[3., 0., 0., 0., 0., 0., 0., 0., 0., 0.]);
    let tv = vectorizer(OutputMode::TfIdf, Some(10), 1, None);
    let out = vectorize(&tv);
    let (a, b, c) = (LN_2, 1.098_612_3, 0.963_457_35);
    close(
        &Array::new(
            vec![9],
            Buffer::F32(tv.lookup.idf_weights().iter().map(|&w| w as f32).collect()),
        )
        .unwrap(),
        &[a, a, a, b, b, b, b, b, b],
    );
    close(&out[0], &[2.0 * c, a, 0., a, b, 0., 0., 0., 0., 0.]);
    close(&out[1], &[3.0 * c, 0., 0., 0., 0., 0., 0., 0., 0., 0.]);
    // Rebuilt from the recorded vocabulary and weights (what the run directory keeps).
    let again = Lookup::new(
        tv.lookup.options().clone(),
        tv.lookup.tokens().to_vec(),
        Some(tv.lookup.idf_weights()),
    )
    .unwrap();
    assert_eq!(again, tv.lookup);
}

#[test]
fn text_vectorization_pads_to_max_tokens_and_splits_characters() {
    let mut tv = vectorizer(OutputMode::MultiHot, Some(20), 1, None);
    let mut options = tv.lookup.options().clone();
    options.pad_to_max_tokens = true;
    tv.lookup = Lookup::new(options, tv.lookup.tokens().to_vec(), None).unwrap();
    let out = vectorize(&tv);
    let mut want = [0.0f32; 20];
    for i in [0, 1, 3, 4, 11] {
        want[i] = 1.0;
    }
    close(&out[0], &want);
    let mut want = [0.0f32; 20];
    want[10] = 1.0;
    close(&out[1], &want);

    let tokenizer = Tokenizer {
        standardize: Some(Standardize::Lower),
        split: Some(SplitMode::Character),
        ngrams: vec![],
    };
    let options = LookupOptions {
        mask_token: Some(Vec::new()),
        ..string_options(OutputMode::Int)
    };
    let ds = dataset(strings(&["Ab, ba!", "aab"]));
    let (vocab, _) = options.adapt(tokenizer.documents(&ds, "x")).unwrap();
    assert_eq!(vocab, bytes(&["a", "b", ",", "!", " "]));
    let tv = TextVectorization {
        tokenizer,
        output_sequence_length: Some(10),
        lookup: Lookup::new(options, vocab, None).unwrap(),
    };
    let out = tv.apply(&Array::string_scalar("Bad ab")).unwrap();
    assert_eq!(out.data(), &Buffer::I64(vec![3, 2, 1, 6, 2, 3, 0, 0, 0, 0]));
    let out = tv.apply(&Array::string_scalar("zz")).unwrap();
    assert_eq!(out.data(), &Buffer::I64(vec![1, 1, 0, 0, 0, 0, 0, 0, 0, 0]));
}

#[test]
fn string_lookup_forward_oov_invert_and_encodings() {
    let options = string_options(OutputMode::Int);
    let ds = dataset(strings(&["b", "a", "c", "a", "b", "a", "d"]));
    let docs = ds.iter().map(|e| {
        let e = e?;
        Ok(e.require("x")?.data().as_strings().unwrap().to_vec())
    });
    let (vocab, _) = options.adapt(docs).unwrap();
    assert_eq!(vocab, bytes(&["a", "b", "d", "c"]));
    let sl = Lookup::new(options, vocab, None).unwrap();
    let x = Array::new(
        vec![2, 3],
        Buffer::String(bytes(&["a", "d", "zz", "b", "", "c"])),
    )
    .unwrap();
    assert_eq!(
        sl.apply(&x).unwrap().data(),
        &Buffer::I64(vec![1, 3, 0, 2, 0, 4])
    );

    let xyz = bytes(&["x", "y", "z"]);
    let two = LookupOptions {
        num_oov_indices: 2,
        mask_token: Some(Vec::new()),
        ..string_options(OutputMode::Int)
    };
    let sl = Lookup::new(two, xyz.clone(), None).unwrap();
    let out = sl
        .apply(&strings(&["x", "", "q", "w", "z", "hello", "y"]))
        .unwrap();
    assert_eq!(out.data(), &Buffer::I64(vec![3, 0, 2, 2, 5, 1, 4]));

    let inv = LookupOptions {
        invert: true,
        ..string_options(OutputMode::Int)
    };
    let sl = Lookup::new(inv.clone(), xyz.clone(), None).unwrap();
    let out = sl.apply(&ints(&[0, 1, 2, 3, 7])).unwrap();
    assert_eq!(
        out.data(),
        &Buffer::String(bytes(&["[UNK]", "x", "y", "z", "[UNK]"]))
    );
    let masked = LookupOptions {
        mask_token: Some(b"[M]".to_vec()),
        ..inv
    };
    let sl = Lookup::new(masked, xyz.clone(), None).unwrap();
    let out = sl.apply(&ints(&[0, 1, 2, 3, 4])).unwrap();
    assert_eq!(
        out.data(),
        &Buffer::String(bytes(&["[M]", "[UNK]", "x", "y", "z"]))
    );

    let rows = |v: &[&str]| Array::new(vec![3], Buffer::String(bytes(v))).unwrap();
    let sl = Lookup::new(string_options(OutputMode::MultiHot), xyz.clone(), None).unwrap();
    close(
        &sl.apply(&rows(&["x", "q", "x"])).unwrap(),
        &[1., 1., 0., 0.],
    );
    close(
        &sl.apply(&rows(&["z", "z", "y"])).unwrap(),
        &[0., 0., 1., 1.],
    );
    let sl = Lookup::new(string_options(OutputMode::Count), xyz.clone(), None).unwrap();
    close(
        &sl.apply(&rows(&["x", "q", "x"])).unwrap(),
        &[1., 2., 0., 0.],
    );
    close(
        &sl.apply(&rows(&["z", "z", "y"])).unwrap(),
        &[0., 0., 1., 2.],
    );
    let sl = Lookup::new(string_options(OutputMode::OneHot), xyz, None).unwrap();
    let out = sl.apply(&strings(&["y", "q"])).unwrap();
    assert_eq!(out.shape(), &[2, 4]);
    close(&out, &[0., 0., 1., 0., 1., 0., 0., 0.]);

    let tfidf = string_options(OutputMode::TfIdf);
    let docs = [["a", "b", "a"], ["c", "a", "a"], ["b", "b", "d"]];
    let (vocab, idf) = tfidf.adapt(docs.iter().map(|d| Ok(bytes(d)))).unwrap();
    assert_eq!(vocab, bytes(&["a", "b", "d", "c"]));
    let sl = Lookup::new(tfidf, vocab, idf).unwrap();
    close(
        &sl.apply(&rows(&["a", "b", "q"])).unwrap(),
        &[0.804_719, LN_2, LN_2, 0.0, 0.0],
    );
    close(
        &sl.apply(&rows(&["d", "d", "c"])).unwrap(),
        &[0.0, 0.0, 0.0, 1.832_581_5, 0.916_290_76],
    );
}

#[test]
fn integer_lookup_ties_floormod_oov_and_invert() {
    let options = LookupOptions {
        kind: TokenKind::Integer,
        oov_token: b"-1".to_vec(),
        ..string_options(OutputMode::Int)
    };
    let ds = dataset(ints(&[12, 36, 1138, 42, 12, 36, 12]));
    let docs = ds.iter().map(|e| {
        let e = e?;
        Ok(vec![
            e.require("x")?.data().to_i64()[0].to_string().into_bytes(),
        ])
    });
    let (vocab, _) = options.adapt(docs).unwrap();
    assert_eq!(vocab, bytes(&["12", "36", "1138", "42"]));
    let il = Lookup::new(options.clone(), vocab.clone(), None).unwrap();
    let out = il.apply(&ints(&[12, 1138, 7, -1, 0])).unwrap();
    assert_eq!(out.data(), &Buffer::I64(vec![1, 3, 0, 0, 0]));

    let three = LookupOptions {
        num_oov_indices: 3,
        mask_token: Some(b"0".to_vec()),
        ..options.clone()
    };
    let il = Lookup::new(three, vocab.clone(), None).unwrap();
    let out = il.apply(&ints(&[12, 0, 7, 8, 9, 10, -5, 42])).unwrap();
    assert_eq!(out.data(), &Buffer::I64(vec![4, 0, 2, 3, 1, 2, 2, 7]));

    let inv = LookupOptions {
        invert: true,
        ..options
    };
    let il = Lookup::new(inv, vocab, None).unwrap();
    let out = il.apply(&ints(&[0, 1, 2, 3, 4, 9])).unwrap();
    assert_eq!(out.data(), &Buffer::I64(vec![-1, 12, 36, 1138, 42, -1]));
}

const HASHED: [&str; 8] = [
    "",
    "a",
    "cat",
    "The quick brown fox",
    "hello world",
    "0123456789abcdefghij0123456789ABCDEFGHIJ-xyz",
    "é ü 中文",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
];

#[test]
fn fingerprint64_equals_tensorflow() {
    // tf.fingerprint's 8 little-endian bytes for each string.
    let want: [[u8; 8]; 8] = [
        [79, 64, 144, 47, 59, 106, 225, 154],
        [227, 117, 223, 182, 101, 66, 69, 179],
        [216, 142, 125, 181, 58, 148, 207, 209],
        [229, 155, 67, 129, 90, 40, 210, 248],
        [27, 176, 214, 139, 71, 183, 143, 88],
        [212, 109, 138, 208, 226, 9, 254, 94],
        [197, 91, 78, 87, 168, 187, 182, 104],
        [129, 209, 41, 241, 65, 12, 188, 75],
    ];
    for (s, w) in HASHED.iter().zip(want) {
        assert_eq!(fingerprint64(s.as_bytes()), u64::from_le_bytes(w), "{s:?}");
    }
}

fn hashing(num_bins: usize, mask_value: Option<HashValue>, salt: Option<[u64; 2]>) -> Hashing {
    Hashing {
        num_bins,
        mask_value,
        salt,
        output_mode: OutputMode::Int,
    }
}

#[test]
fn hashing_bins_equal_keras() {
    let x = strings(&HASHED);
    let bins = |h: Hashing, x: &Array| h.apply(x).unwrap().data().to_i64();
    assert_eq!(bins(hashing(7, None, None), &x), [6, 5, 0, 3, 0, 3, 5, 2]);
    let mask = Some(HashValue::String(String::new()));
    assert_eq!(bins(hashing(7, mask, None), &x), [0, 4, 3, 2, 4, 3, 6, 4]);
    assert_eq!(
        bins(hashing(1000, None, Some([133, 133])), &x),
        [907, 997, 205, 229, 497, 427, 901, 919]
    );
    assert_eq!(
        bins(hashing(1000, None, Some([7, 11])), &x),
        [847, 380, 716, 667, 914, 686, 347, 286]
    );
    let n = ints(&[0, 1, 7, -3, 42, 123456789, -9000000000]);
    assert_eq!(bins(hashing(13, None, None), &n), [3, 0, 11, 9, 6, 4, 0]);
    let mask = Some(HashValue::Int(0));
    assert_eq!(bins(hashing(13, mask, None), &n), [0, 10, 5, 4, 1, 3, 4]);
    let h = Hashing {
        output_mode: OutputMode::MultiHot,
        ..hashing(5, None, None)
    };
    close(
        &h.apply(&strings(&["a", "cat", "dog"])).unwrap(),
        &[0., 1., 1., 0., 1.],
    );
}

#[test]
fn discretization_bins_and_adapt_equal_keras() {
    let d = Discretization {
        bin_boundaries: vec![0.0, 1.0, 2.5],
        output_mode: OutputMode::Int,
    };
    let x = Array::new(
        vec![7],
        Buffer::F64(vec![-1.0, 0.0, 0.5, 1.0, 2.4, 2.5, 9.0]),
    )
    .unwrap();
    assert_eq!(
        d.apply(&x).unwrap().data(),
        &Buffer::I64(vec![0, 1, 1, 2, 2, 3, 3])
    );
    let d = Discretization {
        output_mode: OutputMode::OneHot,
        ..d
    };
    let x = Array::new(vec![3], Buffer::F32(vec![-1.0, 1.0, 9.0])).unwrap();
    close(
        &d.apply(&x).unwrap(),
        &[1., 0., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1.],
    );

    let data = [
        0.5f32, 3.0, 1.0, 7.0, 2.0, 8.0, 4.0, 6.0, 5.0, 9.0, 2.5, 0.0,
    ];
    let ds = dataset(Array::new(vec![12], Buffer::F32(data.to_vec())).unwrap());
    assert_eq!(
        Discretization::adapt(&ds, "x", 4, 0.01).unwrap(),
        [1.0, 3.0, 6.0]
    );
    let data2: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37) % 5.0).collect();
    let ds = dataset(Array::new(vec![50], Buffer::F32(data2)).unwrap());
    let got = Discretization::adapt(&ds, "x", 3, 0.1).unwrap();
    let want = [1.4733333587646484, 3.013333559036255];
    assert!(
        got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6),
        "{got:?}"
    );
    let empty = dataset(Array::new(vec![0], Buffer::F32(vec![])).unwrap());
    assert!(Discretization::adapt(&empty, "x", 3, 0.1).is_err());
}

#[test]
fn category_encoding_equals_keras() {
    let out = category_encoding(&ints(&[3, 0, 2]), 4, OutputMode::OneHot).unwrap();
    assert_eq!(out.shape(), &[3, 4]);
    close(&out, &[0., 0., 0., 1., 1., 0., 0., 0., 0., 0., 1., 0.]);
    let row = |v: &[i64]| category_encoding(&ints(v), 4, OutputMode::MultiHot).unwrap();
    close(&row(&[0, 1]), &[1., 1., 0., 0.]);
    close(&row(&[0, 0]), &[1., 0., 0., 0.]);
    close(&row(&[3, 1]), &[0., 1., 0., 1.]);
    let out = category_encoding(&ints(&[2, 2, 2]), 4, OutputMode::Count).unwrap();
    close(&out, &[0., 0., 3., 0.]);
    let scalar = Array::scalar(Buffer::I64(vec![1])).unwrap();
    let out = category_encoding(&scalar, 4, OutputMode::OneHot).unwrap();
    assert_eq!(out.shape(), &[4]);
    let err = category_encoding(&ints(&[4]), 4, OutputMode::Count).unwrap_err();
    assert!(err.to_string().contains("outside [0, 4)"), "{err}");
    assert!(category_encoding(&strings(&["a"]), 4, OutputMode::Count).is_err());
}

#[test]
fn string_ops_refuse_numbers_and_numeric_ops_strings() {
    let sl = Lookup::new(string_options(OutputMode::Int), bytes(&["a"]), None).unwrap();
    let err = sl.apply(&ints(&[1])).unwrap_err().to_string();
    assert!(err.contains("string_lookup needs string values"), "{err}");
    let tv = vectorizer(OutputMode::Int, None, 1, Some(3));
    let err = tv.apply(&ints(&[1])).unwrap_err().to_string();
    assert!(err.contains("needs string values"), "{err}");
    let d = Discretization {
        bin_boundaries: vec![0.0],
        output_mode: OutputMode::Int,
    };
    let err = d.apply(&strings(&["a"])).unwrap_err().to_string();
    assert!(err.contains("needs numbers"), "{err}");
    let empty = dataset(Array::new(vec![0], Buffer::String(vec![])).unwrap());
    let tokenizer = tv.tokenizer.clone();
    let opts = tv.lookup.options().clone();
    assert!(opts.adapt(tokenizer.documents(&empty, "x")).is_err());
}
