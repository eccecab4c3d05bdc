//! Fuzz target `interpret`: a small random graph, decoded from the fuzz bytes, run by the
//! reference interpreter.
//!
//! The graph starts from one float input of random shape (rank 0-4, sizes 0-4, or empty with huge
//! dims beside the zero such as `[2^40, 0]`) and appends up to eight nodes, each reading earlier
//! values: the gathers (`Gather`, `GatherElements`, `GatherND`, `multigather.GatherMultiaxis`)
//! with random index tensors (int32 or int64, values mostly near the axis sizes, negative and out
//! of range included, sometimes extreme), and shape and arithmetic operators around them
//! (`Reshape`, `Transpose`, `Add`, `Slice`, `Unsqueeze`, `Squeeze`, `Concat`, `Expand`, `Tile`,
//! the pools, `DepthToSpace`/`SpaceToDepth`, `TopK`, `Einsum`). Attributes are random too (axes
//! out of range, repeated axes, unknown modes, pads and block sizes up to `i64::MAX`). Nothing checks that the graph makes sense: the interpreter must return `Ok` or
//! a clean `Err`, never panic, read out of bounds (the fuzz build runs under AddressSanitizer) or
//! allocate without bound. Constant shapes stay small, so a legitimate output stays small too.
//!
//! When the run succeeds, the graph is also rewritten (`GatherToMultiaxis`) and run again, then
//! lowered back to standard ONNX (`LowerMultiaxis`) and run again: both only move data, so the
//! outputs must be bit-identical each time.

#![no_main]

mod shared;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use multigather::ir::{AttrValue, Dim, Graph, Model, Node, StoredTensor, Type, ValueInfo};
use multigather::pass::{GatherToMultiaxis, LowerMultiaxis, RewriteConfig};
use multigather::{DataType, Tensor};
use shared::{check_same, session, Reader};

impl Reader<'_> {
    /// A small signed value in `lo..=hi`.
    fn small(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (i64::from(self.byte()) % (hi - lo + 1))
    }

    /// An index value: usually in -6..=6 (negative and past the end of a small axis), sometimes
    /// an extreme that overflows naive arithmetic.
    fn index(&mut self) -> i64 {
        match self.byte() {
            250 => i64::MAX,
            251 => i64::MIN,
            252 => i64::from(i32::MAX),
            253 => i64::from(i32::MIN),
            254 => 1 << 32,
            b => i64::from(b % 13) - 6,
        }
    }

    /// A shape of rank `0..=max_rank` with sizes `0..=4` (zero-sized axes included); one time in
    /// eight, an empty shape with huge dims beside its zero (`[2^40, 0]`), which holds no element
    /// but makes every loop over rows and every product of dims a hazard.
    fn shape(&mut self, max_rank: usize) -> Vec<usize> {
        let rank = self.below(max_rank + 1);
        if rank > 0 && self.byte() % 8 == 0 {
            let zero = self.below(rank);
            return (0..rank)
                .map(|d| match d == zero {
                    true => 0,
                    false => [1, 3, 1 << 20, 1 << 36, 1 << 40, 1 << 62][self.below(6)],
                })
                .collect();
        }
        (0..rank).map(|_| self.below(5)).collect()
    }

    /// A list of `0..=max_len` small signed values (attribute lists, axes); now and then an
    /// extreme one (`i64::MAX`, `i64::MIN`, `2^62`): values whose arithmetic overflows. (Sizes
    /// that are merely large, such as pads of 2^32, ask for memory a budget must refuse; that is
    /// the interpreter's memory budget's to test, not this target's.)
    fn ints(&mut self, max_len: usize, lo: i64, hi: i64) -> Vec<i64> {
        let n = self.below(max_len + 1);
        (0..n).map(|_| self.attribute(lo, hi)).collect()
    }

    /// An attribute value: usually in `lo..=hi`, sometimes an extreme.
    fn attribute(&mut self, lo: i64, hi: i64) -> i64 {
        match self.byte() {
            252 => i64::MAX,
            253 => i64::MIN,
            254 | 255 => 1 << 62,
            _ => self.small(lo, hi),
        }
    }
}

/// The graph under construction: the values defined so far, and a counter for fresh names.
struct Builder {
    graph: Graph,
    values: Vec<String>,
    next: usize,
}

