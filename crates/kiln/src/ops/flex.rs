//! [`KilnOps`] on Burn's flex CPU backend: the kernels on the tensors' host buffers.

use burn::backend::Flex;
use burn::backend::tensor::FloatTensor;
use burn::tensor::TensorData;
use burn_flex::FlexTensor;

use super::{ConvArgs, KilnOps, PoolArgs, conv_geometry, fused_relu, pool_geometry};
use crate::kernels::{conv2d, pool};

/// The tensor's values as a contiguous `f32` slice (copying only when it is a strided view).
fn values(t: &FlexTensor) -> std::borrow::Cow<'_, [f32]> {
    match t.as_slice::<f32>() {
        Some(s) if t.is_contiguous() => std::borrow::Cow::Borrowed(s),
        _ => std::borrow::Cow::Owned(
            t.to_contiguous()
                .as_slice::<f32>()
                .expect("f32 tensor")
                .to_vec(),
        ),
    }
}

fn tensor(values: Vec<f32>, shape: &[usize]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape.to_vec()))
}

impl KilnOps for Flex {
    fn kiln_conv2d(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        args: ConvArgs,
    ) -> FloatTensor<Self> {
        let g = conv_geometry(&args);
        let y = conv2d::forward(
            &values(&x),
            &values(&w),
            Some(&values(&b)),
            &g,
            fused_relu(&args),
        );
        let [oh, ow] = g.out_hw();
        tensor(y, &[g.batch, g.out_channels, oh, ow])
    }

    fn kiln_conv2d_backward(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        y: FloatTensor<Self>,
        args: ConvArgs,
        need_dx: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let g = conv_geometry(&args);
        let y = fused_relu(&args).then(|| values(&y));
        let (dx, dw, db) = conv2d::backward(
            &values(&x),
            &values(&w),
            &values(&dy),
            y.as_deref(),
            &g,
            need_dx,
        );
        let dx = match dx {
            Some(dx) => tensor(dx, &[g.batch, g.in_channels, g.height, g.width]),
            None => tensor(Vec::new(), &[0]),
        };
        (
            dx,
            tensor(
                dw,
                &[g.out_channels, g.in_channels, g.kernel[0], g.kernel[1]],
            ),
            tensor(db, &[g.out_channels]),
        )
    }

    fn kiln_max_pool2d(x: FloatTensor<Self>, args: PoolArgs) -> FloatTensor<Self> {
        let g = pool_geometry(&args);
        let shape = x.layout().shape().to_vec();
        let y = pool::max_forward(&values(&x), &g);
        let [oh, ow] = g.out_hw();
        tensor(y, &[shape[0], shape[1], oh, ow])
    }

    fn kiln_max_pool2d_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        args: PoolArgs,
    ) -> FloatTensor<Self> {
        let g = pool_geometry(&args);
        let shape = x.layout().shape().to_vec();
        tensor(pool::max_backward(&values(&x), &values(&dy), &g), &shape)
    }
}
