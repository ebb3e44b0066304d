//! Train steps of one's own, as Keras' examples override `train_step`, in Rust:
//!
//! - [`Dcgan`]: keras.io/examples/generative/dcgan_overriding_train_step — two models (the
//!   discriminator is the compiled model, `main`; the generator is the part `generator`),
//!   two optimizers, two updates per step.
//! - [`Vae`]: keras.io/examples/generative/vae — an encoder (`main`) and a decoder (the part
//!   `decoder`) trained together on a loss of one's own: reconstruction plus the KL term.
//!
//! Each is registered under a name ([`register`]) that a config picks with
//! `compile.train_step`; the configs beside this file (`dcgan.toml`, `vae.toml`) declare the
//! parts in `[parts.<name>]`.

use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::activation::{relu, softplus};
use kiln::batch::DeviceBatch;
use kiln::model::Act;
use kiln::step::custom::{Parts, StepContext, StepLogs, TrainStep, register_train_step};

/// Registers `dcgan` and `vae` for the configs read afterwards.
///
/// # Errors
/// When a step of the same name is already registered.
pub fn register() -> kiln::Result<()> {
    register_train_step("dcgan", || std::sync::Arc::new(Dcgan { latent_dim: 64 }))?;
    register_train_step("vae", || std::sync::Arc::new(Vae { latent_dim: 2 }))
}

/// Binary cross-entropy on logits, the mean over all values:
/// `max(x, 0) - x * y + log(1 + exp(-|x|))` (TensorFlow's
/// `sigmoid_cross_entropy_with_logits`, stable for any `x`).
pub fn bce_with_logits(logits: Tensor<2>, labels: Tensor<2>) -> Tensor<1> {
    let loss = relu(logits.clone()) - logits.clone() * labels + softplus(logits.abs().neg(), 1.0);
    loss.mean()
}

/// One value per example, `[batch, units]`, from a part whose output is a vector.
fn vector(x: Act, what: &str) -> Result<Tensor<2>, String> {
    match x {
        Act::Flat(t) => Ok(t),
        _ => Err(format!("{what} must output a vector (end it with Dense)")),
    }
}

/// The discriminator's one logit per image.
fn logit(x: Act) -> Result<Tensor<2>, String> {
    let t = vector(x, "the discriminator (main)")?;
    match t.dims()[1] {
        1 => Ok(t),
        n => Err(format!(
            "the discriminator (main) must output 1 logit per image, not {n}"
        )),
    }
}

/// The images of a batch, `[batch, channels, height, width]`.
fn images(x: Act) -> Result<Tensor<4>, String> {
    match x {
        Act::Image(t) => Ok(t),
        _ => Err("expects image batches (an Input of shape [height, width, channels])".into()),
    }
}

/// Keras' DCGAN: the discriminator (`main`, one logit per image, 1 = generated as in the
/// Keras example) learns to tell generated images from real ones; the generator (part
/// `generator`, a `[latent_dim]` input) learns to make the discriminator call its images
/// real. Logs `d_loss`, `g_loss` and `loss = d_loss + g_loss`.
#[derive(Debug, Clone)]
pub struct Dcgan {
    /// Size of the generator's input noise.
    pub latent_dim: usize,
}

impl Dcgan {
    /// `batch` rows of standard normal noise.
    fn noise(&self, batch: usize, device: &Device) -> Tensor<2> {
        Tensor::random(
            [batch, self.latent_dim],
            Distribution::Normal(0.0, 1.0),
            device,
        )
    }
}

impl TrainStep for Dcgan {
    fn name(&self) -> &str {
        "dcgan"
    }

    fn required_parts(&self) -> Vec<&str> {
        vec!["generator"]
    }

    fn train_step(
        &self,
        parts: &mut Parts,
        batch: DeviceBatch,
        _: &StepContext,
    ) -> Result<StepLogs, String> {
        let real = images(batch.x)?;
        let (n, device) = (real.dims()[0], real.device());
        // 1. The discriminator on generated (label 1) and real (label 0) images, labels
        //    smoothed with uniform noise as in the Keras example.
        let fake = parts
            .get("generator")?
            .call(Act::Flat(self.noise(n, &device)), true)?;
        let fake = images(fake)?.detach();
        if fake.dims() != real.dims() {
            return Err(format!(
                "the generator must output images shaped as the real ones {:?} (NCHW), not {:?}",
                real.dims(),
                fake.dims()
            ));
        }
        let combined = Tensor::cat(vec![fake, real], 0);
        let labels = Tensor::cat(
            vec![
                Tensor::ones([n, 1], &device),
                Tensor::zeros([n, 1], &device),
            ],
            0,
        );
        let labels = labels.clone()
            + Tensor::random(labels.shape(), Distribution::Uniform(0.0, 0.05), &device);
        let logits = logit(parts.main().call(Act::Image(combined), true)?)?;
        let d_loss = bce_with_logits(logits, labels);
        parts.apply_gradients(d_loss.clone(), &["main"])?;
        // 2. The generator, through the (updated) discriminator, towards "real" (0).
        let fake = parts
            .get("generator")?
            .call(Act::Flat(self.noise(n, &device)), true)?;
        let logits = logit(parts.main().call(fake, true)?)?;
        let g_loss = bce_with_logits(logits, Tensor::zeros([n, 1], &device));
        parts.apply_gradients(g_loss.clone(), &["generator"])?;
        Ok(StepLogs::new()
            .with("loss", d_loss.clone() + g_loss.clone())
            .with("d_loss", d_loss)
            .with("g_loss", g_loss))
    }
}

