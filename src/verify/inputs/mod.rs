//! Inputs for a verification run: the ones the user gives, and the rest drawn so that the model
//! can take them.
//!
//! The rules feed one another (dim sizes, then index ranges traced through the graph, then the
//! size search); each has a file: `sizes.rs` (rule 1, and the dims and sizes rule 3 searches),
//! `bounds.rs` (rule 2), `random.rs` (the values drawn). This file is the API and the draw that
//! puts them together.
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

mod bounds;
mod random;
mod sizes;

use std::collections::HashMap;

use serde::Serialize;

use super::Rng;
use crate::error::{Error, Result};
use crate::infer::TypeEnv;
use crate::ir::{Graph, Model, Value};
use crate::tensor::Tensor;
use bounds::index_bounds;
use random::{is_integer, random_tensor};
use sizes::{candidate_sizes, choose_dims, declared_dims, resolve, searchable_dims};

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
