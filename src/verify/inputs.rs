//! Inputs for a verification run: the ones the user gives, and the rest drawn so that the model
//! can take them.
//!
//! Why one file: the three rules feed one another (dim sizes, then index ranges traced through the
//! graph, then the size search) over one walk of the graph.
//!
//! The rules, in the order they apply (README "Inputs that `verify` draws" says the same):
//!
//! 1. **Sizes of symbolic dims.** First match wins: `--dim NAME=VALUE`; the size a given input
//!    has where its declaration names the dim; the size the graph requires (a symbolic dim that
//!    meets a known size above 1 in a broadcasting operator, in the contracted axis of `MatMul` /
//!    `Gemm` or in the kept axes of `Concat`); otherwise 1. A dim an input leaves unnamed is
//!    named `INPUT[AXIS]` (`--dim 'input[1]=512'`) and chosen the same way.
//! 2. **Index inputs.** An integer input that reaches the indices of a gather (`Gather`,
//!    `GatherElements`, `GatherND`, `GatherMultiaxis`) or a scatter (`Scatter`,
//!    `ScatterElements`, `ScatterND`: the segment sums of graph networks) through operators
//!    that keep its values (`Identity`, `Cast`, `Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`,
//!    `Expand`, `Transpose`, `Tile`, `Concat`, `Where`, `Add` / `Sub` of a constant, which shift
//!    them, and those that select some of them: `Slice`, `Split` and the data of a gather, as
//!    when a row of an `edge_index` is taken) is drawn within the indexed dimension, negative
//!    values included where the operator's opset allows them (`[-d, d)`; `[0, d)` for `Gather`
//!    before opset 11 and for the scatters). Calls of model-local functions are followed into
//!    their bodies. When several take it, the ranges are intersected. Other integers are drawn in `[-100, 100)` (unsigned `[0, 200)`),
//!    floats in `[-1, 1)`.
//! 3. **When the model fails on them** ([`draw_runnable`]): the dims that rule 1 left at 1 and
//!    that are not only the first axis of inputs of rank 2 or more (a batch) take, together,
//!    the sizes 2, 4, 8, … up to the first power of two at least the product of the strides of
//!    the convolutions and pools and at least their largest kernel extent (64 when the graph has
//!    neither), at most 4096, until the model runs; then, when there are several, each alone
//!    with the others at 1 (a recurrent state's unnamed batch axis must stay the input's). The search stops early on a failure that
//!    larger sizes cannot cure (an unsupported operator, the memory budget).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::Rng;
use crate::error::{Error, Result};
use crate::infer::TypeEnv;
use crate::ir::{canonical_domain, is_onnx_domain, Dim, Graph, Model, Node, Value};
use crate::ops::{GatherAttributes, GatherKind};
use crate::tensor::Tensor;
use crate::DataType;

/// What to feed a verification run: inputs given by the user, and how to draw the others.
#[derive(Clone, Debug, Default)]
pub struct DrawOptions {
    /// Seed of the drawn values.
    pub seed: u64,
    /// Sizes of symbolic dims (`--dim NAME=VALUE`).
    pub dims: HashMap<String, usize>,
    /// Inputs given as they are (`--input NAME=FILE`, `--inputs DIR`): tensors, and the
    /// sequences and optionals no rule draws.
    pub given: Vec<(String, Value)>,
}

/// One input of a run: given, or drawn with which shape and values.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InputChoice {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    /// False when the user gave this input.
    pub drawn: bool,
    /// The range of the drawn values, `[low, high)`.
    pub range: Option<String>,
    /// Why that range (the gathers whose indices the input reaches).
    pub reason: Option<String>,
}

/// The size chosen for one symbolic dim, and where it came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DimChoice {
    pub name: String,
    pub size: usize,
    /// `--dim`, `input 'x'`, the node that requires it, `default`, or `searched`.
    pub source: String,
}

/// The inputs of a run, in the graph's input order, and how each was chosen.
#[derive(Clone, Debug, Default)]
pub struct Drawn {
    pub inputs: Vec<(String, Value)>,
    pub choices: Vec<InputChoice>,
    pub dims: Vec<DimChoice>,
}

impl Drawn {
    /// One line per drawn input (`x: float[1, 3] in [-1, 1)`), then the symbolic dims.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .choices
            .iter()
            .map(|c| {
                let what = if c.drawn { "drawn" } else { "given" };
                let mut s = format!("{what} {}: {}{:?}", c.name, c.dtype, c.shape);
                if let Some(r) = &c.range {
                    s += &format!(" in {r}");
                }
                if let Some(r) = &c.reason {
                    s += &format!(" ({r})");
                }
                s
            })
            .collect();
        if !self.dims.is_empty() {
            let dims: Vec<String> = self
                .dims
                .iter()
                .map(|d| format!("{}={} ({})", d.name, d.size, d.source))
                .collect();
            lines.push(format!("dims: {}", dims.join(", ")));
        }
        lines
    }

    /// The drawn inputs and their shapes on one line: `x float[1, 3], ids int64[4]`.
    pub fn shapes(&self) -> String {
        let drawn: Vec<String> = self
            .choices
            .iter()
            .filter(|c| c.drawn)
            .map(|c| format!("{} {}{:?}", c.name, c.dtype, c.shape))
            .collect();
        drawn.join(", ")
    }
}

/// Inputs for every graph input that is not an initializer: the given ones, the rest drawn by
/// the rules of this module (sizes of symbolic dims, index ranges).
///
/// # Example
/// An int64 input used as `Gather` indices into an axis of size 5 is drawn in `[-5, 5)`:
/// ```
/// use multigather::ir::{AttrValue, Dim, Graph, Model, Node, Type, ValueInfo};
/// use multigather::verify::{draw_inputs, DrawOptions};
/// use multigather::DataType;
/// let mut g = Graph::new("g");
/// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, vec![Dim::Known(5)])));
/// g.inputs.push(ValueInfo::new("i", Type::tensor(DataType::Int64, vec![Dim::Symbolic("n".into())])));
/// g.add_node(Node::new("Gather", "g", ["x", "i"], ["y"]).with_attr("axis", AttrValue::Int(0)));
/// let options = DrawOptions { dims: [("n".to_string(), 8)].into(), ..Default::default() };
/// let drawn = draw_inputs(&Model::new(g, 13), &options)?;
/// assert_eq!(drawn.choices[1].shape, [8]);
/// assert_eq!(drawn.choices[1].range.as_deref(), Some("[-5, 5)"));
/// let ids = drawn.inputs[1].1.as_tensor().unwrap().as_slice::<i64>()?;
/// assert!(ids.iter().all(|&v| (-5..5).contains(&v)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn draw_inputs(model: &Model, options: &DrawOptions) -> Result<Drawn> {
    let env = TypeEnv::infer(&model.graph, &model.opset_imports, TypeEnv::empty());
    let dims = choose_dims(model, &env, options);
    draw_with(model, &env, options, dims)
}

