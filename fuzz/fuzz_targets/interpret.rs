//! Fuzz target `interpret`: a small random graph, decoded from the fuzz bytes, run by the
//! reference interpreter.
//!
//! The graph starts from one float input of random shape (rank 0-4, sizes 0-4, or empty with huge
//! dims beside the zero such as `[2^40, 0]`) and appends up to eight nodes, each reading earlier
//! values: the gathers (`Gather`, `GatherElements`, `GatherND`, `multigather.GatherMultiaxis`)
//! with random index tensors (int32 or int64, values mostly near the axis sizes, negative and out
//! of range included, sometimes extreme), and shape and arithmetic operators around them
//! (`Reshape`, `Transpose`, `Add`, `Slice`, `Unsqueeze`, `Squeeze`, `Concat`, `Expand`, `Tile`,
//! the pools with every window attribute, `DepthToSpace`/`SpaceToDepth`, `TopK`, `Einsum`, `Pad`
//! in every mode, `Conv`/`ConvTranspose`, `Resize`, `Split`, `ConstantOfShape`, `Range`,
//! `OneHot`, `Trilu`, `ReverseSequence`, `Flatten`, `Compress`, `NonZero`). Attributes are random
//! too (axes out of range, repeated axes, unknown modes, pads, strides, dilations, block sizes and
//! sizes up to `i64::MAX`, and sizes that are merely large, such as 2^20 or 2^32). Nothing checks
//! that the graph makes sense: the interpreter must return `Ok` or a clean `Err`, never panic, read
//! out of bounds (the fuzz build runs under AddressSanitizer) or allocate without bound. The
//! session runs under a small memory budget ([`BUDGET`]), so an output that is legitimate but
//! large is refused by the budget, quickly, as a user's `--max-memory` would refuse it.
//!
//! When the run succeeds, the graph is also rewritten (`GatherToMultiaxis`) and run again, then
//! lowered back to standard ONNX (`LowerMultiaxis`) and run again: both only move data, so the
//! outputs must be bit-identical each time.

#![no_main]

mod shared;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use multigather::interp::RunOptions;
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

    /// A size (a pad, a stride, a count): usually in `lo..=hi`, sometimes merely large (2^20,
    /// 2^32: the budget's to refuse), sometimes an extreme whose arithmetic overflows.
    fn size(&mut self, lo: i64, hi: i64) -> i64 {
        match self.byte() {
            246 => 1 << 20,
            247 => 1 << 32,
            248 => (1 << 31) + 1,
            249 => -(1 << 62),
            250 => i64::MAX - 1,
            251 => 281_479_271_743_489, // (2^64 - 1) / 65535: times 65535 wraps to u64::MAX
            252 => i64::MAX,
            253 => i64::MIN,
            254 | 255 => 1 << 62,
            _ => self.small(lo, hi),
        }
    }

    /// A list of `0..=max_len` sizes (see [`Reader::size`]).
    fn sizes(&mut self, max_len: usize, lo: i64, hi: i64) -> Vec<i64> {
        let n = self.below(max_len + 1);
        (0..n).map(|_| self.size(lo, hi)).collect()
    }
}

