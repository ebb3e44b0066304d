//! The networks a custom step trains, each with its own optimizer.

use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::prelude::*;

use crate::compile::{Clipping, GradientOptions, OptimizerSpec};
use crate::model::{Act, ModelSpec, Network, keras_shape};
use crate::precision::{LossScale, ScaleUpdate, unscale};

/// An extra network of a model trained by a custom step (`[parts.<name>]` in a config, or
/// [`crate::fit::Model::add_part`]): its layers and its optimizer (with Keras' clipping keys).
#[derive(Debug, Clone)]
pub struct PartSpec {
    /// The part's name (`Parts::get`), unique in the model; not `main`.
    pub name: String,
    /// Its layers.
    pub model: ModelSpec,
    /// Its optimizer.
    pub optimizer: OptimizerSpec,
    /// Its clipping (`clipnorm`, `clipvalue`, `global_clipnorm`).
    pub gradients: GradientOptions,
}

/// One network in a custom step: layers, parameters (on the training device, with autodiff)
/// and optimizer state.
#[derive(Clone)]
pub struct Part {
    name: String,
    spec: ModelSpec,
    optimizer: OptimizerSpec,
    clipping: Option<Clipping>,
    net: Network,
    optim: ModuleOptimizer,
    /// The learning rate of the next update.
    rate: f64,
}

impl std::fmt::Debug for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Part").field("name", &self.name).finish()
    }
}

impl Part {
    /// A part made of its pieces (the loop builds the main part from the compiled model's).
    pub fn new(spec: &PartSpec, net: Network, optim: ModuleOptimizer, iterations: u64) -> Part {
        Part {
            name: spec.name.clone(),
            spec: spec.model.clone(),
            optimizer: spec.optimizer.clone(),
            clipping: spec.gradients.clipping(),
            net,
            optim,
            rate: spec.optimizer.rate().at(iterations),
        }
    }

    /// A part with fresh weights (seeded by `seed`) and a fresh optimizer on `device`.
    pub fn init(spec: &PartSpec, seed: u64, device: &Device) -> Part {
        let net = Network::init(&spec.model, seed, &device.clone().autodiff());
        Part::new(spec, net, spec.optimizer.build(), 0)
    }

    /// Sets the learning rate of the next update (the main part follows the loop's rate,
    /// which callbacks may change).
    pub fn set_rate(&mut self, rate: f64) {
        self.rate = rate;
    }

    /// The learning rate the optimizer follows at `iterations` (its schedule, or its number).
    pub fn rate_at(&self, iterations: u64) -> f64 {
        self.optimizer.rate().at(iterations)
    }