/// What [`draw_runnable`] found.
#[derive(Debug)]
pub enum Attempt<T> {
    /// The model ran on `drawn` and returned `result`; `tried` lists the sizes of the searched
    /// dims that failed before.
    Ran {
        drawn: Drawn,
        result: T,
        tried: Vec<usize>,
    },
    /// No inputs the rules draw let the model run. `drawn` and `error` are the first attempt's,
    /// `free` the dims that a `--dim` could set, `tried` the other sizes tried.
    Failed {
        drawn: Drawn,
        error: Error,
        free: Vec<String>,
        tried: Vec<usize>,
    },
}

/// Draws inputs (see [`draw_inputs`]) and calls `run` on them; while `run` fails, draws again
/// with larger sizes for the symbolic dims no rule fixed (module docs, rule 3).
///
/// # Example
/// A window of 4 must fit in the drawn `n`: 1 fails, 2 fails, 4 runs.
/// ```
/// use multigather::ir::{AttrValue, Dim, Graph, Model, Node, Type, ValueInfo};
/// use multigather::verify::{draw_runnable, Attempt, DrawOptions};
/// use multigather::{DataType, Error};
/// let mut g = Graph::new("g");
/// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, vec![Dim::Symbolic("n".into())])));
/// let model = Model::new(g, 13);
/// let attempt = draw_runnable(&model, &DrawOptions::default(), |inputs| {
///     let n = inputs[0].1.as_tensor().unwrap().shape()[0];
///     if n < 4 { Err(Error::Eval(format!("window of 4 does not fit in {n}"))) } else { Ok(n) }
/// })?;
/// let Attempt::Ran { result, tried, .. } = attempt else { panic!() };
/// assert_eq!((result, tried), (4, vec![1, 2]));
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn draw_runnable<T>(
    model: &Model,
    options: &DrawOptions,
    mut run: impl FnMut(&[(String, Value)]) -> Result<T>,
) -> Result<Attempt<T>> {
    let env = TypeEnv::infer(&model.graph, &model.opset_imports, TypeEnv::empty());
    let dims = choose_dims(model, &env, options);
    let first = draw_with(model, &env, options, dims.clone())?;
    let error = match run(&first.inputs) {
        Ok(result) => {
            return Ok(Attempt::Ran {
                drawn: first,
                result,
                tried: Vec::new(),
            })
        }
        Err(e) => e,
    };
    let free = searchable_dims(model, &dims);
    let mut tried = vec![1];
    // All free dims together, then (when there are several) each alone, the others left at 1:
    // an unnamed batch axis that is not an input's first one must keep the size of the others.
    let alone: Vec<&[String]> = match free.len() {
        0 | 1 => Vec::new(),
        _ => free.chunks(1).collect(),
    };
    let sizes = candidate_sizes(&model.graph);
    'search: for group in std::iter::once(free.as_slice()).chain(alone) {
        if group.is_empty() {
            continue;
        }
        for &size in &sizes {
            let mut dims = dims.clone();
            for d in dims.iter_mut().filter(|d| group.contains(&d.name)) {
                d.size = size;
                d.source = "searched".into();
            }
            // A size too large to draw ends the search: larger ones would be too.
            let Ok(drawn) = draw_with(model, &env, options, dims) else {
                break;
            };
            match run(&drawn.inputs) {
                Ok(result) => {
                    return Ok(Attempt::Ran {
                        drawn,
                        result,
                        tried,
                    });
                }
                // No size cures it, for this group or another.
                Err(e) if !may_depend_on_sizes(&e) => break 'search,
                Err(_) if !tried.contains(&size) => tried.push(size),
                Err(_) => {}
            }
        }
    }
    tried.retain(|&s| s != 1);
    Ok(Attempt::Failed {
        drawn: first,
        error,
        free,
        tried,
    })
}

/// Whether a run's failure may go away with other input sizes: not an operator or construct
/// the interpreter does not support, nor a memory budget or limit (larger sizes only make those
/// worse).
fn may_depend_on_sizes(e: &Error) -> bool {
    match e {
        Error::AtNode { cause, .. } | Error::Pass { cause, .. } => may_depend_on_sizes(cause),
        Error::Unsupported(_) | Error::Tensor(_) | Error::Limit(_) => false,
        _ => true,
    }
}

/// Random inputs for every graph input that is not an initializer, with the symbolic dims in
/// `dims` (the others by the rules of [`draw_inputs`]).
///
/// # Example
/// ```
/// use multigather::ir::{Dim, Graph, Model, Type, ValueInfo};
/// use multigather::DataType;
/// let mut g = Graph::new("g");
/// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, vec![Dim::Symbolic("n".into()), Dim::Known(2)])));
/// let model = Model::new(g, 13);
/// let dims = [("n".to_string(), 3)].into_iter().collect();
/// let inputs = multigather::verify::random_inputs(&model, 7, &dims)?;
/// assert_eq!(inputs[0].0, "x");
/// assert_eq!(inputs[0].1.shape(), &[3, 2]);
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn random_inputs(
    model: &Model,
    seed: u64,
    dims: &HashMap<String, usize>,
) -> Result<Vec<(String, Tensor)>> {
    let options = DrawOptions {
        seed,
        dims: dims.clone(),
        given: Vec::new(),
    };
    // Nothing is given, so every input is drawn, and drawn inputs are tensors.
    Ok(draw_inputs(model, &options)?
        .inputs
        .into_iter()
        .filter_map(|(name, v)| v.into_tensor().ok().map(|t| (name, t)))
        .collect())
}