/// The memory budget of every session the target runs: large enough for any output the small
/// shapes make, small enough that a large one is refused at once.
const BUDGET: usize = 64 << 20;

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

    /// A 1-D int64 constant of sizes (see [`Reader::size`]).
    fn size_list(&mut self, r: &mut Reader, max_len: usize, lo: i64, hi: i64) -> String {
        let v = r.sizes(max_len, lo, hi);
        self.constant(&[v.len()], &v, false)
    }

    /// A scalar int64 constant size (rank 0, or 1-D of one value).
    fn scalar(&mut self, r: &mut Reader, lo: i64, hi: i64) -> String {
        let v = r.size(lo, hi);
        let dims: &[usize] = if r.byte() & 1 == 0 { &[] } else { &[1] };
        self.constant(dims, &[v], false)
    }

    /// A float constant of `values`, 1-D.
    fn floats(&mut self, values: &[f32]) -> String {
        let name = self.fresh("f");
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = StoredTensor::raw(
            Some(&name),
            DataType::Float,
            &[values.len() as i64],
            Bytes::from(bytes),
        );
        self.graph.initializers.push(t);
        name
    }

    /// Appends one node chosen by the next byte; its output becomes a new value.
    fn node(&mut self, r: &mut Reader) {
        let out = self.fresh("v");
        let a = self.pick(r);
        let node = match r.below(29) {
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
                let node = Node::new(op, &out, [a], [out.clone()])
                    .with_attr("kernel_shape", AttrValue::Ints(r.ints(3, 0, 3)))
                    .with_attr("pads", AttrValue::Ints(r.ints(6, -1, 3)))
                    .with_attr("strides", AttrValue::Ints(r.ints(3, 0, 3)));
                window_attributes(node, r)
                    .with_attr("ceil_mode", AttrValue::Int(r.small(0, 1)))
                    .with_attr("count_include_pad", AttrValue::Int(r.small(0, 1)))
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
            16 => {
                let repeats = self.list(r, 4, 0, 3);
                Node::new("Tile", &out, [a, repeats], [out.clone()])
            }
            17 => {
                let pads = self.size_list(r, 8, -3, 3);
                let mode = ["constant", "reflect", "edge", "wrap"][r.below(4)];
                let mut inputs = vec![a, pads];
                if r.byte() & 1 == 1 {
                    inputs.push(String::new());
                    inputs.push(self.list(r, 4, -5, 4));
                }
                Node::new("Pad", &out, inputs, [out.clone()])
                    .with_attr("mode", AttrValue::String(mode.as_bytes().to_vec()))
            }
            18 => {
                let op = ["Conv", "ConvTranspose"][r.below(2)];
                let w = self.pick(r);
                let node = Node::new(op, &out, [a, w], [out.clone()])
                    .with_attr("pads", AttrValue::Ints(r.sizes(6, 0, 3)))
                    .with_attr("strides", AttrValue::Ints(r.sizes(3, 1, 3)))
                    .with_attr("group", AttrValue::Int(r.size(1, 2)));
                let node = window_attributes(node, r);
                match r.below(3) {
                    0 => node.with_attr("output_padding", AttrValue::Ints(r.sizes(3, 0, 2))),
                    1 => node.with_attr("output_shape", AttrValue::Ints(r.sizes(5, 0, 6))),
                    _ => node,
                }
            }
            19 => {
                let mode = ["nearest", "linear", "cubic"][r.below(3)];
                let coord = [
                    "half_pixel",
                    "align_corners",
                    "asymmetric",
                    "pytorch_half_pixel",
                    "tf_crop_and_resize",
                    "half_pixel_symmetric",
                ][r.below(6)];
                let node = if r.byte() & 1 == 0 {
                    let sizes = self.size_list(r, 4, 0, 6);
                    Node::new(
                        "Resize",
                        &out,
                        [a, String::new(), String::new(), sizes],
                        [out.clone()],
                    )
                    .with_attr(
                        "keep_aspect_ratio_policy",
                        AttrValue::String(
                            ["stretch", "not_larger", "not_smaller"][r.below(3)].into(),
                        ),
                    )
                } else {
                    let scales: Vec<f32> = (0..r.below(5))
                        .map(|_| {
                            [0.5, 1.0, 2.0, 3.0, 1e-30, 1e30, 0.0, -1.0, f32::NAN, 1e6][r.below(10)]
                        })
                        .collect();
                    let scales = self.floats(&scales);
                    Node::new("Resize", &out, [a, String::new(), scales], [out.clone()])
                };
                node.with_attr("mode", AttrValue::String(mode.into()))
                    .with_attr(
                        "coordinate_transformation_mode",
                        AttrValue::String(coord.into()),
                    )
                    .with_attr("antialias", AttrValue::Int(r.small(0, 1)))
                    .with_attr("exclude_outside", AttrValue::Int(r.small(0, 1)))
            }
            20 => {
                let split = self.size_list(r, 3, 0, 4);
                let second = self.fresh("split");
                Node::new("Split", &out, [a, split], [out.clone(), second])
                    .with_attr("axis", AttrValue::Int(r.small(-5, 4)))
            }
            21 => {
                let shape = self.size_list(r, 4, 0, 4);
                Node::new("ConstantOfShape", &out, [shape], [out.clone()])
            }
            22 => {
                let (start, limit, delta) = (
                    self.scalar(r, -4, 4),
                    self.scalar(r, -8, 8),
                    self.scalar(r, -2, 2),
                );
                Node::new("Range", &out, [start, limit, delta], [out.clone()])
            }
            23 => {
                let depth = self.scalar(r, 0, 5);
                let values = self.floats(&[0.0, 1.0]);
                let indices = self.indices(r);
                Node::new("OneHot", &out, [indices, depth, values], [out.clone()])
                    .with_attr("axis", AttrValue::Int(r.small(-5, 4)))
            }
            24 => {
                let k = self.scalar(r, -3, 3);
                Node::new("Trilu", &out, [a, k], [out.clone()])
                    .with_attr("upper", AttrValue::Int(r.small(0, 1)))
            }
            25 => {
                let lens = self.size_list(r, 4, 0, 4);
                let t = r.small(0, 1);
                Node::new("ReverseSequence", &out, [a, lens], [out.clone()])
                    .with_attr("time_axis", AttrValue::Int(t))
                    .with_attr("batch_axis", AttrValue::Int(1 - t))
            }
            26 => Node::new("Flatten", &out, [a], [out.clone()])
                .with_attr("axis", AttrValue::Int(r.small(-5, 5))),
            27 => {
                let condition = self.pick(r);
                let node = Node::new("Compress", &out, [a, condition], [out.clone()]);
                match r.byte() & 1 {
                    0 => node.with_attr("axis", AttrValue::Int(r.small(-5, 4))),
                    _ => node,
                }
            }
            _ => Node::new("NonZero", &out, [a], [out.clone()]),
        };
        self.graph.add_node(node);
        // Every value is a graph output, so every node runs and is compared.
        self.graph.outputs.push(ValueInfo::untyped(&out));
        self.values.push(out);
    }
}

