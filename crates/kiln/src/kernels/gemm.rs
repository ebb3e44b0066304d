//! A safe wrapper over the `gemm` crate for the shapes the kernels use, with the
//! micro-kernels of the chosen [`cpu`] path.

use super::cpu::{self, CpuPath};

/// A row-major matrix view: `rows x cols` with element `(i, j)` at `data[i * row_stride +
/// j * col_stride]`. A transposed view swaps the strides.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<'a> View<'a> {
    /// A contiguous row-major `rows x cols` matrix.
    pub fn new(data: &'a [f32], rows: usize, cols: usize) -> View<'a> {
        debug_assert!(data.len() >= rows * cols);
        View {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The transpose (no copy).
    pub fn t(self) -> View<'a> {
        View {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
        }
    }

    /// Rows `start..start + count` (no copy).
    pub fn row_block(self, start: usize, count: usize) -> View<'a> {
        View {
            data: &self.data[(start * self.row_stride).min(self.data.len())..],
            rows: count,
            ..self
        }
    }

    fn max_index(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            0
        } else {
            (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride
        }
    }
}

/// `dst = a @ b` (or `dst += a @ b` with `accumulate`), `dst` contiguous row-major
/// `a.rows x b.cols`, on the calling thread.
///
/// # Panics
/// When the shapes do not chain or a view reaches past its slice.
pub fn matmul(a: View<'_>, b: View<'_>, dst: &mut [f32], accumulate: bool) {
    assert_eq!(a.cols, b.rows, "inner dimensions differ");
    let (m, n, k) = (a.rows, b.cols, a.cols);
    assert!(dst.len() >= m * n, "destination too small");
    assert!(a.max_index() < a.data.len().max(1) && b.max_index() < b.data.len().max(1));
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            dst[..m * n].fill(0.0);
        }
        return;
    }
    if m == 1 && n > 1 {
        // The gemm crate's single-row path sums in another order than its general kernel, so
        // a row would get other low bits alone than with company. Computing it as one row of
        // a two-row product makes every row's result independent of how many rows share the
        // call: a batched `kiln serve` request returns exactly what it gets alone.
        let mut a2 = Vec::with_capacity(2 * k);
        for _ in 0..2 {
            a2.extend((0..k).map(|j| a.data[j * a.col_stride]));
        }
        let mut d2 = vec![0.0f32; 2 * n];
        if accumulate {
            d2[..n].copy_from_slice(&dst[..n]);
        }
        matmul(View::new(&a2, 2, k), b, &mut d2, accumulate);
        dst[..n].copy_from_slice(&d2[..n]);
        return;
    }
    // SAFETY: the asserts above keep every index the kernel reads in bounds of `a.data` and
    // `b.data`, and every index it writes (`i * n + j` for i < m, j < n) in bounds of `dst`; the
    // three slices do not overlap (`dst` is a unique borrow).
    unsafe { gemm_into(a, b, dst.as_mut_ptr(), accumulate) };
}

/// `dst = a @ b` in blocks of `rows` rows on rayon's pool, one single-threaded product per
/// block, then `then(block index, block)` on each block's rows. When the bfloat16 kernel takes
/// the product ([`super::bf16`]) `b` is packed once for all blocks. A row's result never
/// depends on the block it falls in.
///
/// # Panics
/// As [`matmul`], and when `rows` is zero.
pub fn par_matmul_rows<F>(a: View<'_>, b: View<'_>, dst: &mut [f32], rows: usize, then: F)
where
    F: Fn(usize, &mut [f32]) + Sync,
{
    use rayon::prelude::*;
    let n = b.cols;
    assert!(
        rows > 0 && dst.len() == a.rows * n,
        "destination of the wrong size"
    );
    if dst.is_empty() {
        return;
    }
    let shared = super::bf16::pack_shared(b);
    dst.par_chunks_mut(rows * n).enumerate().for_each(|(t, d)| {
        let block = a.row_block(t * rows, d.len() / n);
        // SAFETY: `d` holds the block's `rows x n` results; `block` and the packed `b` hold
        // the block's operands (`row_block` and `pack_shared` checked their bounds).
        let done = shared.as_ref().is_some_and(|p| {
            assert!(block.max_index() < block.data.len().max(1));
            unsafe { super::bf16::try_matmul_packed(block, p, d.as_mut_ptr(), false) }
        });
        if !done {
            matmul(block, b, d, false);
        }
        then(t, d);
    });
}