impl Builder {
    fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }

    /// Any value defined so far.
    fn pick(&self, r: &mut Reader) -> String {
        self.values[r.below(self.values.len())].clone()
    }

    /// A new initializer of int64 values (`int32` when `narrow`) with the given dims.
    fn constant(&mut self, dims: &[usize], values: &[i64], narrow: bool) -> String {
        let name = self.fresh("c");
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let (elem, bytes): (DataType, Vec<u8>) = if narrow {
            let b = values
                .iter()
                .flat_map(|&v| (v as i32).to_le_bytes())
                .collect();
            (DataType::Int32, b)
        } else {
            (
                DataType::Int64,
                values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            )
        };
        let t = StoredTensor::raw(Some(&name), elem, &dims, Bytes::from(bytes));
        self.graph.initializers.push(t);
        name
    }

    /// A random index tensor (rank 0-4).
    fn indices(&mut self, r: &mut Reader) -> String {
        let shape = r.shape(4);
        let values: Vec<i64> = (0..elements(&shape)).map(|_| r.index()).collect();
        let narrow = r.byte() & 1 == 1;
        self.constant(&shape, &values, narrow)
    }

    /// A 1-D int64 constant of small values (a shape, axes, starts, ...).
    fn list(&mut self, r: &mut Reader, max_len: usize, lo: i64, hi: i64) -> String {
        let v = r.ints(max_len, lo, hi);
        self.constant(&[v.len()], &v, false)
    }

    /// Appends one node chosen by the next byte; its output becomes a new value.
    fn node(&mut self, r: &mut Reader) {
        let out = self.fresh("v");
        let a = self.pick(r);
        let node = match r.below(17) {
            0 => {
                let i = self.indices(r);
                Node::new("Gather", &out, [a, i], [out.clone()])
                    .with_attr("axis", AttrValue::Int(r.small(-5, 4)))
            }
            1 => {
                let i = self.indices(r);
                Node::new("GatherElements", &out, [a, i], [out.clone()])
                    .with_attr("axis", AttrValue::Int(r.small(-5, 4)))
            }
            2 => {
                let i = self.indices(r);
                Node::new("GatherND", &out, [a, i], [out.clone()])
                    .with_attr("batch_dims", AttrValue::Int(r.small(-1, 3)))
            }
            3 => {
                let i = self.indices(r);
                let mode = ["error", "zero", "clamp", "wrap"][r.below(4)];
                Node::new("GatherMultiaxis", &out, [a, i], [out.clone()])
                    .with_domain("multigather")
                    .with_attr("axes", AttrValue::Ints(r.ints(4, -5, 4)))
                    .with_attr("mode", AttrValue::String(mode.as_bytes().to_vec()))
            }
            4 => {
                let s = self.list(r, 5, -1, 4);
                Node::new("Reshape", &out, [a, s], [out.clone()])
            }
            5 => Node::new("Transpose", &out, [a], [out.clone()])
                .with_attr("perm", AttrValue::Ints(r.ints(5, -1, 4))),
            6 => Node::new("Add", &out, [a, self.pick(r)], [out.clone()]),
            7 => {
                let starts = self.list(r, 4, -6, 6);
                let ends = self.list(r, 4, -6, 6);
                let axes = self.list(r, 4, -5, 4);
                let steps = self.list(r, 4, -3, 3);
                Node::new("Slice", &out, [a, starts, ends, axes, steps], [out.clone()])
            }
            8 => {
                let axes = self.list(r, 3, -6, 5);
                Node::new("Unsqueeze", &out, [a, axes], [out.clone()])
            }
            9 => {
                let axes = self.list(r, 3, -5, 4);
                Node::new("Squeeze", &out, [a, axes], [out.clone()])
            }
            10 => Node::new("Concat", &out, [a, self.pick(r)], [out.clone()])
                .with_attr("axis", AttrValue::Int(r.small(-5, 4))),
            11 => {
                let s = self.list(r, 5, 0, 4);
                Node::new("Expand", &out, [a, s], [out.clone()])
            }
            12 => {
                let op = ["MaxPool", "AveragePool", "LpPool"][r.below(3)];
                Node::new(op, &out, [a], [out.clone()])
                    .with_attr("kernel_shape", AttrValue::Ints(r.ints(3, 0, 3)))
                    .with_attr("pads", AttrValue::Ints(r.ints(6, -1, 3)))
                    .with_attr("strides", AttrValue::Ints(r.ints(3, 0, 3)))
            }
            13 => {
                let op = ["DepthToSpace", "SpaceToDepth"][r.below(2)];
                Node::new(op, &out, [a], [out.clone()])
                    .with_attr("blocksize", AttrValue::Int(r.attribute(0, 3)))
            }
            14 => {
                let k = self.list(r, 1, -1, 5);
                Node::new("TopK", &out, [a, k], [out.clone(), self.fresh("unused")])
                    .with_attr("axis", AttrValue::Int(r.small(-5, 4)))
                    .with_attr("largest", AttrValue::Int(r.small(0, 1)))
            }
            15 => {
                let terms = [
                    "ab,bc->ac",
                    "a,b,c->",
                    "...i,...i->...",
                    "ii->i",
                    "abc->cb",
                    "a,a->",
                ];
                let equation = terms[r.below(terms.len())];
                let inputs: Vec<String> = (0..equation
                    .split("->")
                    .next()
                    .map_or(1, |l| l.split(',').count()))
                    .map(|_| self.pick(r))
                    .collect();
                Node::new("Einsum", &out, inputs, [out.clone()])
                    .with_attr("equation", AttrValue::String(equation.as_bytes().to_vec()))
            }
            _ => {
                let repeats = self.list(r, 4, 0, 3);
                Node::new("Tile", &out, [a, repeats], [out.clone()])
            }
        };
        self.graph.add_node(node);
        // Every value is a graph output, so every node runs and is compared.
        self.graph.outputs.push(ValueInfo::untyped(&out));
        self.values.push(out);
    }
}