    /// The same part without autodiff (for inference).
    pub fn valid(&self) -> Part {
        Part {
            net: self.net.valid(),
            ..self.clone()
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its layers.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// Its parameters.
    pub fn network(&self) -> &Network {
        &self.net
    }

    /// Replaces its parameters with `f` of them (a strategy combining replicas' statistics).
    pub fn map_network(&mut self, f: impl FnOnce(Network) -> Network) {
        let net = std::mem::replace(&mut self.net, Network { layers: Vec::new() });
        self.net = f(net);
    }

    /// Its optimizer's declaration.
    pub fn spec_optimizer(&self) -> &OptimizerSpec {
        &self.optimizer
    }

    /// Its optimizer state.
    pub fn optimizer(&self) -> &ModuleOptimizer {
        &self.optim
    }

    /// Takes the parameters and optimizer state out (the part is left empty).
    pub fn into_state(self) -> (Network, ModuleOptimizer) {
        (self.net, self.optim)
    }

    /// Replaces the parameters and optimizer state (a checkpoint loaded).
    pub fn set_state(&mut self, net: Network, optim: ModuleOptimizer) {
        self.net = net;
        self.optim = optim;
    }

    /// Keras' `part(x, training=...)`: the forward pass on `x`, shaped as the part's output
    /// (`[batch, units]` for a vector output, images `[batch, channels, height, width]` in
    /// [`Act::Image`]). In training mode dropout is on and BatchNormalization uses and updates
    /// its batch statistics. Activity regularizers are left out; add the weight
    /// regularizers with [`Part::regularized`].
    ///
    /// # Errors
    /// A message naming the part when `x`'s example shape is not its input shape.
    pub fn call(&mut self, x: Act, training: bool) -> Result<Act, String> {
        let (got, want) = (x.keras_shape(), self.spec.input_shape());
        if got != want {
            return Err(format!(
                "part \"{}\" takes inputs of shape {}, was called on {}",
                self.name,
                keras_shape(want),
                keras_shape(&got)
            ));
        }
        let batch = x.batch();
        let fwd = self
            .net
            .forward_graph(&self.spec, vec![x], training, &mut |_, _, _| {});
        if training && !fwd.updates.is_empty() {
            let net = std::mem::replace(&mut self.net, Network { layers: Vec::new() });
            self.net = net.apply_updates(&self.spec, fwd.updates);
        }
        Ok(shaped(fwd.output, batch, self.spec.output_shape()))
    }

    /// `loss` plus the part's weight regularization penalties (Keras' `model.losses`).
    pub fn regularized(&self, loss: Tensor<1>) -> Tensor<1> {
        self.net.regularized(&self.spec, loss, None)
    }

    /// One update from `own` (this part's gradients): clipping, the optimizer step, the
    /// weight constraints.
    fn update(&mut self, mut own: GradientsParams) {
        if let Some(c) = &self.clipping {
            own = c.apply(&self.net, own);
        }
        let net = std::mem::replace(&mut self.net, Network { layers: Vec::new() });
        self.net = self
            .optim
            .step(self.rate, net, own)
            .apply_constraints(&self.spec);
    }
}

/// `rows` (`[batch * positions, units]`, Keras order) shaped as one example's `shape`.
fn shaped(rows: Tensor<2>, batch: usize, shape: &[usize]) -> Act {
    match *shape {
        [_] => Act::Flat(rows),
        [s, f] => Act::Seq(rows.reshape([batch, s, f])),
        [h, w, c] => Act::from_keras_image(rows.reshape([batch, h, w, c])),
        [d, h, w, c] => Act::from_keras_volume(rows.reshape([batch, d, h, w, c])),
        _ => Act::Flat(rows.reshape([batch as i64, -1])),
    }
}

/// How [`Parts::apply_gradients`] combines one replica's gradients with the other replicas'
/// under a distribution strategy (`mirrored`, `multi_worker_mirrored`); the strategy sets it,
/// a step never sees it.
pub trait CrossReplica: Send {
    /// This replica's examples over the global batch's: the gradients of its loss (a mean over
    /// its examples) are scaled by it, so that their sum over the replicas is the gradient of
    /// the global batch's mean loss (`tf.nn.compute_average_loss`).
    fn share(&self) -> f64;

    /// Each of `grads` (the gradients of `nets`' parameters, in order; `names` are the
    /// parts') summed over the replicas (the all-reduce, `ReduceOp.SUM`). Every replica calls
    /// it the same number of times, with the same parts.
    ///
    /// # Errors
    /// A message when another replica failed or called it with other parts.
    fn all_reduce(
        &mut self,
        names: &[&str],
        nets: &[&Network],
        grads: Vec<GradientsParams>,
    ) -> Result<Vec<GradientsParams>, String>;
}

/// The networks of a custom step: the compiled model itself (`main`) and the extra parts.
pub struct Parts {
    parts: Vec<Part>,
    /// The dynamic loss scale (`mixed_float16`), shared by every `apply_gradients` call.
    loss_scale: Option<LossScale>,
    /// Under a distribution strategy: how gradients are combined across replicas.
    replica: Option<Box<dyn CrossReplica>>,
    /// The random generator's seeds for this step (see [`Parts::start_draws`]).
    draws: Option<Draws>,
}

/// Where a step's random draws come from: the step's seed, the replica, and how many
/// `apply_gradients` calls the step made so far.
#[derive(Debug, Clone)]
struct Draws {
    seed: u64,
    replica: usize,
    applied: u64,
    device: Device,
}

/// The seed of replica `replica`'s draws after the step's `applied`-th `apply_gradients`:
/// the step's own seed for replica 0 before any, SplitMix64's finalizer over the three
/// otherwise, so neither replicas nor the stretches between two updates share a stream.
pub fn draw_seed(seed: u64, replica: usize, applied: u64) -> u64 {
    if replica == 0 && applied == 0 {
        return seed;
    }
    let mut z = seed
        ^ (replica as u64).wrapping_mul(0xD1B5_4A32_D192_ED03)
        ^ applied.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts")
            .field("parts", &self.parts)
            .field("replicated", &self.replica.is_some())
            .finish()
    }
}

impl Parts {
    /// `main` first, then the extra parts.
    pub fn new(main: Part, extra: Vec<Part>) -> Parts {
        let mut parts = Vec::with_capacity(1 + extra.len());
        parts.push(main);
        parts.extend(extra);
        Parts {
            parts,
            loss_scale: None,
            replica: None,
            draws: None,
        }
    }

    /// A copy for another replica: the same weights, optimizer states and loss scale, with
    /// `replica` combining its gradients with the others'.
    pub fn replica(&self, replica: Box<dyn CrossReplica>) -> Parts {
        Parts {
            parts: self.parts.clone(),
            loss_scale: self.loss_scale,
            replica: Some(replica),
            draws: None,
        }
    }

    /// Seeds `device`'s random generator for replica `replica` of a step seeded with `seed`,
    /// and again after each `apply_gradients` ([`draw_seed`]): a replica's draws then depend
    /// on the step, the replica and its position in the step only, not on what other replicas
    /// drew meanwhile, so in-process replicas draw what MPI workers draw, and replica 0 what
    /// one device draws.
    pub fn start_draws(&mut self, seed: u64, replica: usize, device: &Device) {
        device.seed(draw_seed(seed, replica, 0));
        self.draws = Some(Draws {
            seed,
            replica,
            applied: 0,
            device: device.clone(),
        });
    }

