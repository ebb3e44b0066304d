//! The ONNX form of a recurrent layer ([`super::recurrent`]): the loop unrolled over the
//! layer's fixed number of steps into `MatMul`, `Add`, `Mul`, `Slice` and activation nodes.
//! Unrolling keeps Keras' exact cell (any `activation`, a GRU's `reset_after` either way)
//! where ONNX's `LSTM`/`GRU`/`RNN` operators fix the gate order, the activations' set and
//! the layout.

use super::activation_onnx;
use super::recurrent::{GRU_CELL, LSTM_CELL, Recurrent};
use crate::model::args::Activation;
use crate::onnx::{Layout, OnnxGraph, OnnxValue, int};

/// The graph and names a step writes with.
struct Builder<'g> {
    g: &'g mut OnnxGraph,
    layer: String,
}

impl Builder<'_> {
    fn op(&mut self, op: &str, inputs: &[&str]) -> String {
        self.g.node(&self.layer, op, inputs, vec![])
    }
    fn act(&mut self, x: String, a: Activation) -> String {
        activation_onnx(self.g, &self.layer, x, a, Layout::Flat)
    }
    /// Columns `[k·units, (k+1)·units)` of a `[batch, gates·units]` value.
    fn gate(&mut self, z: &str, k: usize, units: usize) -> String {
        self.g.slice(&self.layer, z, 1, k * units, (k + 1) * units)
    }
    /// `a·m + b·(1 - m)` spelled `b + (a - b)·m` for a gate `m`.
    fn mix(&mut self, m: &str, a: &str, b: &str) -> String {
        let d = self.op("Sub", &[a, b]);
        let dm = self.op("Mul", &[&d, m]);
        self.op("Add", &[b, &dm])
    }
}

/// The weights the steps read, as graph values.
struct Values {
    recurrent_kernel: String,
    /// A `reset_after` GRU's recurrent bias.
    recurrent_bias: Option<String>,
    /// A GRU without `reset_after`: the `z, r` and `h` columns of the recurrent kernel.
    split_kernel: Option<(String, String)>,
}

impl<const CELL: u8> Recurrent<CELL> {
    /// Writes the layer on `x` (`[batch, steps, features]`); its weights are
    /// `<name>/<prefix><Keras name>`. Returns `[batch, units]` or, with `return_sequences`,
    /// `[batch, steps, units]`.
    pub(super) fn export(
        &self,
        g: &mut OnnxGraph,
        x: &OnnxValue,
        name: &str,
        prefix: &str,
    ) -> Result<String, String> {
        let (steps, features) = match x.shape[..] {
            [s, f] => (s, f),
            _ => return Err(format!("expects (steps, features), got {:?}", x.shape)),
        };
        let (u, n) = (self.units, self.gates() * self.units);
        let key = |w: &str| format!("{name}/{prefix}{w}");
        let kernel = g.weight(&key("kernel"), &[features, n], &[features, n])?;
        let (input_bias, values) = self.onnx_values(g, &key)?;
        let proj = g.matmul_bias(name, &x.name, &kernel, input_bias.as_deref());
        let mut b = Builder {
            g,
            layer: name.to_string(),
        };
        // The zero state, shaped [batch, units] whatever the batch.
        let mut h = {
            let zero = b.g.scalar(name, 0.0);
            let x0 = b.g.slice(name, &proj, 1, 0, 1);
            let x0 = b.g.reshape(name, &x0, &[-1, n as i64]);
            let col = b.gate(&x0, 0, u);
            b.op("Mul", &[&col, &zero])
        };
        let mut c = (CELL == LSTM_CELL).then(|| h.clone());
        let mut outputs = Vec::new();
        let order: Vec<usize> = match self.go_backwards {
            true => (0..steps).rev().collect(),
            false => (0..steps).collect(),
        };
        for t in order {
            let xt = b.g.slice(name, &proj, 1, t, t + 1);
            let xt = b.g.reshape(name, &xt, &[-1, n as i64]);
            (h, c) = self.onnx_step(&mut b, &xt, h, c, &values);
            outputs.push(h.clone());
        }
        if !self.return_sequences {
            return Ok(h);
        }
        let seq: Vec<String> = outputs
            .iter()
            .map(|o| b.g.reshape(name, o, &[-1, 1, u as i64]))
            .collect();
        let refs: Vec<&str> = seq.iter().map(String::as_str).collect();
        Ok(b.g.node(name, "Concat", &refs, vec![int("axis", 1)]))
    }

