//! [`Act`]: a batch flowing through the network, by rank (the value every layer's forward pass
//! takes and returns).

use burn::prelude::*;
use burn::tensor::activation;

use super::args::Activation;

/// An activation flowing through the network, by rank.
#[derive(Debug, Clone)]
pub enum Act {
    /// `[batch, features]`.
    Flat(Tensor<2>),
    /// `[batch, steps, features]` (a rank-2 Keras input such as `(28, 28)`).
    Seq(Tensor<3>),
    /// `[batch, channels, height, width]` (a Keras `(height, width, channels)` input).
    Image(Tensor<4>),
    /// `[batch, channels, depth, height, width]` (a Keras `(depth, height, width, channels)`
    /// input).
    Volume(Tensor<5>),
}

impl Act {
    /// The device the activation lives on.
    pub fn device(&self) -> Device {
        match self {
            Act::Flat(t) => t.device(),
            Act::Seq(t) => t.device(),
            Act::Image(t) => t.device(),
            Act::Volume(t) => t.device(),
        }
    }

    /// The shape of one example in Keras' order (channels last), without the batch axis.
    pub fn keras_shape(&self) -> Vec<usize> {
        match self {
            Act::Flat(t) => vec![t.dims()[1]],
            Act::Seq(t) => t.dims()[1..].to_vec(),
            Act::Image(t) => {
                let [_, c, h, w] = t.dims();
                vec![h, w, c]
            }
            Act::Volume(t) => {
                let [_, c, d, h, w] = t.dims();
                vec![d, h, w, c]
            }
        }
    }

    /// The `[batch, features]` tensor.
    ///
    /// # Panics
    /// When the activation has another rank (shape checks rule that out for layers whose
    /// `output_shape` accepts only rank-1 Keras inputs).
    pub fn into_flat(self) -> Tensor<2> {
        match self {
            Act::Flat(t) => t,
            other => panic!("shape checks guarantee a [batch, features] input, got {other:?}"),
        }
    }

    /// The `[batch, steps, features]` tensor (panics on another rank, as [`Act::into_flat`]).
    pub fn into_seq(self) -> Tensor<3> {
        match self {
            Act::Seq(t) => t,
            other => {
                panic!("shape checks guarantee a [batch, steps, features] input, got {other:?}")
            }
        }
    }

    /// The `[batch, channels, height, width]` tensor (panics on another rank).
    pub fn into_image(self) -> Tensor<4> {
        match self {
            Act::Image(t) => t,
            other => panic!("shape checks guarantee an image input, got {other:?}"),
        }
    }

    /// The image in Keras' layout, `[batch, height, width, channels]` (panics on another rank).
    pub fn into_keras_image(self) -> Tensor<4> {
        self.into_image().permute([0, 2, 3, 1])
    }

    /// An image from Keras' layout `[batch, height, width, channels]`.
    pub fn from_keras_image(t: Tensor<4>) -> Act {
        Act::Image(t.permute([0, 3, 1, 2]))
    }

    /// The `[batch, channels, depth, height, width]` tensor (panics on another rank).
    pub fn into_volume(self) -> Tensor<5> {
        match self {
            Act::Volume(t) => t,
            other => panic!("shape checks guarantee a volume input, got {other:?}"),
        }
    }

    /// The volume in Keras' layout, `[batch, depth, height, width, channels]` (panics on
    /// another rank).
    pub fn into_keras_volume(self) -> Tensor<5> {
        self.into_volume().permute([0, 2, 3, 4, 1])
    }

    /// A volume from Keras' layout `[batch, depth, height, width, channels]`.
    pub fn from_keras_volume(t: Tensor<5>) -> Act {
        Act::Volume(t.permute([0, 4, 1, 2, 3]))
    }

    /// The activation on `device` (itself when it is already there; otherwise a copy that
    /// autodiff tracks).
    pub fn to_device(self, device: &Device) -> Act {
        if self.device() == *device {
            return self;
        }
        match self {
            Act::Flat(t) => Act::Flat(t.to_device(device)),
            Act::Seq(t) => Act::Seq(t.to_device(device)),
            Act::Image(t) => Act::Image(t.to_device(device)),
            Act::Volume(t) => Act::Volume(t.to_device(device)),
        }
    }

    /// `f` applied to the tensor, whatever its rank (an element-wise map: `f` is generic over
    /// the rank through [`ElementWise`]).
    pub fn map(self, f: impl ElementWise) -> Act {
        match self {
            Act::Flat(t) => Act::Flat(f.apply(t)),
            Act::Seq(t) => Act::Seq(f.apply(t)),
            Act::Image(t) => Act::Image(f.apply(t)),
            Act::Volume(t) => Act::Volume(f.apply(t)),
        }
    }