/// The element count of a shape the reader drew: 0 when a dim is 0, whatever the others are.
fn elements(shape: &[usize]) -> usize {
    if shape.contains(&0) {
        0
    } else {
        shape.iter().product()
    }
}

/// Decodes a model and its input from the fuzz bytes; `None` when the input is a shape the
/// tensor type refuses (an empty shape whose other dims multiply past `usize`, which a user's
/// input file could not produce either: reading it is a clean error).
fn build(r: &mut Reader) -> Option<(Model, Tensor)> {
    let shape = r.shape(4);
    let values: Vec<f32> = (0..elements(&shape)).map(|_| f32::from(r.byte())).collect();
    let input = Tensor::from_vec(DataType::Float, &shape, values).ok()?;
    let dims = shape.iter().map(|&d| Dim::Known(d as i64)).collect();
    let mut b = Builder {
        graph: Graph::new("fuzz"),
        values: vec!["x".to_owned()],
        next: 0,
    };
    b.graph
        .inputs
        .push(ValueInfo::new("x", Type::tensor(DataType::Float, dims)));
    for _ in 0..1 + r.below(8) {
        b.node(r);
    }
    let mut model = Model::new(b.graph, 18);
    model.ensure_opset("multigather", 1);
    Some((model, input))
}

fuzz_target!(|data: &[u8]| {
    let Some((model, input)) = build(&mut Reader(data)) else {
        return;
    };
    let feeds = vec![("x".to_owned(), input)];
    let Ok(expected) = session(&model, None).run(feeds.clone()) else {
        return;
    };
    // The run succeeded. The rewrite and the lowering only move data, so the rewritten model,
    // and the rewritten model lowered back to standard ONNX, must compute exactly the same.
    let mut rewritten = model.clone();
    if GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default()).is_err() {
        return;
    }
    check_same(&model, &rewritten, "rewritten", &feeds, &expected, None);
    // One known difference, left alone: `GatherMultiaxis` reads no index when its output is
    // empty, while the standard gathers it lowers to check every index, so a lowered model may
    // fail where some output is empty.
    if expected.iter().any(|(_, t)| t.is_empty()) {
        return;
    }
    if LowerMultiaxis::lower(&mut rewritten).is_ok() {
        let stage = "rewritten and lowered";
        check_same(&model, &rewritten, stage, &feeds, &expected, None);
    }
});