/// Keras' VAE: the encoder (`main`, output `[2 * latent_dim]`: the means, then the log
/// variances) and the decoder (part `decoder`, `[latent_dim]` in, an image of the input's
/// shape with values in (0, 1) out) trained together on the reconstruction loss (binary
/// cross-entropy summed over the pixels) plus the KL divergence from the standard normal.
/// Logs `loss`, `reconstruction_loss` and `kl_loss`; its `test_step` logs the same with
/// `z = z_mean` (no sampling, so evaluation repeats exactly).
#[derive(Debug, Clone)]
pub struct Vae {
    /// Size of the latent space.
    pub latent_dim: usize,
}

impl Vae {
    /// The losses of `batch`, sampling `z` when `sample`.
    fn losses(
        &self,
        parts: &mut Parts,
        x: Act,
        training: bool,
    ) -> Result<(Tensor<1>, Tensor<1>, Tensor<1>), String> {
        let real = images(x)?;
        let (n, device) = (real.dims()[0], real.device());
        let encoded = parts.main().call(Act::Image(real.clone()), training)?;
        let encoded = vector(encoded, "the encoder (main)")?;
        let d = self.latent_dim;
        if encoded.dims()[1] != 2 * d {
            return Err(format!(
                "the encoder (main) must output {} values (means and log variances), not {}",
                2 * d,
                encoded.dims()[1]
            ));
        }
        let z_mean = encoded.clone().slice([0..n, 0..d]);
        let z_log_var = encoded.slice([0..n, d..2 * d]);
        let z = match training {
            true => {
                let eps = Tensor::random([n, d], Distribution::Normal(0.0, 1.0), &device);
                z_mean.clone() + (z_log_var.clone() * 0.5).exp() * eps
            }
            false => z_mean.clone(),
        };
        let decoded = images(parts.get("decoder")?.call(Act::Flat(z), training)?)?;
        if decoded.dims() != real.dims() {
            return Err(format!(
                "the decoder must output images shaped as the input {:?} (NCHW), not {:?}",
                real.dims(),
                decoded.dims()
            ));
        }
        // Keras' binary_crossentropy on probabilities: clipped to [1e-7, 1 - 1e-7].
        let p = decoded.clamp(1e-7, 1.0 - 1e-7);
        let bce =
            (real.clone() * p.clone().log() + (real.neg() + 1.0) * (p.neg() + 1.0).log()).neg();
        let reconstruction = bce.reshape([n as i64, -1]).sum_dim(1).mean();
        let kl = (z_log_var.clone() + 1.0 - z_mean.powi_scalar(2) - z_log_var.exp()) * -0.5;
        let kl = kl.sum_dim(1).mean();
        Ok((reconstruction.clone() + kl.clone(), reconstruction, kl))
    }
}

impl TrainStep for Vae {
    fn name(&self) -> &str {
        "vae"
    }

    fn required_parts(&self) -> Vec<&str> {
        vec!["decoder"]
    }

    fn train_step(
        &self,
        parts: &mut Parts,
        batch: DeviceBatch,
        _: &StepContext,
    ) -> Result<StepLogs, String> {
        let (total, reconstruction, kl) = self.losses(parts, batch.x, true)?;
        parts.apply_gradients(total.clone(), &["main", "decoder"])?;
        Ok(logs(total, reconstruction, kl))
    }

    fn test_step(
        &self,
        parts: &mut Parts,
        batch: &DeviceBatch,
    ) -> Option<Result<StepLogs, String>> {
        let losses = self.losses(parts, batch.x.clone(), false);
        Some(losses.map(|(total, reconstruction, kl)| logs(total, reconstruction, kl)))
    }
}

fn logs(total: Tensor<1>, reconstruction: Tensor<1>, kl: Tensor<1>) -> StepLogs {
    StepLogs::new()
        .with("loss", total)
        .with("reconstruction_loss", reconstruction)
        .with("kl_loss", kl)
}