/// The graph inputs a run needs (not initializers), in order.
fn runtime_inputs(graph: &Graph) -> impl Iterator<Item = &crate::ir::ValueInfo> {
    graph
        .inputs
        .iter()
        .filter(|i| graph.initializer(&i.name).is_none())
}

/// Rule 1: the size of every symbolic dim of the inputs, with where it came from.
fn choose_dims(model: &Model, env: &TypeEnv, options: &DrawOptions) -> Vec<DimChoice> {
    let graph = &model.graph;
    let given: HashMap<&str, &Tensor> = options
        .given
        .iter()
        .filter_map(|(n, v)| Some((n.as_str(), v.as_tensor()?)))
        .collect();
    let mut from_inputs: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for input in runtime_inputs(graph) {
        let (Some(t), Some(dims)) = (given.get(input.name.as_str()), declared_dims(input)) else {
            continue;
        };
        if t.shape().len() != dims.len() {
            continue;
        }
        for (d, &size) in dims.iter().zip(t.shape()) {
            if let Dim::Symbolic(s) = d {
                from_inputs
                    .entry(s.clone())
                    .or_insert_with(|| (size, format!("input '{}'", input.name)));
            }
        }
    }
    let required = required_sizes(graph, env);
    let mut out: Vec<DimChoice> = Vec::new();
    let mut seen = HashSet::new();
    for input in runtime_inputs(graph) {
        for d in declared_dims(input).unwrap_or_default() {
            let Dim::Symbolic(s) = &d else { continue };
            if !seen.insert(s.clone()) {
                continue;
            }
            let (size, source) = if let Some(&v) = options.dims.get(s) {
                (v, "--dim".to_owned())
            } else if let Some((v, why)) = from_inputs.get(s) {
                (*v, why.clone())
            } else if let Some((v, why)) = required.get(s) {
                (*v, why.clone())
            } else {
                (1, "default".to_owned())
            };
            out.push(DimChoice {
                name: s.clone(),
                size,
                source,
            });
        }
    }
    out
}

/// The dims an input declares, with each dim it leaves unnamed (neither a size nor a name)
/// named `INPUT[AXIS]`, so that unnamed dims are chosen, searched and set by `--dim` as named
/// ones are.
fn declared_dims(input: &crate::ir::ValueInfo) -> Option<Vec<Dim>> {
    let dims = &input.tensor_type()?.shape.as_ref()?.dims;
    Some(
        dims.iter()
            .enumerate()
            .map(|(k, d)| match d {
                Dim::Unknown => Dim::Symbolic(format!("{}[{k}]", input.name)),
                d => d.clone(),
            })
            .collect(),
    )
}

/// Symbolic dims the graph ties to a known size above 1: operands of a broadcasting operator
/// aligned from the right, the contracted axes of `MatMul` and `Gemm`, the kept axes of
/// `Concat`. The first node that says so wins, and is named.
fn required_sizes(graph: &Graph, env: &TypeEnv) -> BTreeMap<String, (usize, String)> {
    let mut out = BTreeMap::new();
    for (_, node) in graph.nodes() {
        if !is_onnx_domain(&node.domain) {
            continue;
        }
        let dims = |i: usize| node.inputs.get(i).and_then(|n| env.dims(n));
        // Groups of dims that must be equal (or, when broadcasting, 1).
        let mut groups: Vec<Vec<&Dim>> = Vec::new();
        match node.op_type.as_str() {
            "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod" | "Equal" | "Less" | "LessOrEqual"
            | "Greater" | "GreaterOrEqual" | "And" | "Or" | "Xor" | "Max" | "Min" | "Sum"
            | "Mean" | "Where" | "PRelu" | "BitShift" | "BitwiseAnd" | "BitwiseOr"
            | "BitwiseXor" => {
                let operands: Vec<&[Dim]> = (0..node.inputs.len()).filter_map(dims).collect();
                let rank = operands.iter().map(|d| d.len()).max().unwrap_or(0);
                for k in 1..=rank {
                    groups.push(
                        operands
                            .iter()
                            .filter_map(|d| d.len().checked_sub(k).map(|i| &d[i]))
                            .collect(),
                    );
                }
            }
            "MatMul" => {
                if let (Some(a), Some(b)) = (dims(0), dims(1)) {
                    let inner_b = if b.len() >= 2 { b.len() - 2 } else { 0 };
                    if let (Some(x), Some(y)) = (a.last(), b.get(inner_b)) {
                        groups.push(vec![x, y]);
                    }
                }
            }
            "Gemm" => {
                if let (Some(a), Some(b)) = (dims(0), dims(1)) {
                    let ta = node.attr_int("transA", 0).unwrap_or(0) != 0;
                    let tb = node.attr_int("transB", 0).unwrap_or(0) != 0;
                    let x = a.get(usize::from(!ta));
                    let y = b.get(usize::from(tb));
                    if let (Some(x), Some(y)) = (x, y) {
                        groups.push(vec![x, y]);
                    }
                }
            }
            "Concat" => {
                let operands: Vec<&[Dim]> = (0..node.inputs.len()).filter_map(dims).collect();
                let rank = operands.first().map_or(0, |d| d.len());
                let axis = node.attr_int("axis", 0).unwrap_or(0);
                let axis = if axis < 0 { axis + rank as i64 } else { axis };
                for k in (0..rank).filter(|&k| k as i64 != axis) {
                    groups.push(operands.iter().filter_map(|d| d.get(k)).collect());
                }
            }
            _ => {}
        }
        for group in groups {
            let known: HashSet<i64> = group
                .iter()
                .filter_map(|d| match d {
                    Dim::Known(v) if *v > 1 => Some(*v),
                    _ => None,
                })
                .collect();
            let [size] = known.into_iter().collect::<Vec<_>>()[..] else {
                continue;
            };
            for d in group {
                if let Dim::Symbolic(s) = d {
                    out.entry(s.clone()).or_insert_with(|| {
                        let why = format!("node '{}' ({}) needs {size}", node.name, node.op_type);
                        (size as usize, why)
                    });
                }
            }
        }
    }
    out
}