    /// The input bias (added to the projection of every step) and the step's weights.
    fn onnx_values(
        &self,
        g: &mut OnnxGraph,
        key: &dyn Fn(&str) -> String,
    ) -> Result<(Option<String>, Values), String> {
        let (u, n) = (self.units, self.gates() * self.units);
        let rk_key = key("recurrent_kernel");
        let split = CELL == GRU_CELL && !self.resets_after();
        // A GRU without reset_after reads the kernel in two parts, not whole.
        let recurrent_kernel = match split {
            true => String::new(),
            false => g.weight(&rk_key, &[u, n], &[u, n])?,
        };
        let split_kernel = match split {
            true => {
                let rk = g.weight_values(&rk_key, &[u, n])?.to_vec();
                let cols = |from: usize, to: usize| -> Vec<f32> {
                    rk.chunks(n)
                        .flat_map(|row| row[from..to].to_vec())
                        .collect()
                };
                let zr = g.named_constant(&format!("{rk_key}_zr"), &[u, 2 * u], &cols(0, 2 * u));
                let hh = g.named_constant(&format!("{rk_key}_h"), &[u, u], &cols(2 * u, n));
                Some((zr, hh))
            }
            false => None,
        };
        let (input_bias, recurrent_bias) = match (self.use_bias, self.resets_after()) {
            (false, _) => (None, None),
            (true, true) => {
                let both = g.weight_values(&key("bias"), &[2, n])?.to_vec();
                let input = g.named_constant(&format!("{}_input", key("bias")), &[n], &both[..n]);
                let rec = g.named_constant(&format!("{}_recurrent", key("bias")), &[n], &both[n..]);
                (Some(input), Some(rec))
            }
            (true, false) => (Some(g.weight(&key("bias"), &[n], &[n])?), None),
        };
        let values = Values {
            recurrent_kernel,
            recurrent_bias,
            split_kernel,
        };
        Ok((input_bias, values))
    }

    /// One step of the cell on `xt` (`[batch, gates·units]`, input bias added).
    fn onnx_step(
        &self,
        b: &mut Builder,
        xt: &str,
        h: String,
        c: Option<String>,
        v: &Values,
    ) -> (String, Option<String>) {
        let (u, act, gate) = (self.units, self.activation, self.gate_activation());
        match CELL {
            LSTM_CELL => {
                let r = b.op("MatMul", &[&h, &v.recurrent_kernel]);
                let z = b.op("Add", &[xt, &r]);
                let [i, f, cc, o] = [0, 1, 2, 3].map(|k| b.gate(&z, k, u));
                let (i, f, o) = (b.act(i, gate), b.act(f, gate), b.act(o, gate));
                let cc = b.act(cc, act);
                let kept = b.op("Mul", &[&f, &c.expect("an LSTM carry")]);
                let new = b.op("Mul", &[&i, &cc]);
                let c = b.op("Add", &[&kept, &new]);
                let ac = b.act(c.clone(), act);
                (b.op("Mul", &[&o, &ac]), Some(c))
            }
            GRU_CELL => {
                let [xz, xr, xh] = [0, 1, 2].map(|k| b.gate(xt, k, u));
                let (rz, rr, hh) = match &v.split_kernel {
                    None => {
                        let mut inner = b.op("MatMul", &[&h, &v.recurrent_kernel]);
                        if let Some(rb) = &v.recurrent_bias {
                            inner = b.op("Add", &[&inner, rb]);
                        }
                        let [rz, rr, rh] = [0, 1, 2].map(|k| b.gate(&inner, k, u));
                        (rz, rr, Err(rh))
                    }
                    Some((zr, hk)) => {
                        let inner = b.op("MatMul", &[&h, zr]);
                        let [rz, rr] = [0, 1].map(|k| b.gate(&inner, k, u));
                        (rz, rr, Ok(hk.clone()))
                    }
                };
                let z = b.op("Add", &[&xz, &rz]);
                let z = b.act(z, gate);
                let r = b.op("Add", &[&xr, &rr]);
                let r = b.act(r, gate);
                let rh = match hh {
                    Err(rh) => b.op("Mul", &[&r, &rh]),
                    Ok(hk) => {
                        let rh = b.op("Mul", &[&r, &h]);
                        b.op("MatMul", &[&rh, &hk])
                    }
                };
                let pre = b.op("Add", &[&xh, &rh]);
                let cand = b.act(pre, act);
                (b.mix(&z, &h, &cand), None)
            }
            _ => {
                let r = b.op("MatMul", &[&h, &v.recurrent_kernel]);
                let z = b.op("Add", &[xt, &r]);
                (b.act(z, act), None)
            }
        }
    }
}
