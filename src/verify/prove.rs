//! Proving a rewrite: the one procedure behind `multigather verify`, `rewrite --verify` and the
//! Python package's `verify`. Every face calls [`prove`] (or [`prove_rewrite`]) and formats the
//! [`Proof`] it returns; none decides anything of its own.
//!
//! The steps, in order: both models are checked (`Session::check`) before either runs; the
//! inputs are given or drawn ([`draw_runnable`], which searches larger sizes while the original
//! fails), under the run's memory budget; the original runs, then the rewritten model, and
//! every output is compared bit for bit; then, where a symbolic dim is shared by several inputs,
//! both run again on feeds that give it different sizes ([`dims_fed_apart`]); then a draw for
//! each branch of the main graph's `If` nodes that a constant names ([`prove_branches`]).

use serde::Serialize;

use super::inputs::{draw_runnable, Attempt, DimChoice, DrawOptions, Drawn, InputChoice};
use super::OutputComparison;
use super::{compare_fed, compare_values, dims_fed_apart, prove_branches, IfBranches};
use crate::error::Result;
use crate::interp::{RunOptions, Session};
use crate::ir::{Model, Value};
use crate::pass::{GatherToMultiaxis, RewriteConfig};
use crate::tensor::{default_budget, Arena};

/// What a proof found: the inputs both models ran on, how each output compares, and how many
/// gathers were rewritten (by [`prove_rewrite`]; 0 when the rewritten model was given).
///
/// Serialized (the command line's `verify --json`, the Python package's `verify`), it is the
/// object `{identical, rewritten_nodes, inputs, dims, outputs, branches}`.
#[derive(Clone, Debug)]
pub struct Proof {
    /// The inputs of the runs and how each was chosen.
    pub drawn: Drawn,
    /// One comparison per output of the original, then the outputs that differ on feeds that
    /// give a shared symbolic dim different sizes (named `y (with B, H fed apart)`).
    pub outputs: Vec<OutputComparison>,
    /// The gathers the rewrite replaced, when [`prove_rewrite`] made it.
    pub rewritten_nodes: usize,
    /// The branches of each `If` of the main graph that ran, and on which inputs.
    pub branches: Vec<IfBranches>,
}

impl Proof {
    /// The verdict: every output agrees bit for bit.
    pub fn identical(&self) -> bool {
        self.outputs.iter().all(|c| c.identical)
    }

    /// Whether any input was drawn (rather than given).
    pub fn drew(&self) -> bool {
        self.drawn.choices.iter().any(|c| c.drawn)
    }
}

impl Serialize for Proof {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Report<'a> {
            identical: bool,
            rewritten_nodes: usize,
            inputs: &'a [InputChoice],
            dims: &'a [DimChoice],
            outputs: &'a [OutputComparison],
            branches: &'a [IfBranches],
        }
        Report {
            identical: self.identical(),
            rewritten_nodes: self.rewritten_nodes,
            inputs: &self.drawn.choices,
            dims: &self.drawn.dims,
            outputs: &self.outputs,
            branches: &self.branches,
        }
        .serialize(serializer)
    }
}

/// Runs `original` and `rewritten` on the same inputs, given in `draw` or drawn by its rules,
/// and compares every output bit for bit (see the module docs for the steps).
///
/// A failure is an [`Error::Proof`](crate::Error::Proof) naming the step (`running the original
/// model on drawn inputs ...`); [`Error::is_unsupported`](crate::Error::is_unsupported) tells an
/// operator the interpreter lacks (the rewrite may be right, it cannot be proved by running)
/// from other failures. A difference is not an
/// error: it is a [`Proof`] that is not [`identical`](Proof::identical).
///
/// # Example
/// ```
/// use multigather::interp::RunOptions;
/// use multigather::ir::{AttrValue, Dim, Graph, Model, Node, Type, ValueInfo};
/// use multigather::pass::GatherToMultiaxis;
/// use multigather::verify::{prove, DrawOptions};
/// use multigather::DataType;
/// let mut g = Graph::new("g");
/// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, vec![Dim::Known(5)])));
/// g.inputs.push(ValueInfo::new("i", Type::tensor(DataType::Int64, vec![Dim::Known(3)])));
/// g.outputs.push(ValueInfo::untyped("y"));
/// g.add_node(Node::new("Gather", "g", ["x", "i"], ["y"]).with_attr("axis", AttrValue::Int(0)));
/// let original = Model::new(g, 13);
/// let mut rewritten = original.clone();
/// GatherToMultiaxis::rewrite(&mut rewritten, Default::default())?;
/// let proof = prove(&original, &rewritten, &DrawOptions::default(), &RunOptions::default())?;
/// assert!(proof.identical());
/// assert_eq!(proof.drawn.choices[1].range.as_deref(), Some("[-5, 5)"));
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn prove(
    original: &Model,
    rewritten: &Model,
    draw: &DrawOptions,
    options: &RunOptions,
) -> Result<Proof> {
    let model = original;
    let original = Session::with_options(model, options.clone());
    let rewritten = Session::with_options(rewritten, options.clone());
    // Both models are checked before either runs: an operator the interpreter lacks is
    // reported before any work is done.
    for (session, what) in [(&original, "original"), (&rewritten, "rewritten")] {
        session
            .check()
            .map_err(|e| e.in_step(format!("running the {what} model")))?;
    }
    let (drawn, expected) = run_original(model, &original, draw, options)?;
    let actual = rewritten
        .run_values(drawn.inputs.clone())
        .map_err(|e| e.in_step("running the rewritten model"))?;
    let mut outputs = compare_values(&expected, &actual);
    // Feeds that give a shared symbolic dim different sizes: the rewrite must mean what the
    // original means there too, result or error (`verify::dims_fed_apart`).
    if let Some((apart, split)) = dims_fed_apart(&model.graph, &drawn.inputs) {
        let what = format!("with {} fed apart", split.join(", "));
        outputs.extend(compare_fed(&original, &rewritten, apart, &what).unwrap_or_default());
    }
    // Draws that take the branches of the `If` nodes the first draw did not take.
    let branches = prove_branches(model, &original, &rewritten, &drawn.inputs);
    outputs.extend(branches.differing);
    Ok(Proof {
        drawn,
        branches: branches.ifs,
        outputs,
        rewritten_nodes: 0,
    })
}