/// Rule 3: the dims left at their default that are not only a batch axis.
fn searchable_dims(model: &Model, dims: &[DimChoice]) -> Vec<String> {
    let mut batch_only: HashMap<String, bool> = HashMap::new();
    for input in runtime_inputs(&model.graph) {
        let Some(declared) = declared_dims(input) else {
            continue;
        };
        let rank = declared.len();
        for (k, d) in declared.into_iter().enumerate() {
            if let Dim::Symbolic(s) = d {
                let entry = batch_only.entry(s).or_insert(true);
                *entry &= k == 0 && rank >= 2;
            }
        }
    }
    let defaults: Vec<&DimChoice> = dims.iter().filter(|d| d.source == "default").collect();
    let free: Vec<String> = defaults
        .iter()
        .filter(|d| !batch_only.get(d.name.as_str()).copied().unwrap_or(false))
        .map(|d| d.name.clone())
        .collect();
    if free.is_empty() {
        // Nothing but batch axes: they are what there is to search.
        return defaults.iter().map(|d| d.name.clone()).collect();
    }
    free
}

/// Rule 3's sizes: 2, 4, … up to the first power of two at least the product of the strides
/// of the convolutions and pools and at least their largest kernel extent (64 when there are
/// none), at most 4096.
fn candidate_sizes(graph: &Graph) -> Vec<usize> {
    let (mut stride, mut kernel) = (1u64, 1u64);
    let mut any = false;
    fn visit(g: &Graph, stride: &mut u64, kernel: &mut u64, any: &mut bool) {
        for (_, node) in g.nodes() {
            for sub in node.subgraphs() {
                visit(sub, stride, kernel, any);
            }
            if !matches!(
                node.op_type.as_str(),
                "Conv"
                    | "ConvTranspose"
                    | "ConvInteger"
                    | "QLinearConv"
                    | "MaxPool"
                    | "AveragePool"
                    | "LpPool"
            ) {
                continue;
            }
            *any = true;
            let list = |name| node.attr_ints(name).ok().flatten().unwrap_or(&[]);
            let s = list("strides")
                .iter()
                .copied()
                .max()
                .unwrap_or(1)
                .clamp(1, 4096);
            *stride = stride.saturating_mul(s as u64).min(1 << 20);
            let dilations = list("dilations");
            for (k, &extent) in list("kernel_shape").iter().enumerate() {
                let d = dilations.get(k).copied().unwrap_or(1).clamp(1, 4096);
                let e = extent.clamp(1, 4096).saturating_sub(1) * d + 1;
                *kernel = (*kernel).max(e as u64);
            }
        }
    }
    visit(graph, &mut stride, &mut kernel, &mut any);
    let cap = if any { stride.max(kernel) } else { 64 }
        .clamp(2, 4096)
        .next_power_of_two() as usize;
    (1..=12)
        .map(|k| 1usize << k)
        .take_while(|&s| s <= cap)
        .collect()
}

/// Draws every input not given, with the symbolic dims of `dims`.
fn draw_with(
    model: &Model,
    env: &TypeEnv,
    options: &DrawOptions,
    dims: Vec<DimChoice>,
) -> Result<Drawn> {
    let graph = &model.graph;
    let sizes: HashMap<String, usize> = dims.iter().map(|d| (d.name.clone(), d.size)).collect();
    let bounds = index_bounds(model, env, &sizes);
    let mut rng = Rng::new(options.seed);
    let mut drawn = Drawn {
        dims,
        ..Drawn::default()
    };
    for input in runtime_inputs(graph) {
        if let Some((_, v)) = options.given.iter().find(|(n, _)| *n == input.name) {
            let (dtype, shape) = described(v);
            drawn.choices.push(InputChoice {
                name: input.name.clone(),
                dtype,
                shape,
                drawn: false,
                range: None,
                reason: None,
            });
            drawn.inputs.push((input.name.clone(), v.clone()));
            continue;
        }
        let ty = input.tensor_type().ok_or_else(|| {
            Error::Unsupported(format!(
                "input '{}' is not a tensor, so no random value can be drawn for it",
                input.name
            ))
        })?;
        let elem = ty.elem.ok_or_else(|| {
            Error::Unsupported(format!("input '{}' has no element type", input.name))
        })?;
        let shape: Vec<usize> = match declared_dims(input) {
            Some(dims) => dims.iter().map(|d| resolve(d, &sizes)).collect(),
            None => {
                return Err(Error::Unsupported(format!(
                    "input '{}' has an unknown rank; give its value with --input {}=FILE",
                    input.name, input.name
                )))
            }
        };
        let bound = bounds.get(&input.name).filter(|_| is_integer(elem));
        let (tensor, range) = random_tensor(elem, &shape, bound, &mut rng)?;
        drawn.choices.push(InputChoice {
            name: input.name.clone(),
            dtype: elem.to_string(),
            shape,
            drawn: true,
            range,
            reason: bound.map(|b| b.reasons.join(", ")),
        });
        drawn
            .inputs
            .push((input.name.clone(), Value::Tensor(tensor)));
    }
    // Inputs given that the graph does not declare are passed on, for the run to refuse.
    for (name, t) in &options.given {
        if !drawn.inputs.iter().any(|(n, _)| n == name) {
            drawn.inputs.push((name.clone(), t.clone()));
        }
    }
    Ok(drawn)
}

/// A given value's type and shape as an [`InputChoice`] shows them: a tensor's element type and
/// shape, a sequence's type and length, an optional's type.
fn described(v: &Value) -> (String, Vec<usize>) {
    match v {
        Value::Tensor(t) => (t.dtype().to_string(), t.shape().to_vec()),
        Value::Sequence(s) => (s.type_text(), vec![s.len()]),
        Value::Maps(m) => (m.type_text(), vec![m.len()]),
        Value::Optional(Some(inner)) => {
            let (inner, shape) = described(inner);
            (format!("optional({inner})"), shape)
        }
        Value::Optional(None) => ("optional()".into(), Vec::new()),
    }
}

fn resolve(d: &Dim, sizes: &HashMap<String, usize>) -> usize {
    match d {
        Dim::Known(v) if *v >= 0 => *v as usize,
        Dim::Symbolic(s) => sizes.get(s).copied().unwrap_or(1),
        Dim::Known(_) | Dim::Unknown => 1,
    }
}