/// `dst = a @ b` into memory that need not be initialized (a fresh output buffer: no zeroing
/// pass before the product overwrites it). Returns `dst[..a.rows * b.cols]`, now initialized.
///
/// # Panics
/// As [`matmul`].
pub fn matmul_uninit<'d>(
    a: View<'_>,
    b: View<'_>,
    dst: &'d mut [std::mem::MaybeUninit<f32>],
) -> &'d mut [f32] {
    let (m, n, k) = (a.rows, b.cols, a.cols);
    assert!(dst.len() >= m * n, "destination too small");
    let dst = &mut dst[..m * n];
    if m <= 1 || n == 0 || k == 0 {
        // The special cases of `matmul` read or partly write `dst`: zero it and take that path.
        dst.iter_mut().for_each(|d| {
            d.write(0.0);
        });
        // SAFETY: every element was just written.
        let dst = unsafe { &mut *(dst as *mut [std::mem::MaybeUninit<f32>] as *mut [f32]) };
        matmul(a, b, dst, false);
        return dst;
    }
    assert_eq!(a.cols, b.rows, "inner dimensions differ");
    assert!(a.max_index() < a.data.len() && b.max_index() < b.data.len());
    // SAFETY: as in `matmul`; without `accumulate` the kernel never reads `dst` and writes
    // every one of its `m * n` elements.
    unsafe {
        gemm_into(a, b, dst.as_mut_ptr().cast(), false);
        &mut *(dst as *mut [std::mem::MaybeUninit<f32>] as *mut [f32])
    }
}