/// `node` with random `dilations` and `auto_pad` (and, now and then, no `kernel_shape`).
fn window_attributes(node: Node, r: &mut Reader) -> Node {
    let auto_pad = ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"][r.below(4)];
    let node = node
        .with_attr("dilations", AttrValue::Ints(r.sizes(3, 1, 3)))
        .with_attr("auto_pad", AttrValue::String(auto_pad.into()));
    if r.byte() % 4 == 0 {
        node.with_attr("kernel_shape", AttrValue::Ints(r.sizes(3, 1, 3)))
    } else {
        node
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
    let options = |max_memory| RunOptions {
        max_memory: Some(max_memory),
        ..RunOptions::default()
    };
    let Ok(expected) = session(&model, &options(BUDGET)).run(feeds.clone()) else {
        return;
    };
    // The run succeeded. The rewrite and the lowering only move data, so the rewritten model,
    // and the rewritten model lowered back to standard ONNX, must compute exactly the same.
    let mut rewritten = model.clone();
    if GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default()).is_err() {
        return;
    }
    // The transformed model may hold a few more intermediate values at once than the original:
    // it gets room for them, so that only a real difference is a finding.
    let room = options(4 * BUDGET);
    check_same(&model, &rewritten, "rewritten", &feeds, &expected, &room);
    // One known difference, left alone: `GatherMultiaxis` reads no index when its output is
    // empty, while the standard gathers it lowers to check every index, so a lowered model may
    // fail where some output is empty.
    if expected.iter().any(|(_, t)| t.is_empty()) {
        return;
    }
    if LowerMultiaxis::lower(&mut rewritten).is_ok() {
        let stage = "rewritten and lowered";
        check_same(&model, &rewritten, stage, &feeds, &expected, &room);
    }
});