fn is_integer(elem: DataType) -> bool {
    matches!(
        elem,
        DataType::Int64
            | DataType::Int32
            | DataType::Int16
            | DataType::Int8
            | DataType::Uint64
            | DataType::Uint32
            | DataType::Uint16
            | DataType::Uint8
    )
}

/// The values a graph input may take where it reaches gather indices: one `[low, high)` per
/// coordinate (in the order of the last axis for `GatherND` and `GatherMultiaxis`; a single one
/// otherwise), and the gathers it feeds.
#[derive(Clone, Debug)]
struct Bound {
    coords: Vec<(i64, i64)>,
    reasons: Vec<String>,
}

impl Bound {
    /// Narrows `self` to what `other` also allows; `None` when nothing is left.
    fn intersect(&self, other: &Bound) -> Option<Bound> {
        let (a, b) = (self.collapsed(), other.collapsed());
        let coords = if self.coords.len() == other.coords.len() {
            self.coords
                .iter()
                .zip(&other.coords)
                .map(|(x, y)| (x.0.max(y.0), x.1.min(y.1)))
                .collect()
        } else {
            vec![(a.0.max(b.0), a.1.min(b.1))]
        };
        let coords: Vec<(i64, i64)> = coords;
        if coords.iter().any(|(lo, hi)| lo >= hi) {
            return None;
        }
        let mut reasons = self.reasons.clone();
        reasons.extend(other.reasons.iter().cloned());
        Some(Bound { coords, reasons })
    }

    /// The range every coordinate fits in.
    fn collapsed(&self) -> (i64, i64) {
        let lo = self.coords.iter().map(|c| c.0).max().unwrap_or(0);
        let hi = self.coords.iter().map(|c| c.1).min().unwrap_or(0);
        (lo, hi)
    }

    fn shifted(&self, low: i64, high: i64) -> Bound {
        Bound {
            coords: self
                .coords
                .iter()
                .map(|&(lo, hi)| (lo.saturating_add(low), hi.saturating_add(high)))
                .collect(),
            reasons: self.reasons.clone(),
        }
    }
}

/// Rule 2: for every graph input that reaches gather indices, the range it may take.
fn index_bounds(
    model: &Model,
    env: &TypeEnv,
    sizes: &HashMap<String, usize>,
) -> HashMap<String, Bound> {
    let mut found: HashMap<String, Bound> = HashMap::new();
    let opset = model.opset("").unwrap_or(1);
    let mut scopes = vec![&model.graph];
    collect_bounds(model, &mut scopes, env, sizes, opset, 0, &mut found);
    found
}

/// How deep calls of model-local functions are followed (recursive ones end there).
const CALL_DEPTH: usize = 16;

fn collect_bounds(
    model: &Model,
    scopes: &mut Vec<&Graph>,
    env: &TypeEnv,
    sizes: &HashMap<String, usize>,
    opset: i64,
    calls: usize,
    found: &mut HashMap<String, Bound>,
) {
    let Some(&graph) = scopes.last() else { return };
    for (_, node) in graph.nodes() {
        for sub in node.subgraphs() {
            let inner = TypeEnv::infer(sub, &model.opset_imports, env);
            scopes.push(sub);
            collect_bounds(model, scopes, &inner, sizes, opset, calls, found);
            scopes.pop();
        }
        if calls < CALL_DEPTH {
            for (argument, bound) in call_bounds(model, node, env, sizes, calls + 1) {
                trace(&argument, bound, scopes, 0, found);
            }
        }
        let Some(bound) = gather_bound(node, env, sizes, opset) else {
            continue;
        };
        if let Some(indices) = node.inputs.get(1) {
            trace(indices, bound, scopes, 0, found);
        }
    }
}

/// When `node` calls a model-local function: the ranges the gathers of its body want of the
/// call's arguments (the body typed from this call site).
fn call_bounds(
    model: &Model,
    node: &Node,
    env: &TypeEnv,
    sizes: &HashMap<String, usize>,
    calls: usize,
) -> Vec<(String, Bound)> {
    let Some(f) = model.functions.iter().find(|f| f.key() == node.call_key()) else {
        return Vec::new();
    };
    let types: Vec<_> = node.inputs.iter().map(|i| env.get(i).cloned()).collect();
    let body_env = TypeEnv::infer_with(
        &f.body,
        &f.opset_imports,
        TypeEnv::empty(),
        crate::infer::Formals::Given(&types),
    );
    let opset = crate::ir::opset_version(&f.opset_imports, "").unwrap_or(1);
    // The body is the outermost scope of its own walk: what reaches its inputs is recorded.
    let mut formals = HashMap::new();
    collect_bounds(
        model,
        &mut vec![&f.body],
        &body_env,
        sizes,
        opset,
        calls,
        &mut formals,
    );
    formals
        .into_iter()
        .filter_map(|(formal, bound)| {
            let j = f.body.inputs.iter().position(|i| i.name == formal)?;
            let argument = node.inputs.get(j).filter(|a| !a.is_empty())?;
            Some((argument.clone(), bound))
        })
        .collect()
}

