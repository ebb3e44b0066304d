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
    // SAFETY: the asserts above keep every index the kernel reads in bounds of `a.data` and
    // `b.data`, and every index it writes (`i * n + j` for i < m, j < n) in bounds of `dst`; the
    // three slices do not overlap (`dst` is a unique borrow).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
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
}