/// The bfloat16 kernel when it applies ([`super::bf16`]), else the gemm crate's kernel for
/// [`cpu::path`], on the calling thread: `dst (+)= a @ b`, `dst`
/// row-major `a.rows x b.cols`.
///
/// # Safety
/// The views' indices are in bounds of their slices, `dst` is valid for `a.rows * b.cols`
/// writes (and reads with `accumulate`) and overlaps neither view.
unsafe fn gemm_into(a: View<'_>, b: View<'_>, dst: *mut f32, accumulate: bool) {
    // SAFETY: the caller's contract, which is also `try_matmul`'s.
    if unsafe { super::bf16::try_matmul(a, b, dst, accumulate) } {
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { gemm_on(cpu::path(), a, b, dst, accumulate) }
}

/// [`gemm_into`] with the micro-kernels of `path`.
///
/// # Safety
/// As [`gemm_into`], and the CPU runs `path` ([`cpu::set_path`] and [`cpu::path`] never
/// give one it cannot).
#[cfg(target_arch = "x86_64")]
unsafe fn gemm_on(path: CpuPath, a: View<'_>, b: View<'_>, dst: *mut f32, accumulate: bool) {
    // What `gemm::gemm` does before its own dispatch: the micro-kernels want a column-major
    // destination, so the row-major `dst = a @ b` is computed as `dst^T = b^T @ a^T`.
    let (m, n, k) = (b.cols, a.rows, a.cols);
    let (lhs, lhs_cs, lhs_rs) = (b.data.as_ptr(), b.row_stride, b.col_stride);
    let (rhs, rhs_cs, rhs_rs) = (a.data.as_ptr(), a.row_stride, a.col_stride);
    macro_rules! kernel {
        ($simd:ident, $isa:ident, $width:literal) => {{
            use gemm_common::simd::MixedSimd;
            use gemm_f32::microkernel::$isa::f32 as ukr;
            let simd = <gemm_common::simd::$simd as MixedSimd<f32, f32, f32, f32>>::try_new()
                .expect("the CPU runs the chosen kernel path");
            // SAFETY: the caller's contract; the arguments are `gemm::gemm`'s for f32.
            unsafe {
                gemm_common::gemm::gemm_basic_generic::<
                    _,
                    f32,
                    $width,
                    { ukr::MR_DIV_N * $width },
                    { ukr::NR },
                    { ukr::MR_DIV_N },
                    { ukr::H_M },
                    { ukr::H_N },
                >(
                    simd,
                    m,
                    n,
                    k,
                    dst,
                    // `dst^T` is `m x n` column-major: its columns are `dst`'s rows.
                    m as isize,
                    1,
                    accumulate,
                    lhs,
                    lhs_cs as isize,
                    lhs_rs as isize,
                    rhs,
                    rhs_cs as isize,
                    rhs_rs as isize,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    |x, y, z| x * y + z,
                    &ukr::UKR,
                    &ukr::H_UKR,
                    false,
                    gemm_common::Parallelism::None,
                )
            }
        }};
    }
    match path {
        CpuPath::Avx512 => kernel!(V4, avx512f, 16),
        CpuPath::Avx2 => kernel!(V3, fma, 8),
        CpuPath::Portable => kernel!(Scalar, scalar, 1),
    }
}

/// Off x86-64 the gemm crate picks its own kernels.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn gemm_on(_: CpuPath, a: View<'_>, b: View<'_>, dst: *mut f32, accumulate: bool) {
    let (m, n, k) = (a.rows, b.cols, a.cols);
    // SAFETY: the caller's contract.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            n as isize,
            accumulate,
            a.data.as_ptr(),
            a.col_stride as isize,
            a.row_stride as isize,
            b.data.as_ptr(),
            b.col_stride as isize,
            b.row_stride as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_blocks_give_what_one_product_gives() {
        // float32 values, and bfloat16 values (packed once and shared on the bf16 routes).
        for bits in [0xFFFF_FFFFu32, 0xFFFF_0000] {
            let (m, k, n) = (37, 301, 70);
            let value = |v: usize, s: usize| {
                let x = ((v * s) % 97) as f32 / 31.0 - 1.5;
                f32::from_bits(x.to_bits() & bits)
            };
            let a: Vec<f32> = (0..m * k).map(|v| value(v, 7)).collect();
            let b: Vec<f32> = (0..k * n).map(|v| value(v, 11)).collect();
            let mut whole = vec![0.0f32; m * n];
            matmul(View::new(&a, m, k), View::new(&b, k, n), &mut whole, false);
            for rows in [1, 5, 8, 37, 50] {
                let mut got = vec![f32::NAN; m * n];
                let touched = std::sync::Mutex::new(Vec::new());
                par_matmul_rows(
                    View::new(&a, m, k),
                    View::new(&b, k, n),
                    &mut got,
                    rows,
                    |t, d| {
                        touched.lock().unwrap().push((t, d.len()));
                    },
                );
                assert_eq!(got, whole, "blocks of {rows} rows (mask {bits:#x})");
                let mut touched = touched.into_inner().unwrap();
                touched.sort();
                let want: Vec<_> = (0..m.div_ceil(rows))
                    .map(|t| (t, rows.min(m - t * rows) * n))
                    .collect();
                assert_eq!(touched, want);
            }
            // The transposed view (Dense's weight gradient reads xᵀ).
            let at: Vec<f32> = (0..k * m).map(|v| a[(v % m) * k + v / m]).collect();
            let mut got = vec![0.0f32; m * n];
            par_matmul_rows(
                View::new(&at, k, m).t(),
                View::new(&b, k, n),
                &mut got,
                6,
                |_, _| {},
            );
            for (g, w) in got.iter().zip(&whole) {
                assert!(
                    (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "a transposed view: {g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn every_path_multiplies_as_the_definition() {
        let detected = CpuPath::detected();
        for path in CpuPath::ALL.into_iter().rev().filter(|p| *p <= detected) {
            for (m, k, n) in [
                (2, 3, 4),
                (5, 1, 7),
                (33, 17, 9),
                (64, 100, 48),
                (3, 300, 1),
            ] {
                let a: Vec<f32> = (0..m * k).map(|v| ((v * 13) % 7) as f32 - 3.0).collect();
                let b: Vec<f32> = (0..k * n).map(|v| ((v * 5) % 11) as f32 - 5.0).collect();
                let mut want = vec![0.0f32; m * n];
                for i in 0..m {
                    for j in 0..n {
                        want[i * n + j] = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
                    }
                }
                let mut got = vec![1.0f32; m * n];
                // SAFETY: contiguous views of exactly their slices; `got` holds m * n.
                unsafe {
                    gemm_on(
                        path,
                        View::new(&a, m, k),
                        View::new(&b, k, n),
                        got.as_mut_ptr(),
                        false,
                    )
                };
                assert_eq!(got, want, "{path} m={m} k={k} n={n}");
                // Transposed views (strides swapped), accumulating onto ones.
                let at: Vec<f32> = (0..k * m).map(|v| a[(v % m) * k + v / m]).collect();
                let bt: Vec<f32> = (0..n * k).map(|v| b[(v % k) * n + v / k]).collect();
                let mut acc = vec![1.0f32; m * n];
                let (va, vb) = (View::new(&at, k, m).t(), View::new(&bt, n, k).t());
                // SAFETY: as above; the transposed views index the same ranges.
                unsafe { gemm_on(path, va, vb, acc.as_mut_ptr(), true) };
                let plus_one: Vec<f32> = want.iter().map(|w| w + 1.0).collect();
                assert_eq!(acc, plus_one, "{path} transposed m={m} k={k} n={n}");
            }
        }
    }

    #[test]
    fn a_rows_result_does_not_depend_on_the_number_of_rows() {
        // Shapes of the Fashion-MNIST models' Dense layers, where the gemm crate's one-row
        // path differs in the last bits from its general kernel.
        for (k, n) in [(784, 512), (3136, 128), (128, 10)] {
            let w: Vec<f32> = (0..k * n)
                .map(|v| ((v * 7919) % 1001) as f32 / 5000.0 - 0.1)
                .collect();
            let x: Vec<f32> = (0..40 * k)
                .map(|v| ((v * 31) % 255) as f32 / 255.0)
                .collect();
            let mut all = vec![0.0; 40 * n];
            matmul(View::new(&x, 40, k), View::new(&w, k, n), &mut all, false);
            for (m, start) in [(1, 0), (1, 17), (2, 5), (9, 30)] {
                let mut y = vec![0.0; m * n];
                let rows = &x[start * k..(start + m) * k];
                matmul(View::new(rows, m, k), View::new(&w, k, n), &mut y, false);
                assert_eq!(
                    y,
                    all[start * n..(start + m) * n],
                    "{m} rows from {start}, k={k}"
                );
            }
            // Accumulating into a single row: the same as the row of a two-row accumulation.
            let mut one = vec![1.0; n];
            matmul(
                View::new(&x[..k], 1, k),
                View::new(&w, k, n),
                &mut one,
                true,
            );
            let mut two = vec![1.0; 2 * n];
            matmul(
                View::new(&x[..2 * k], 2, k),
                View::new(&w, k, n),
                &mut two,
                true,
            );
            assert_eq!(one, two[..n]);
        }
    }

    #[test]
    fn products_with_transposed_views_match_a_naive_loop() {
        let a: Vec<f32> = (0..6).map(|v| v as f32).collect(); // 2x3
        let b: Vec<f32> = (0..12).map(|v| v as f32 * 0.5).collect(); // 3x4
        let mut c = vec![0.0; 8];
        matmul(View::new(&a, 2, 3), View::new(&b, 3, 4), &mut c, false);
        // Row 0 of a = [0 1 2]; column 0 of b = [0 2 4] -> 0 + 2 + 8 = 10.
        assert_eq!(c[0], 10.0);
        let naive = |i: usize, j: usize| (0..3).map(|t| a[i * 3 + t] * b[t * 4 + j]).sum::<f32>();
        for i in 0..2 {
            for j in 0..4 {
                assert_eq!(c[i * 4 + j], naive(i, j));
            }
        }
        // (b^T a^T) = (a b)^T, accumulated twice.
        let mut ct = vec![0.0; 8];
        matmul(
            View::new(&b, 3, 4).t(),
            View::new(&a, 2, 3).t(),
            &mut ct,
            true,
        );
        matmul(
            View::new(&b, 3, 4).t(),
            View::new(&a, 2, 3).t(),
            &mut ct,
            true,
        );
        for i in 0..2 {
            for j in 0..4 {
                assert_eq!(ct[j * 2 + i], 2.0 * c[i * 4 + j]);
            }
        }
    }

    #[test]
    fn uninit_destination_gets_the_same_product() {
        let a: Vec<f32> = (0..6 * 5).map(|v| (v as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..5 * 7).map(|v| (v as f32 * 0.11).cos()).collect();
        for (m, a) in [(6, &a[..]), (1, &a[..5])] {
            let mut want = vec![0.0; m * 7];
            matmul(View::new(a, m, 5), View::new(&b, 5, 7), &mut want, false);
            let mut dst = vec![std::mem::MaybeUninit::new(f32::NAN); m * 7 + 3];
            let got = matmul_uninit(View::new(a, m, 5), View::new(&b, 5, 7), &mut dst);
            assert_eq!(got, &want[..], "{m} rows");
        }
    }
}
