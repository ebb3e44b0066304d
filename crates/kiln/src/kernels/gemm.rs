//! A safe wrapper over the `gemm` crate for the shapes the kernels use.

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

/// The gemm crate's kernel on the calling thread: `dst (+)= a @ b`, `dst` row-major
/// `a.rows x b.cols`.
///
/// # Safety
/// The views' indices are in bounds of their slices, `dst` is valid for `a.rows * b.cols`
/// writes (and reads with `accumulate`) and overlaps neither view.
unsafe fn gemm_into(a: View<'_>, b: View<'_>, dst: *mut f32, accumulate: bool) {
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