/// Rewrites `original` in memory with the default [`RewriteConfig`] and proves the rewrite
/// ([`prove`]); the proof counts the gathers rewritten.
///
/// An error of the rewrite itself is returned as the pass gives it; every error of the proof
/// is an [`Error::Proof`](crate::Error::Proof). When the interpreter lacks an operator, the error
/// says the rewrite was made and checked statically (`cannot prove the rewrite by running it
/// (2 gathers rewritten and checked statically; ...)`).
///
/// # Example
/// ```
/// use multigather::interp::RunOptions;
/// use multigather::ir::{Dim, Graph, Model, Node, Type, ValueInfo};
/// use multigather::verify::{prove_rewrite, DrawOptions};
/// use multigather::DataType;
/// let mut g = Graph::new("g");
/// let t = |dtype, dims: [i64; 2]| Type::tensor(dtype, dims.map(Dim::Known).to_vec());
/// g.inputs.push(ValueInfo::new("x", t(DataType::Float, [4, 5])));
/// g.inputs.push(ValueInfo::new("i", t(DataType::Int64, [3, 2])));
/// g.outputs.push(ValueInfo::untyped("y"));
/// g.add_node(Node::new("GatherND", "g", ["x", "i"], ["y"]));
/// let draw = DrawOptions { seed: 1, ..Default::default() };
/// let proof = prove_rewrite(&Model::new(g, 13), &draw, &RunOptions::default())?;
/// assert!(proof.identical());
/// assert_eq!(proof.rewritten_nodes, 1);
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn prove_rewrite(original: &Model, draw: &DrawOptions, options: &RunOptions) -> Result<Proof> {
    let mut rewritten = original.clone();
    let report = GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default())?;
    let count = report.rewritten;
    match prove(original, &rewritten, draw, options) {
        Ok(proof) => Ok(Proof {
            rewritten_nodes: count,
            ..proof
        }),
        Err(e) if e.is_unsupported() => Err(e.in_step(format!(
            "cannot prove the rewrite by running it ({count} gathers rewritten and checked \
             statically; `multigather rewrite` still writes it)"
        ))),
        Err(e) => Err(e),
    }
}

/// Inputs the original model runs on, given or drawn (larger sizes searched when the first draw
/// fails), with the original's outputs. When no draw runs, the error names the drawn inputs
/// with their shapes and the `--dim` flags that would set them.
fn run_original(
    model: &Model,
    session: &Session,
    draw: &DrawOptions,
    options: &RunOptions,
) -> Result<(Drawn, Vec<(String, Value)>)> {
    // Drawn tensors count against the same budget as a run's.
    let budget = Arena::new(options.max_memory.unwrap_or_else(default_budget), false);
    let attempt = budget
        .enter(|| draw_runnable(model, draw, |inputs| session.run_values(inputs.to_vec())))
        .map_err(|e| e.in_step("drawing random inputs"))?;
    let (drawn, error, free, tried) = match attempt {
        Attempt::Ran { drawn, result, .. } => return Ok((drawn, result)),
        Attempt::Failed {
            drawn,
            error,
            free,
            tried,
        } => (drawn, error, free, tried),
    };
    if drawn.choices.iter().all(|c| !c.drawn) {
        return Err(error.in_step("running the original model"));
    }
    let hint = failure_hint(&drawn, &free, &tried);
    Err(error.in_step(format!("running the original model {hint}")))
}

/// What was drawn when the original model failed on it, and what to give instead:
/// `on drawn inputs x float[1, 3, 1, 1] with h=1, w=1 (also tried h, w = 2, 4); give sizes with
/// --dim h=VALUE --dim w=VALUE or inputs with --input NAME=FILE`.
fn failure_hint(drawn: &Drawn, free: &[String], tried: &[usize]) -> String {
    let mut hint = format!("on drawn inputs {}", drawn.shapes());
    if !drawn.dims.is_empty() {
        let sizes: Vec<String> = drawn
            .dims
            .iter()
            .map(|d| format!("{}={}", d.name, d.size))
            .collect();
        hint += &format!(" with {}", sizes.join(", "));
    }
    if !tried.is_empty() {
        let sizes: Vec<String> = tried.iter().map(usize::to_string).collect();
        hint += &format!(" (also tried {} = {})", free.join(", "), sizes.join(", "));
    }
    let wanted: Vec<&str> = if free.is_empty() {
        drawn.dims.iter().map(|d| d.name.as_str()).collect()
    } else {
        free.iter().map(String::as_str).collect()
    };
    if wanted.is_empty() {
        hint += "; give inputs with --input NAME=FILE";
    } else {
        let flags: Vec<String> = wanted.iter().map(|n| format!("--dim {n}=VALUE")).collect();
        hint += &format!(
            "; give sizes with {} or inputs with --input NAME=FILE",
            flags.join(" ")
        );
    }
    hint
}
