//! The `.tflite` flatbuffer of a [`TfliteGraph`]: schema.fbs' `Model` (version 3, file
//! identifier `TFL3`) with one subgraph, buffer 0 the empty sentinel, one buffer per constant,
//! and a `serving_default` signature. Tables are written field by field (a field's slot is
//! `4 + 2 * its index` in the schema's table; a union takes two: its type, then its value).

use flatbuffers::{FlatBufferBuilder, TableFinishedWIPOffset, WIPOffset};

use super::{Options, TfliteGraph};

type Table = WIPOffset<TableFinishedWIPOffset>;

const fn slot(index: u16) -> u16 {
    4 + 2 * index
}

/// The options table of `o` and its `BuiltinOptions` union type (0: none).
fn options(b: &mut FlatBufferBuilder, o: &Options) -> Option<(u8, Table)> {
    if *o == Options::None {
        return None;
    }
    let new_shape = match o {
        Options::Reshape { new_shape } => Some(b.create_vector(new_shape)),
        _ => None,
    };
    let t = b.start_table();
    let kind = match o {
        Options::None => unreachable!("returned above"),
        Options::Conv2D {
            padding,
            strides,
            act,
        } => {
            b.push_slot::<i8>(slot(0), *padding as i8, 0);
            b.push_slot::<i32>(slot(1), strides[1] as i32, 0);
            b.push_slot::<i32>(slot(2), strides[0] as i32, 0);
            b.push_slot::<i8>(slot(3), *act as i8, 0);
            1
        }
        Options::Pool2D {
            padding,
            strides,
            filter,
        } => {
            b.push_slot::<i8>(slot(0), *padding as i8, 0);
            b.push_slot::<i32>(slot(1), strides[1] as i32, 0);
            b.push_slot::<i32>(slot(2), strides[0] as i32, 0);
            b.push_slot::<i32>(slot(3), filter[1] as i32, 0);
            b.push_slot::<i32>(slot(4), filter[0] as i32, 0);
            5
        }
        Options::FullyConnected { act, keep_num_dims } => {
            b.push_slot::<i8>(slot(0), *act as i8, 0);
            b.push_slot::<bool>(slot(2), *keep_num_dims, false);
            8
        }
        Options::Softmax => {
            b.push_slot_always::<f32>(slot(0), 1.0);
            9
        }
        Options::Concatenation { axis } => {
            b.push_slot_always::<i32>(slot(0), *axis);
            10
        }
        Options::Elementwise => 11,
        Options::Reshape { .. } => {
            if let Some(v) = new_shape {
                b.push_slot_always(slot(0), v);
            }
            17
        }
        Options::Reducer { keep_dims } => {
            b.push_slot::<bool>(slot(0), *keep_dims, false);
            27
        }
    };
    Some((kind, b.end_table(t)))
}

/// `OperatorCode`s of the distinct builtin codes, in first-use order, and each op's index.
fn operator_codes(b: &mut FlatBufferBuilder, g: &TfliteGraph) -> (Vec<Table>, Vec<u32>) {
    let mut codes: Vec<i32> = Vec::new();
    let mut index = Vec::new();
    for op in &g.ops {
        let i = codes.iter().position(|&c| c == op.code).unwrap_or_else(|| {
            codes.push(op.code);
            codes.len() - 1
        });
        index.push(i as u32);
    }
    let tables = codes
        .iter()
        .map(|&code| {
            let t = b.start_table();
            b.push_slot::<i8>(slot(0), code.min(127) as i8, 0);
            b.push_slot::<i32>(slot(2), 1, 1);
            b.push_slot::<i32>(slot(3), code, 0);
            b.end_table(t)
        })
        .collect();
    (tables, index)
}