/// The range of a gather's (or a scatter's) indices, one per coordinate, if its data's indexed
/// dims are known.
fn gather_bound(
    node: &Node,
    env: &TypeEnv,
    sizes: &HashMap<String, usize>,
    opset: i64,
) -> Option<Bound> {
    let data = env.dims(node.inputs.first()?)?;
    // Negative indices count from the end from opset 11; scatters are drawn non-negative, as
    // some runtimes' `ScatterND` take no negative index.
    let negatives = match node.op_type.as_str() {
        "Gather" => opset >= 11,
        "Scatter" | "ScatterND" => false,
        _ => true,
    };
    let size = |axis: i64| -> Option<(i64, i64)> {
        let r = data.len() as i64;
        let a = if axis < 0 { axis + r } else { axis };
        let d = match data.get(usize::try_from(a).ok()?)? {
            Dim::Unknown => return None,
            Dim::Known(v) if *v < 0 => return None,
            d => resolve(d, sizes) as i64,
        };
        Some((if negatives { -d } else { 0 }, d))
    };
    // The gathers' attributes by their typed parse, the scatters' as the gathers they mirror.
    let attrs = match GatherKind::of(node) {
        Some(kind) => kind.attributes(node).ok()?,
        None => match (canonical_domain(&node.domain), node.op_type.as_str()) {
            ("", "Scatter" | "ScatterElements") => GatherAttributes::GatherElements {
                axis: node.attr_int("axis", 0).ok()?,
            },
            ("", "ScatterND") => GatherAttributes::GatherNd {
                batch_dims: node.attr_int("batch_dims", 0).ok()?,
            },
            _ => return None,
        },
    };
    let (coords, what): (Vec<(i64, i64)>, String) = match attrs {
        GatherAttributes::Gather { axis } | GatherAttributes::GatherElements { axis } => {
            (vec![size(axis)?], format!("axis {axis}"))
        }
        GatherAttributes::GatherNd { batch_dims: batch } => {
            // The depth as the drawn inputs will have it.
            let depth = env.dims(node.inputs.get(1)?)?.last()?;
            let k = match depth {
                Dim::Known(v) if *v >= 0 => *v,
                Dim::Symbolic(_) => resolve(depth, sizes) as i64,
                _ => return None,
            };
            let coords = (0..k.min(64))
                .map(|j| size(batch + j))
                .collect::<Option<_>>()?;
            (coords, format!("batch_dims {batch}"))
        }
        GatherAttributes::Multiaxis(m) => {
            let coords = m.axes.iter().map(|&a| size(a)).collect::<Option<_>>()?;
            (coords, format!("axes {:?}", m.axes))
        }
    };
    if coords.is_empty() {
        return None;
    }
    Some(Bound {
        coords,
        reasons: vec![format!(
            "indices of '{}' ({}, {what})",
            node.name, node.op_type
        )],
    })
}

/// Follows `value` back through operators that keep its values to the graph inputs it comes
/// from, and records `bound` (what the gather accepts) for them.
fn trace(
    value: &str,
    bound: Bound,
    scopes: &[&Graph],
    depth: usize,
    found: &mut HashMap<String, Bound>,
) {
    if depth > 64 {
        return;
    }
    // The innermost scope that defines the name.
    for (level, graph) in scopes.iter().enumerate().rev() {
        if let Some(id) = graph.producer(value) {
            let node = graph.node(id);
            let scope = &scopes[..=level];
            trace_node(node, value, bound, scope, depth, found);
            return;
        }
        if graph.initializer(value).is_some() {
            return;
        }
        if graph.inputs.iter().any(|i| i.name == value) {
            if level == 0 {
                let merged = match found.get(value) {
                    Some(old) => old.intersect(&bound),
                    None => Some(bound),
                };
                match merged {
                    Some(b) => found.insert(value.to_owned(), b),
                    // Gathers that want disjoint ranges: no range serves them all.
                    None => found.remove(value),
                };
            }
            return;
        }
    }
}

fn trace_node(
    node: &Node,
    value: &str,
    bound: Bound,
    scopes: &[&Graph],
    depth: usize,
    found: &mut HashMap<String, Bound>,
) {
    let first_output = node.outputs.first().map(String::as_str) == Some(value);
    // `Split` passes its values on through every output; the others through their first.
    if !is_onnx_domain(&node.domain) || !(first_output || node.op_type == "Split") {
        return;
    }
    let first = |b: Bound, found: &mut HashMap<String, Bound>| {
        if let Some(input) = node.inputs.first() {
            trace(input, b, scopes, depth + 1, found);
        }
    };
    let (lo, hi) = bound.collapsed();
    let flat = Bound {
        coords: vec![(lo, hi)],
        reasons: bound.reasons.clone(),
    };
    match node.op_type.as_str() {
        "Identity" | "Cast" => first(bound, found),
        // Moved, repeated or selected values of the first input (a row of an edge list taken
        // by `Gather` or `Slice`, say).
        "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Expand" | "Transpose" | "Tile"
        | "Slice" | "Split" | "Gather" | "GatherElements" | "GatherND" => first(flat, found),
        "Where" => {
            for input in node.inputs.iter().skip(1) {
                trace(input, flat.clone(), scopes, depth + 1, found);
            }
        }
        "Concat" => {
            for input in &node.inputs {
                trace(input, flat.clone(), scopes, depth + 1, found);
            }
        }
        "Add" | "Sub" => {
            let (Some(a), Some(b)) = (node.inputs.first(), node.inputs.get(1)) else {
                return;
            };
            let sub = node.op_type == "Sub";
            // value = x + c (or x - c): x takes the bound shifted back by every constant value.
            let shift = |x: &str, c: &str, found: &mut HashMap<String, Bound>| {
                let Some((cmin, cmax)) = constant_range(c, scopes) else {
                    return false;
                };
                let b = if sub {
                    bound.shifted(cmax, cmin)
                } else {
                    bound.shifted(cmin.saturating_neg(), cmax.saturating_neg())
                };
                trace(x, b, scopes, depth + 1, found);
                true
            };
            if !shift(a, b, found) && !sub {
                shift(b, a, found);
            }
        }
        _ => {}
    }
}

/// The smallest and largest value of a small integer constant (an initializer or a `Constant`
/// node's value).
fn constant_range(name: &str, scopes: &[&Graph]) -> Option<(i64, i64)> {
    for graph in scopes.iter().rev() {
        let stored = if let Some(t) = graph.initializer(name) {
            Some(t)
        } else if let Some(id) = graph.producer(name) {
            let node = graph.node(id);
            if node.op_type != "Constant" {
                return None;
            }
            node.attr_tensor("value").ok()?
        } else if graph.inputs.iter().any(|i| i.name == name) {
            return None;
        } else {
            continue;
        };
        let t = stored?;
        if t.element_count().ok()? > 4096 {
            return None;
        }
        let values = t.to_i64s().ok()?;
        let lo = values.iter().copied().min()?;
        let hi = values.iter().copied().max()?;
        return Some((lo, hi));
    }
    None
}