    /// Reseeds after an `apply_gradients` call (see [`Parts::start_draws`]).
    fn next_draws(&mut self) {
        if let Some(d) = self.draws.as_mut() {
            d.applied += 1;
            d.device.seed(draw_seed(d.seed, d.replica, d.applied));
        }
    }

    /// Sets how this copy's gradients are combined across replicas (`None`: one replica).
    pub fn set_cross_replica(&mut self, replica: Option<Box<dyn CrossReplica>>) {
        self.replica = replica;
    }

    /// Every part, `main` first.
    pub fn all(&self) -> &[Part] {
        &self.parts
    }

    /// Every part, `main` first, to change in place (a strategy averaging the replicas'
    /// BatchNormalization statistics).
    pub fn all_mut(&mut self) -> &mut [Part] {
        &mut self.parts
    }

    /// Scales losses in [`Parts::apply_gradients`] with `scale` (the loop's `mixed_float16`
    /// loss scale); `None`: no scaling.
    pub fn with_loss_scale(mut self, scale: Option<LossScale>) -> Parts {
        self.loss_scale = scale;
        self
    }

    /// The loss scale's state (after the step's updates).
    pub fn loss_scale(&self) -> Option<LossScale> {
        self.loss_scale
    }

    /// The main part and the extra parts, as given to [`Parts::new`].
    pub fn into_parts(mut self) -> (Part, Vec<Part>) {
        let main = self.parts.remove(0);
        (main, self.parts)
    }

    /// The compiled model.
    pub fn main(&mut self) -> &mut Part {
        &mut self.parts[0]
    }

    /// The part named `name` (`"main"`: the compiled model).
    ///
    /// # Errors
    /// The message lists the parts when none has the name.
    pub fn get(&mut self, name: &str) -> Result<&mut Part, String> {
        let names = self.names();
        match name {
            "main" => Ok(self.main()),
            _ => self
                .parts
                .iter_mut()
                .skip(1)
                .find(|p| p.name == name)
                .ok_or_else(|| format!("no part named \"{name}\"; the model has {names}")),
        }
    }

    fn names(&self) -> String {
        let mut names = vec!["main"];
        names.extend(self.parts.iter().skip(1).map(|p| p.name.as_str()));
        names.join(", ")
    }

    /// Keras' `optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))` for the
    /// parts named in `names`: one backward pass of `loss`, then each named part's update
    /// with its own optimizer (clipping and weight constraints included). Parts not named
    /// keep their weights, even when `loss` depends on them (a GAN's generator loss goes
    /// through the discriminator). Under `mixed_float16` the loss is multiplied by the loss
    /// scale before the backward pass and the gradients divided by it; when one of them is
    /// not finite, no named part is updated and the scale halves (Keras'
    /// `LossScaleOptimizer`; each call counts as one step of the scale's growth).
    ///
    /// # Errors
    /// A message naming an unknown part, or one named twice.
    pub fn apply_gradients(&mut self, loss: Tensor<1>, names: &[&str]) -> Result<(), String> {
        for (i, name) in names.iter().enumerate() {
            self.get(name)?;
            if names[..i].contains(name) {
                return Err(format!("part \"{name}\" named twice in apply_gradients"));
            }
        }
        let scale = self.loss_scale.map(|s| s.scale);
        // Under a strategy the replica's loss counts for its share of the global batch.
        let factor = scale.unwrap_or(1.0) * self.replica.as_ref().map_or(1.0, |r| r.share());
        let mut grads = match factor == 1.0 {
            true => loss.backward(),
            false => loss.mul_scalar(factor).backward(),
        };
        let mut own = Vec::with_capacity(names.len());
        for name in names {
            let net = &self.get(name)?.net;
            own.push(GradientsParams::from_module(&mut grads, net));
        }
        if let Some(replica) = self.replica.as_mut() {
            let nets: Vec<&Network> = names
                .iter()
                .map(|n| &self.parts[index_of(&self.parts, n)].net)
                .collect();
            own = replica.all_reduce(names, &nets, own)?;
        }
        self.next_draws();
        let mut finite = true;
        if let Some(s) = scale {
            for (name, g) in names.iter().zip(own.iter_mut()) {
                let (unscaled, ok) = unscale(&self.get(name)?.net, std::mem::take(g), s);
                *g = unscaled;
                finite &= ok;
            }
        }
        // Keras' LossScaleOptimizer: an overflow skips the update and halves the scale.
        if let Some(s) = self.loss_scale.as_mut()
            && s.update(finite) == ScaleUpdate::SkipAndShrink
        {
            return Ok(());
        }
        for (name, g) in names.iter().zip(own) {
            self.get(name)?.update(g);
        }
        Ok(())
    }
}

/// The index of the part named `name` (`main` is 0); the name was checked.
fn index_of(parts: &[Part], name: &str) -> usize {
    match name {
        "main" => 0,
        _ => parts
            .iter()
            .skip(1)
            .position(|p| p.name == name)
            .map_or(0, |i| i + 1),
    }
}