/// The tensors' tables and the model's buffers (0: the empty sentinel).
fn tensors_and_buffers(b: &mut FlatBufferBuilder, g: &TfliteGraph) -> (Vec<Table>, Vec<Table>) {
    let empty = b.start_table();
    let mut buffers = vec![b.end_table(empty)];
    let mut tensors = Vec::new();
    for t in &g.tensors {
        let buffer = match &t.data {
            Some(bytes) => {
                let data = b.create_vector(bytes);
                let bt = b.start_table();
                b.push_slot_always(slot(0), data);
                buffers.push(b.end_table(bt));
                buffers.len() as u32 - 1
            }
            None => 0,
        };
        let shape = b.create_vector(&t.shape);
        let signature = t.batched.then(|| {
            let mut s = t.shape.clone();
            s[0] = -1;
            b.create_vector(&s)
        });
        let name = b.create_string(&t.name);
        let quant = t.quant.as_ref().map(|q| {
            let scale = b.create_vector(&q.scale);
            let zero = b.create_vector(&q.zero_point);
            let qt = b.start_table();
            b.push_slot_always(slot(2), scale);
            b.push_slot_always(slot(3), zero);
            b.push_slot::<i32>(slot(6), q.dimension, 0);
            b.end_table(qt)
        });
        let tt = b.start_table();
        b.push_slot_always(slot(0), shape);
        b.push_slot::<i8>(slot(1), t.dtype, 0);
        b.push_slot::<u32>(slot(2), buffer, 0);
        b.push_slot_always(slot(3), name);
        if let Some(q) = quant {
            b.push_slot_always(slot(4), q);
        }
        if let Some(s) = signature {
            b.push_slot_always(slot(7), s);
        }
        b.push_slot::<bool>(slot(8), true, false);
        tensors.push(b.end_table(tt));
    }
    (tensors, buffers)
}

/// A `SignatureDef` side: `TensorMap`s of `(name, tensor index)`.
fn tensor_maps(b: &mut FlatBufferBuilder, named: &[(String, i32)]) -> Vec<Table> {
    named
        .iter()
        .map(|(n, i)| {
            let name = b.create_string(n);
            let t = b.start_table();
            b.push_slot_always(slot(0), name);
            b.push_slot::<u32>(slot(1), *i as u32, 0);
            b.end_table(t)
        })
        .collect()
}

/// The `.tflite` bytes of `g` with the model inputs and outputs `(name, tensor index)`.
pub fn to_bytes(
    g: &TfliteGraph,
    inputs: &[(String, i32)],
    outputs: &[(String, i32)],
    description: &str,
) -> Vec<u8> {
    let mut b = FlatBufferBuilder::new();
    let (codes, code_index) = operator_codes(&mut b, g);
    let (tensors, buffers) = tensors_and_buffers(&mut b, g);
    let mut ops = Vec::new();
    for (op, &code) in g.ops.iter().zip(&code_index) {
        let ins = b.create_vector(&op.inputs);
        let outs = b.create_vector(&op.outputs);
        let opts = options(&mut b, &op.options);
        let t = b.start_table();
        b.push_slot::<u32>(slot(0), code, 0);
        b.push_slot_always(slot(1), ins);
        b.push_slot_always(slot(2), outs);
        if let Some((kind, table)) = opts {
            b.push_slot::<u8>(slot(3), kind, 0);
            b.push_slot_always(slot(4), table);
        }
        ops.push(b.end_table(t));
    }
    let index = |v: &[(String, i32)]| v.iter().map(|(_, i)| *i).collect::<Vec<i32>>();
    let (tensors, ops) = (b.create_vector(&tensors), b.create_vector(&ops));
    let (ins, outs) = (
        b.create_vector(&index(inputs)),
        b.create_vector(&index(outputs)),
    );
    let name = b.create_string("main");
    let sg = b.start_table();
    b.push_slot_always(slot(0), tensors);
    b.push_slot_always(slot(1), ins);
    b.push_slot_always(slot(2), outs);
    b.push_slot_always(slot(3), ops);
    b.push_slot_always(slot(4), name);
    let subgraph = b.end_table(sg);
    let signature = {
        let ins = tensor_maps(&mut b, inputs);
        let outs = tensor_maps(&mut b, outputs);
        let (ins, outs) = (b.create_vector(&ins), b.create_vector(&outs));
        let key = b.create_string("serving_default");
        let t = b.start_table();
        b.push_slot_always(slot(0), ins);
        b.push_slot_always(slot(1), outs);
        b.push_slot_always(slot(2), key);
        b.end_table(t)
    };
    let codes = b.create_vector(&codes);
    let subgraphs = b.create_vector(&[subgraph]);
    let description = b.create_string(description);
    let buffers = b.create_vector(&buffers);
    let signatures = b.create_vector(&[signature]);
    let m = b.start_table();
    b.push_slot::<u32>(slot(0), 3, 0);
    b.push_slot_always(slot(1), codes);
    b.push_slot_always(slot(2), subgraphs);
    b.push_slot_always(slot(3), description);
    b.push_slot_always(slot(4), buffers);
    b.push_slot_always(slot(7), signatures);
    let model = b.end_table(m);
    b.finish(model, Some("TFL3"));
    b.finished_data().to_vec()
}