/// A random tensor of `elem` and `shape`; integers within `bound` when given. Returns the range
/// its values were drawn from.
fn random_tensor(
    elem: DataType,
    shape: &[usize],
    bound: Option<&Bound>,
    rng: &mut Rng,
) -> Result<(Tensor, Option<String>)> {
    Tensor::check_size(elem, shape)?;
    let count: usize = shape.iter().product();
    let (low, high) = match elem {
        DataType::Uint64 | DataType::Uint32 | DataType::Uint16 | DataType::Uint8 => (0, 200),
        DataType::Bool => (0, 2),
        _ => (-100, 100),
    };
    // A bound is cut to what the element type holds (unsigned inputs take its non-negative
    // part).
    let (min, max) = match elem {
        DataType::Int8 => (i8::MIN.into(), i8::MAX.into()),
        DataType::Int16 => (i16::MIN.into(), i16::MAX.into()),
        DataType::Int32 => (i32::MIN.into(), i32::MAX.into()),
        DataType::Uint8 => (0, u8::MAX.into()),
        DataType::Uint16 => (0, u16::MAX.into()),
        DataType::Uint32 => (0, u32::MAX.into()),
        DataType::Uint64 => (0, i64::MAX),
        _ => (i64::MIN, i64::MAX),
    };
    let coords: Option<Vec<(i64, i64)>> = bound.map(|b| {
        b.coords
            .iter()
            .map(|&(lo, hi)| (lo.clamp(min, max), hi.clamp(min, max.saturating_add(1))))
            .collect()
    });
    let range = match (&coords, elem) {
        (Some(c), _) => Some(
            c.iter()
                .map(|(lo, hi)| format!("[{lo}, {hi})"))
                .collect::<Vec<_>>()
                .join(" × "),
        ),
        (None, DataType::Float | DataType::Double | DataType::Float16 | DataType::Bfloat16) => {
            Some("[-1, 1)".to_owned())
        }
        (None, DataType::Bool) => None,
        (None, e) if is_integer(e) => Some(format!("[{low}, {high})")),
        (None, _) => None,
    };
    let mut int = |i: usize| -> i64 {
        match &coords {
            Some(c) if !c.is_empty() => {
                let (lo, hi) = c[i % c.len()];
                rng.range(lo, hi)
            }
            _ => rng.range(low, high),
        }
    };
    macro_rules! ints {
        ($t:ty) => {
            Tensor::from_vec(
                elem,
                shape,
                (0..count).map(|i| int(i) as $t).collect::<Vec<$t>>(),
            )?
        };
    }
    let t = match elem {
        DataType::Float => Tensor::from_vec(
            elem,
            shape,
            (0..count).map(|_| rng.unit() as f32).collect::<Vec<f32>>(),
        )?,
        DataType::Double => Tensor::from_vec(
            elem,
            shape,
            (0..count).map(|_| rng.unit()).collect::<Vec<f64>>(),
        )?,
        DataType::Float16 => Tensor::from_vec(
            elem,
            shape,
            (0..count)
                .map(|_| half::f16::from_f64(rng.unit()))
                .collect::<Vec<_>>(),
        )?,
        DataType::Bfloat16 => Tensor::from_vec(
            elem,
            shape,
            (0..count)
                .map(|_| half::bf16::from_f64(rng.unit()))
                .collect::<Vec<_>>(),
        )?,
        DataType::Int64 => ints!(i64),
        DataType::Int32 => ints!(i32),
        DataType::Int16 => ints!(i16),
        DataType::Int8 => ints!(i8),
        DataType::Uint64 => ints!(u64),
        DataType::Uint32 => ints!(u32),
        DataType::Uint16 => ints!(u16),
        DataType::Uint8 => ints!(u8),
        DataType::Bool => ints!(u8),
        DataType::String => Tensor::from_strings(
            shape,
            (0..count)
                .map(|_| format!("s{}", rng.range(0, 100)).into_bytes())
                .collect(),
        )?,
        other => {
            let bytes = other.storage_bytes(count).unwrap_or(0);
            let data: Vec<u8> = (0..bytes).map(|_| rng.next_u64() as u8).collect();
            Tensor::from_bytes(other, shape, &data)?
        }
    };
    Ok((t, range))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, StoredTensor, Type, ValueInfo};

    /// A graph with `x: float[3, 4]`, `w: float[5]`, int64 inputs `i: [2]` and `j: [2]`, the
    /// constant `two = 2`, and `nodes`; returns the range drawn for `i`.
    fn range_of_i(opset: i64, nodes: Vec<Node>) -> Option<String> {
        let mut g = Graph::new("g");
        let t =
            |elem, dims: &[i64]| Type::tensor(elem, dims.iter().map(|&d| Dim::Known(d)).collect());
        g.inputs = vec![
            ValueInfo::new("x", t(DataType::Float, &[3, 4])),
            ValueInfo::new("w", t(DataType::Float, &[5])),
            ValueInfo::new("i", t(DataType::Int64, &[2])),
            ValueInfo::new("j", t(DataType::Int64, &[2])),
        ];
        g.initializers
            .push(StoredTensor::from_i64s(Some("two"), &[], &[2]));
        g.initializers
            .push(StoredTensor::from_i64s(Some("zero"), &[1], &[0]));
        for n in nodes {
            g.add_node(n);
        }
        let drawn = draw_inputs(&Model::new(g, opset), &DrawOptions::default()).unwrap();
        let i = drawn.choices.iter().find(|c| c.name == "i").unwrap();
        let values = drawn.inputs.iter().find(|(n, _)| n == "i").unwrap();
        let values = values.1.as_tensor().unwrap().as_slice::<i64>().unwrap();
        // The values are in the range the report gives.
        if let Some((lo, hi)) = i
            .range
            .as_deref()
            .and_then(|r| r.strip_prefix('[')?.strip_suffix(')')?.split_once(", "))
            .and_then(|(a, b)| Some((a.parse::<i64>().ok()?, b.parse::<i64>().ok()?)))
        {
            assert!(values.iter().all(|v| (lo..hi).contains(v)), "{values:?}");
        }
        i.range.clone()
    }

    fn gather(data: &str, idx: &str, axis: i64) -> Node {
        Node::new("Gather", "", [data, idx], ["y"]).with_attr("axis", AttrValue::Int(axis))
    }

    #[test]
    fn default_dims_leave_no_indexed_dimension_empty() {
        // Symbolic and unknown dims of the data default to 1: the indexed axis is never empty,
        // and the indices are drawn within it.
        let mut g = Graph::new("g");
        let data = vec![Dim::Symbolic("n".into()), Dim::Unknown];
        g.inputs = vec![
            ValueInfo::new("x", Type::tensor(DataType::Float, data)),
            ValueInfo::new("i", Type::tensor(DataType::Int64, vec![Dim::Known(3)])),
            ValueInfo::new("j", Type::tensor(DataType::Int64, vec![Dim::Known(3)])),
        ];
        g.add_node(gather("x", "i", 0));
        g.add_node(Node::new("Gather", "", ["x", "j"], ["z"]).with_attr("axis", AttrValue::Int(1)));
        let drawn = draw_inputs(&Model::new(g, 13), &DrawOptions::default()).unwrap();
        assert_eq!(drawn.choices[0].shape, [1, 1]);
        assert_eq!(drawn.choices[1].range.as_deref(), Some("[-1, 1)"));
    }

    #[test]
    fn index_ranges_follow_the_values_to_the_gather() {
        let cases: Vec<(&str, i64, Vec<Node>, &str)> = vec![
            ("direct", 13, vec![gather("x", "i", 1)], "[-4, 4)"),
            (
                "old_opset_has_no_negative_indices",
                9,
                vec![gather("x", "i", 1)],
                "[0, 4)",
            ),
            (
                "through_sub_of_a_constant",
                13,
                vec![
                    Node::new("Sub", "", ["i", "two"], ["k"]),
                    gather("x", "k", -1),
                ],
                "[-2, 6)",
            ),
            (
                "through_unsqueeze_and_concat",
                13,
                vec![
                    Node::new("Unsqueeze", "", ["i", "zero"], ["u"]),
                    Node::new("Unsqueeze", "", ["j", "zero"], ["v"]),
                    Node::new("Concat", "", ["u", "v"], ["k"]).with_attr("axis", AttrValue::Int(0)),
                    gather("x", "k", 0),
                ],
                "[-3, 3)",
            ),
            (
                "two_gathers_intersect",
                13,
                vec![
                    gather("x", "i", 0),
                    Node::new("Gather", "", ["w", "i"], ["z"]).with_attr("axis", AttrValue::Int(0)),
                ],
                "[-3, 3)",
            ),
            (
                "gathernd_coordinates_in_order",
                13,
                vec![Node::new("GatherND", "", ["x", "i"], ["y"])],
                "[-3, 3) × [-4, 4)",
            ),
            (
                "negated_values_are_not_followed",
                13,
                vec![
                    Node::new("Sub", "", ["two", "i"], ["k"]),
                    gather("x", "k", 0),
                ],
                "[-100, 100)",
            ),
            ("no_gather", 13, vec![], "[-100, 100)"),
        ];
        for (name, opset, nodes, want) in cases {
            assert_eq!(range_of_i(opset, nodes).as_deref(), Some(want), "{name}");
        }
    }

    #[test]
    fn unnamed_dims_are_named_by_their_input_and_searched_one_at_a_time() {
        // A signal `x[batch, samples]` and a state `s[2, batch, 4]`, both batches unnamed: the
        // model runs when the samples reach 8 and the two batches agree.
        let mut g = Graph::new("g");
        let unknown = |dims: Vec<Dim>| Type::tensor(DataType::Float, dims);
        g.inputs.push(ValueInfo::new(
            "x",
            unknown(vec![Dim::Unknown, Dim::Unknown]),
        ));
        g.inputs.push(ValueInfo::new(
            "s",
            unknown(vec![Dim::Known(2), Dim::Unknown, Dim::Known(4)]),
        ));
        let model = Model::new(g, 13);
        let run = |inputs: &[(String, Value)]| {
            let shape = |i: usize| inputs[i].1.as_tensor().unwrap().shape().to_vec();
            let (x, s) = (shape(0), shape(1));
            if x[1] >= 8 && x[0] == s[1] {
                Ok((x, s))
            } else {
                Err(Error::Eval(format!("{x:?} and {s:?} do not fit")))
            }
        };
        let Attempt::Ran { result, drawn, .. } =
            draw_runnable(&model, &DrawOptions::default(), run).unwrap()
        else {
            panic!("no draw ran");
        };
        assert_eq!(result, (vec![1, 8], vec![2, 1, 4]));
        let names: Vec<&str> = drawn.dims.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["x[0]", "x[1]", "s[1]"]);
        // `--dim` sets an unnamed dim by that name.
        let options = DrawOptions {
            dims: [("x[1]".to_string(), 16)].into_iter().collect(),
            ..DrawOptions::default()
        };
        let Attempt::Ran { result, .. } = draw_runnable(&model, &options, run).unwrap() else {
            panic!("no draw ran");
        };
        assert_eq!(result, (vec![1, 16], vec![2, 1, 4]));
    }

    #[test]
    fn candidate_sizes_reach_the_total_stride_and_the_widest_kernel() {
        let conv = |strides: &[i64], kernel: &[i64]| {
            Node::new("Conv", "", ["x", "w"], ["y"])
                .with_attr("strides", AttrValue::Ints(strides.to_vec()))
                .with_attr("kernel_shape", AttrValue::Ints(kernel.to_vec()))
        };
        let cases: Vec<(&str, Vec<Node>, usize)> = vec![
            ("no_convolution", vec![], 64),
            (
                "five_stride_2_layers",
                (0..5).map(|_| conv(&[2, 2], &[3, 3])).collect(),
                32,
            ),
            ("a_window_of_400", vec![conv(&[160], &[400])], 512),
            (
                "huge_strides_are_capped",
                (0..9).map(|_| conv(&[64], &[1])).collect(),
                4096,
            ),
        ];
        for (name, nodes, top) in cases {
            let mut g = Graph::new("g");
            for n in nodes {
                g.add_node(n);
            }
            let sizes = candidate_sizes(&g);
            assert_eq!(sizes.first(), Some(&2), "{name}");
            assert_eq!(sizes.last(), Some(&top), "{name}");
        }
    }
}