    /// The activation `a` applied; softmax runs over the feature (channel) axis.
    pub fn activated(self, a: Activation) -> Act {
        match a {
            Activation::Linear => self,
            Activation::Softmax => match self {
                Act::Flat(t) => Act::Flat(activation::softmax(t, 1)),
                Act::Seq(t) => Act::Seq(activation::softmax(t, 2)),
                Act::Image(t) => Act::Image(activation::softmax(t, 1)),
                Act::Volume(t) => Act::Volume(activation::softmax(t, 1)),
            },
            other => self.map(other),
        }
    }

    /// The batch size.
    pub fn batch(&self) -> usize {
        match self {
            Act::Flat(t) => t.dims()[0],
            Act::Seq(t) => t.dims()[0],
            Act::Image(t) => t.dims()[0],
            Act::Volume(t) => t.dims()[0],
        }
    }
}

/// The forward pass of `layer`, a layer that does not take volumes ([`super::Layer::takes_volumes`]),
/// handed one: unreachable, since the shape checks refuse such an input with a message naming
/// the layer.
pub(crate) fn volume_refused(layer: &str) -> ! {
    unreachable!("shape checks refuse volumes to {layer}, which does not take them")
}

/// An element-wise function of a tensor of any rank (for [`Act::map`]).
pub trait ElementWise {
    /// The function on a rank-`D` tensor.
    fn apply<const D: usize>(&self, t: Tensor<D>) -> Tensor<D>;
}

/// The element-wise activations (softmax is not element-wise: see [`Act::activated`]).
impl ElementWise for Activation {
    fn apply<const D: usize>(&self, t: Tensor<D>) -> Tensor<D> {
        match self {
            Activation::Linear => t,
            Activation::Relu => activation::relu(t),
            Activation::Gelu => activation::gelu(t),
            Activation::Sigmoid => activation::sigmoid(t),
            Activation::Tanh => t.tanh(),
            Activation::Softmax => activation::softmax(t, D - 1),
            Activation::Swish => activation::silu(t),
            Activation::Elu => activation::elu(t, 1.0),
            Activation::Selu => activation::selu(t),
            Activation::Softplus => activation::softplus(t, 1.0),
            Activation::Softsign => activation::softsign(t),
            // relu6(x + 3) / 6, with relu's zero gradient at the kinks as in Keras.
            Activation::HardSigmoid => activation::relu(t.add_scalar(3.0))
                .clamp_max(6.0)
                .div_scalar(6.0),
            Activation::Mish => activation::mish(t),
            Activation::Exponential => t.exp(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keras 3.15's values and derivatives of every activation at fixed points
    /// (`tests/reference/activations_reference.py`).
    const REFERENCE: &str = include_str!("../../tests/data/activations_reference.json");

    fn floats(v: &serde_json::Value) -> Vec<f32> {
        let list = v.as_array().expect("a list");
        list.iter()
            .map(|x| x.as_f64().expect("a number") as f32)
            .collect()
    }

    #[test]
    fn every_activation_matches_keras_values_and_gradients() {
        let reference: serde_json::Value = serde_json::from_str(REFERENCE).unwrap();
        let x = floats(&reference["x"]);
        let cases = reference["activations"].as_object().unwrap();
        // Every activation (and the alias) has known answers, softmax aside (not element-wise).
        for a in Activation::ALL
            .iter()
            .filter(|a| **a != Activation::Softmax)
        {
            assert!(
                cases.contains_key(a.name()),
                "no reference for {}",
                a.name()
            );
        }
        let device = Device::flex().autodiff();
        for (name, want) in cases {
            let a: Activation = serde_json::from_value(serde_json::json!(name)).unwrap();
            let t = Tensor::<1>::from_data(TensorData::new(x.clone(), [x.len()]), &device)
                .require_grad();
            let y = a.apply(t.clone());
            let grads = y.clone().sum().backward();
            let got = y.into_data().try_to_vec::<f32>().unwrap();
            let grad = t
                .grad(&grads)
                .unwrap()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap();
            for (what, got, want) in [
                ("value", got, floats(&want["value"])),
                ("gradient", grad, floats(&want["grad"])),
            ] {
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    let tol = 2e-6 * w.abs().max(1.0);
                    assert!(
                        (g - w).abs() <= tol,
                        "{name} {what} at x = {}: {g} vs Keras {w}",
                        x[i]
                    );
                }
            }
        }
    }

    #[test]
    fn activation_names_round_trip_and_silu_is_swish() {
        for a in Activation::ALL {
            let v = serde_json::to_value(a).unwrap();
            assert_eq!(v, serde_json::json!(a.name()));
            assert_eq!(serde_json::from_value::<Activation>(v).unwrap(), a);
        }
        let silu: Activation = serde_json::from_value(serde_json::json!("silu")).unwrap();
        assert_eq!(silu, Activation::Swish);
        assert!(Activation::names().contains(&"hard_sigmoid"));
    }
}
